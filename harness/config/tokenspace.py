"""Which token ids a workload may draw for a given model (its vocabulary minus special tokens)."""

from __future__ import annotations

from engines.model.config import ModelConfig
from workloads.base import TokenSpace


def token_space_for(model: ModelConfig) -> TokenSpace:
    if model.tokenizer is not None:  # a real tokenizer's vocabulary: skip its control tokens
        from workloads.tokenizer import first_ordinary_id

        return TokenSpace(
            vocab_size=model.vocab_size,
            first_ordinary_id=first_ordinary_id(model.tokenizer),
            max_request_tokens=model.max_position_embeddings,
        )
    # Made-up vocabularies have no special tokens; keep id 0 out of workloads all the same.
    return TokenSpace(
        vocab_size=model.vocab_size,
        first_ordinary_id=1,
        max_request_tokens=model.max_position_embeddings,
    )
