"""The KV pool: one preallocated K and one V tensor per layer, `[num_blocks, block_size, kv_heads,
head_dim]`, shared by both cache designs (APC blocks of 16, radix pages of 1 are the same layout).

Block 0 is reserved (vLLM's null block, SGLang's dummy slot 0): block tables pad with it and no
cache hands it out. The pool only stores tensors; allocation belongs to the cache, addressing
(slot_mapping, block_table) to AttentionMetadata.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class KVPoolShape:
    """What one pool holds, so capacity can be planned before any memory is allocated."""

    num_layers: int
    num_blocks: int  # including the reserved block 0
    block_size: int
    num_kv_heads: int
    head_dim: int
    dtype: torch.dtype

    @property
    def bytes_per_token(self) -> int:
        """K and V of one token across all layers."""
        element_size = torch.empty((), dtype=self.dtype).element_size()
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * element_size

    @property
    def capacity_tokens(self) -> int:
        """Usable tokens: every block but the reserved one."""
        return (self.num_blocks - 1) * self.block_size

    @property
    def total_bytes(self) -> int:
        return self.num_blocks * self.block_size * self.bytes_per_token


def num_blocks_for_tokens(capacity_tokens: int, block_size: int) -> int:
    """Pool blocks (reserved block included) that give at least `capacity_tokens` usable tokens."""
    if capacity_tokens < 0 or block_size <= 0:
        raise ValueError(
            f"need capacity_tokens >= 0 and block_size > 0, got {capacity_tokens}, {block_size}"
        )
    return -(-capacity_tokens // block_size) + 1


class KVPool:
    """Per-layer K/V tensors `[num_blocks, block_size, num_kv_heads, head_dim]`, zero-initialised.

    Zeros (not `torch.empty`) matter: padded reads of a block's unused tail must never meet NaN
    bit patterns, which a masked softmax weight of 0 would still turn into NaN.
    """

    def __init__(
        self,
        num_layers: int,
        num_blocks: int,
        block_size: int,
        num_kv_heads: int,
        head_dim: int,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
    ) -> None:
        for name, value in (
            ("num_layers", num_layers),
            ("block_size", block_size),
            ("num_kv_heads", num_kv_heads),
            ("head_dim", head_dim),
        ):
            if value <= 0:
                raise ValueError(f"{name} must be positive, got {value}")
        if num_blocks < 2:
            raise ValueError(f"num_blocks must be >= 2 (block 0 is reserved), got {num_blocks}")
        self.shape = KVPoolShape(num_layers, num_blocks, block_size, num_kv_heads, head_dim, dtype)
        self.device = torch.device(device)
        dims = (num_blocks, block_size, num_kv_heads, head_dim)
        self.k_cache: list[torch.Tensor] = [
            torch.zeros(dims, dtype=dtype, device=self.device) for _ in range(num_layers)
        ]
        self.v_cache: list[torch.Tensor] = [
            torch.zeros(dims, dtype=dtype, device=self.device) for _ in range(num_layers)
        ]

    @classmethod
    def for_capacity(
        cls,
        capacity_tokens: int,
        num_layers: int,
        block_size: int,
        num_kv_heads: int,
        head_dim: int,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
    ) -> KVPool:
        """A pool with at least `capacity_tokens` usable tokens (plus the reserved block)."""
        num_blocks = num_blocks_for_tokens(capacity_tokens, block_size)
        return cls(num_layers, num_blocks, block_size, num_kv_heads, head_dim, dtype, device)

    @property
    def num_layers(self) -> int:
        return self.shape.num_layers

    @property
    def num_blocks(self) -> int:
        return self.shape.num_blocks

    @property
    def block_size(self) -> int:
        return self.shape.block_size

    @property
    def num_kv_heads(self) -> int:
        return self.shape.num_kv_heads

    @property
    def head_dim(self) -> int:
        return self.shape.head_dim

    @property
    def dtype(self) -> torch.dtype:
        return self.shape.dtype

    @property
    def capacity_tokens(self) -> int:
        return self.shape.capacity_tokens

    @property
    def capacity_blocks(self) -> int:
        return self.shape.num_blocks - 1

    @property
    def bytes_per_token(self) -> int:
        return self.shape.bytes_per_token

    @property
    def total_bytes(self) -> int:
        return self.shape.total_bytes

    def layer(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(K, V) of one layer."""
        return self.k_cache[index], self.v_cache[index]

    def read_tokens(self, layer: int, slots: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """K and V `[len(slots), num_kv_heads, head_dim]` at flat slot ids (block * B + offset)."""
        flat = (-1, self.num_kv_heads, self.head_dim)
        slots = slots.to(device=self.device, dtype=torch.int64)
        return self.k_cache[layer].view(flat)[slots], self.v_cache[layer].view(flat)[slots]

    def zero_(self) -> None:
        """Clear every layer (tests and `reset()`; caches never rely on content being cleared)."""
        for k, v in zip(self.k_cache, self.v_cache):
            k.zero_()
            v.zero_()
