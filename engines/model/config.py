"""Model configuration: the shape of a Llama-style decoder and where its weights come from.

Field names follow Hugging Face's LlamaConfig where one exists (`num_layers` is its
`num_hidden_layers`). `weights` names a source in `engines.model.weights.WEIGHTS`; `seed` seeds the
random source; `tokenizer` names the real tokenizer of the vocabulary, if it has one. Presets
live in `engines.model.presets` and, identically, in `conf/model/*.yaml`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from engines.errors import BadInput

if TYPE_CHECKING:
    import torch

# The names of torch dtypes a model may run in. Strings, so a config (and a simulated run, which
# has no model to run) never imports torch: that import alone is ~2.5 s on a 2-core CPU.
DTYPES = ("float32", "float16", "bfloat16")
INIT_DEVICES = ("cpu", "target")  # where random weights are drawn (ModelConfig.init_device)


@dataclass
class ModelConfig:
    name: str = "tiny"
    vocab_size: int = 1024
    hidden_size: int = 64
    intermediate_size: int = 172
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 2
    head_dim: int = 16
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-5
    max_position_embeddings: int = 2048
    tie_word_embeddings: bool = True
    dtype: str = "float32"  # float32 | float16 | bfloat16
    weights: str = "random"  # random | smollm2
    seed: int = 0
    # Where random weights are drawn: "cpu" (the default: the same values on every device) or
    # "target" (on the device the model runs on: an 8B shape builds in seconds on a GPU; the
    # values then follow that device's generator).
    init_device: str = "cpu"
    # The tokenizer whose vocabulary the ids are (a workloads.tokenizer name), for models that
    # take text; None: a made-up vocabulary, token ids only.
    tokenizer: str | None = None

    def validate(self) -> None:
        """Raise BadInput naming the first field no model accepts."""
        positive = (
            "vocab_size",
            "hidden_size",
            "intermediate_size",
            "num_layers",
            "num_heads",
            "num_kv_heads",
            "head_dim",
            "max_position_embeddings",
        )
        for name in positive:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise BadInput(f"model.{name} must be a positive integer, got {value!r}")
        if self.num_heads % self.num_kv_heads:
            raise BadInput(
                f"model.num_heads ({self.num_heads}) must be a multiple of "
                f"model.num_kv_heads ({self.num_kv_heads})"
            )
        if self.head_dim % 2:
            raise BadInput(f"model.head_dim must be even for RoPE, got {self.head_dim}")
        for name in ("rope_theta", "rms_norm_eps"):
            value = getattr(self, name)
            if (
                not isinstance(value, (int, float))
                or isinstance(value, bool)
                or not 0 < value < math.inf
            ):
                raise BadInput(f"model.{name} must be a positive number, got {value!r}")
        if not isinstance(self.tie_word_embeddings, bool):
            raise BadInput(
                f"model.tie_word_embeddings must be a bool, got {self.tie_word_embeddings!r}"
            )
        if self.dtype not in DTYPES:
            raise BadInput(f"model.dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")
        if self.init_device not in INIT_DEVICES:
            raise BadInput(
                f"model.init_device must be one of {', '.join(INIT_DEVICES)}, got {self.init_device!r}"
            )
        if not isinstance(self.seed, int) or isinstance(self.seed, bool):
            raise BadInput(f"model.seed must be an integer, got {self.seed!r}")
        if self.tokenizer is not None and (
            not isinstance(self.tokenizer, str) or not self.tokenizer
        ):
            raise BadInput(
                f"model.tokenizer must be a tokenizer name or null, got {self.tokenizer!r}"
            )
        # Imported here: the weight sources import the model, which imports this module.
        from engines.model.weights import WEIGHTS

        if self.weights not in WEIGHTS:
            raise BadInput(
                f"model.weights must be one of {', '.join(WEIGHTS)}, got {self.weights!r}"
            )

    @property
    def torch_dtype(self) -> torch.dtype:
        import torch

        dtype: torch.dtype = getattr(torch, self.dtype)
        return dtype

    @property
    def q_size(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.num_kv_heads * self.head_dim
