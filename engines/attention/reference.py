"""Dense, unpaged reference attention (docs/apc.md §14.7), the oracle of every backend's tests.

`dense_attention` takes each sequence's keys and values as plain tensors; `reference_attention`
gathers them from a paged cache through the block table first. Both compute in float64 with an
explicit softmax, so they share no code path with the backends they check.
"""

from __future__ import annotations

import torch

from engines.attention.metadata import AttentionMetadata


def dense_attention(
    q: torch.Tensor,
    keys: list[torch.Tensor],
    values: list[torch.Tensor],
    query_lens: list[int] | tuple[int, ...],
    context_lens: list[int] | tuple[int, ...],
    scale: float,
) -> torch.Tensor:
    """q `[T, Hq, D]`; keys[s]/values[s] `[context + query, Hkv, D]`; returns `[T, Hq, D]` in q's dtype.

    Bottom-right-aligned causal mask: local query i of sequence s sees key j iff j <= context + i.
    """
    num_heads = q.shape[1]
    out = torch.empty_like(q)
    start = 0
    for k, v, q_len, ctx in zip(keys, values, query_lens, context_lens):
        if k.shape[0] != ctx + q_len:
            raise ValueError(f"sequence has {k.shape[0]} keys, expected {ctx} + {q_len}")
        qpk = num_heads // k.shape[1]
        qs = q[start : start + q_len].double().transpose(0, 1)  # [Hq, q_len, D]
        ks = k.double().repeat_interleave(qpk, dim=1).transpose(0, 1)  # [Hq, L, D]
        vs = v.double().repeat_interleave(qpk, dim=1).transpose(0, 1)
        visible = torch.ones(q_len, ctx + q_len, dtype=torch.bool, device=q.device).tril(
            diagonal=ctx
        )
        scores = (qs @ ks.transpose(1, 2)) * scale
        scores = scores.masked_fill(~visible, float("-inf"))
        out[start : start + q_len] = (scores.softmax(dim=-1) @ vs).transpose(0, 1).to(q.dtype)
        start += q_len
    return out


def gather_sequence_kv(
    k_cache: torch.Tensor, v_cache: torch.Tensor, meta: AttentionMetadata, seq: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """All `seq_len` keys and values of one sequence, `[seq_len, Hkv, D]`, read through its pages."""
    block_size = meta.block_size
    seq_len = meta.context_lens_host[seq] + meta.query_lens_host[seq]
    num_pages = -(-seq_len // block_size)
    pages = meta.block_table[seq, :num_pages].long()
    shape = (-1, *k_cache.shape[2:])
    return k_cache[pages].reshape(shape)[:seq_len], v_cache[pages].reshape(shape)[:seq_len]


def reference_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    meta: AttentionMetadata,
    scale: float,
) -> torch.Tensor:
    """Attention over K/V already in the paged cache (new tokens included): gather, then dense."""
    pairs = [gather_sequence_kv(k_cache, v_cache, meta, s) for s in range(meta.num_seqs)]
    return dense_attention(
        q,
        [k for k, _ in pairs],
        [v for _, v in pairs],
        meta.query_lens_host,
        meta.context_lens_host,
        scale,
    )
