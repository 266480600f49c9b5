"""The attention-backend interface and its registry (`backend=auto|triton|torch`).

Every backend stores the step's new K/V into the paged cache first, then attends (write before
read: a block may be matchable, and read by another sequence of the same step, before the forward
pass fills it). `auto` picks triton on CUDA and torch elsewhere.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import torch

from engines.attention.metadata import AttentionMetadata
from engines.attention.torch_paged import TorchPagedBackend
from engines.attention.triton_decode import TritonPagedBackend
from engines.attention.triton_paged import HAS_TRITON
from engines.registry import Registry


class AttentionBackend(Protocol):
    name: str

    def forward(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        meta: AttentionMetadata,
        scale: float,
    ) -> torch.Tensor:
        """q `[T, Hq, D]`, this step's k/v `[T, Hkv, D]`, one layer's caches `[num_blocks, B, Hkv, D]`.

        Stores k/v at `meta.slot_mapping`, then returns `[T, Hq, D]`: local query i of sequence s
        attends to keys j <= context_len[s] + i, read through `meta.block_table`.
        """
        ...


BackendFactory = Callable[[torch.device], AttentionBackend]
ATTENTION_BACKENDS: Registry[BackendFactory] = Registry("attention backend")


@ATTENTION_BACKENDS.register("torch")
def _torch(device: torch.device) -> AttentionBackend:
    return TorchPagedBackend()


@ATTENTION_BACKENDS.register("triton")
def _triton(device: torch.device) -> AttentionBackend:
    if not HAS_TRITON:
        raise RuntimeError("attention backend 'triton' needs the triton package; use backend=torch")
    return TritonPagedBackend()


@ATTENTION_BACKENDS.register("auto")
def _auto(device: torch.device) -> AttentionBackend:
    # The interpreter is for tests only: on CPU the torch path is orders of magnitude faster.
    name = "triton" if device.type == "cuda" and HAS_TRITON else "torch"
    return ATTENTION_BACKENDS.get(name)(device)


def get_attention_backend(name: str, device: torch.device | str = "cpu") -> AttentionBackend:
    """The backend called `name` for tensors on `device`; unknown names list the valid ones."""
    return ATTENTION_BACKENDS.get(name)(torch.device(device))
