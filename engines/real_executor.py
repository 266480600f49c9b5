"""The real executor: one model forward per step on the paged KV pool.

It packs the new tokens of every scheduled sequence into one varlen batch, builds the attention
metadata from each sequence's block table, runs the model once, and emits a token for every
sequence whose step reached its last known token: the scripted reply's next token (scripted
decoding, the default) or the greedy argmax.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from engines.attention.backend import AttentionBackend
from engines.attention.metadata import AttentionMetadata
from engines.cache.protocol import BlockTables
from engines.clock import RunClock
from engines.executor import DecodeRunResult
from engines.kv_pool import KVPool
from engines.model.llama import LlamaModel
from engines.sched.base import DecodeRun, StepPlan
from engines.sequence import Sequence


def next_token(seq: Sequence, logits_row: torch.Tensor | None) -> int:
    """Scripted decoding emits the script; otherwise greedy argmax of the row."""
    if seq.scripted_output_ids is not None:
        return seq.scripted_output_ids[seq.num_output_tokens]
    assert logits_row is not None
    return int(torch.argmax(logits_row).item())


@dataclass
class RealExecutor:
    decode_runs: ClassVar[bool] = False  # every step runs the model

    model: LlamaModel
    kv_pool: KVPool
    attn: AttentionBackend
    cache: BlockTables  # a cache, or calibrate.py's stand-in layout
    clock: RunClock
    device: torch.device
    # When a dict: each sequence's first-token logits (float32, CPU), keyed by id, for checks
    # that a cached prefix gave the same K/V as computing it (claim 7). None: not kept.
    first_logits: dict[str, torch.Tensor] | None = None

    def execute_decode_run(self, run: DecodeRun, until_s: float) -> DecodeRunResult:
        """Never called: `decode_runs` is False, so the engine steps every decode."""
        raise NotImplementedError("the real executor runs every step (decode_runs is False)")

    @torch.inference_mode()
    def execute(self, plan: StepPlan) -> dict[str, int]:
        items = plan.scheduled
        if not items:
            return {}
        ids = [tok for it in items for tok in it.seq.token_ids[it.start : it.end]]
        meta = AttentionMetadata.build(
            [it.start for it in items],
            [it.num_new_tokens for it in items],
            [self.cache.block_table(it.seq) for it in items],
            self.cache.block_size,
            self.device,
        )
        input_ids = torch.tensor(ids, dtype=torch.int64, device=self.device)
        hidden = self.model(input_ids, meta, self.kv_pool, self.attn)
        logits = self.model.compute_logits(hidden, meta)
        out: dict[str, int] = {}
        for row, it in enumerate(items):
            if it.end == it.seq.num_tokens:
                out[it.seq.seq_id] = next_token(it.seq, logits[row])
                if self.first_logits is not None and it.seq.num_output_tokens == 0:
                    self.first_logits[it.seq.seq_id] = logits[row].float().cpu()
        return out
