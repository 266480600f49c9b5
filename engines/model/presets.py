"""Named model presets, usable without Hydra: the one source of their values (`conf/model/<name>.yaml`
only selects one, through the `model/preset_<name>` node harness/config/schema.py stores).

`tiny` is for tests, `s` is the default CPU benchmark model (both seeded random weights),
`smollm2-135m` is SmolLM2-135M-Instruct, whose shape is the one its GGUF metadata declares
(checked against the file when the weights load), and `smollm2-rand` is the `s` shape with
SmolLM2's vocabulary and tokenizer on random weights: a fast model that takes text (a server's
text prompts, datasets tokenized with SmolLM2's tokenizer).
"""

from __future__ import annotations

import dataclasses

from engines.model.config import ModelConfig
from engines.registry import Registry

# Shared instances: read them, or take a private copy with get_preset() before changing one.
PRESETS: Registry[ModelConfig] = Registry("model preset")

PRESETS.add(
    "tiny",
    ModelConfig(
        name="tiny",
        vocab_size=1024,
        hidden_size=64,
        intermediate_size=172,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        head_dim=16,
        rope_theta=10000.0,
        rms_norm_eps=1e-5,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        dtype="float32",
        weights="random",
        seed=0,
    ),
)

PRESETS.add(
    "s",
    ModelConfig(
        name="s",
        vocab_size=32000,
        hidden_size=256,
        intermediate_size=688,
        num_layers=4,
        num_heads=4,
        num_kv_heads=2,
        head_dim=64,
        rope_theta=10000.0,
        rms_norm_eps=1e-5,
        max_position_embeddings=32768,
        tie_word_embeddings=True,
        dtype="float32",
        weights="random",
        seed=0,
    ),
)

# GGUF metadata: llama.block_count 30, embedding_length 576, feed_forward_length 1536,
# head_count 9, head_count_kv 3, rope.freq_base 100000, context_length 8192, no output.weight.
PRESETS.add(
    "smollm2-135m",
    ModelConfig(
        name="smollm2-135m",
        vocab_size=49152,
        hidden_size=576,
        intermediate_size=1536,
        num_layers=30,
        num_heads=9,
        num_kv_heads=3,
        head_dim=64,
        rope_theta=100000.0,
        rms_norm_eps=1e-5,
        max_position_embeddings=8192,
        tie_word_embeddings=True,
        dtype="float32",
        weights="smollm2",
        seed=0,
        tokenizer="smollm2-135m",
    ),
)

# `s` with SmolLM2's 49,152-token vocabulary (ids mean SmolLM2 tokens) and its 8,192 context.
PRESETS.add(
    "smollm2-rand",
    ModelConfig(
        name="smollm2-rand",
        vocab_size=49152,
        hidden_size=256,
        intermediate_size=688,
        num_layers=4,
        num_heads=4,
        num_kv_heads=2,
        head_dim=64,
        rope_theta=10000.0,
        rms_norm_eps=1e-5,
        max_position_embeddings=8192,
        tie_word_embeddings=True,
        dtype="float32",
        weights="random",
        seed=0,
        tokenizer="smollm2-135m",
    ),
)


def get_preset(name: str) -> ModelConfig:
    """A private copy of preset `name`; an unknown name fails listing the valid ones."""
    return dataclasses.replace(PRESETS.get(name))
