"""Triton decode attention: one query token per sequence, split-KV, a KV tile read once per group.

One program per (sequence, KV head, split) holds the qpk = Hq/Hkv query heads that share the KV
head as the rows of one tile, so every K/V row it gathers through the block table serves all of
them (GQA packing; the unified kernel in triton_paged.py spends 3/4 of a 16-row tile on padding
tokens for decode). The keys are cut into splits sized from occupancy (enough programs for a few
waves over the SMs, at least MIN_KEYS_PER_SPLIT keys each); partial (max, sum, acc) rows are merged
by triton_paged's reduce kernel. Key j is read at block_table[s, j // B], offset j % B: a gather of
one head_dim row per key whatever B is, so page 1 and page 16 read the same bytes the same way.
The split count is a host choice (batch size, longest sequence); each program derives its key
range from the device's seq_lens, so results never depend on it and a CUDA graph captured with
one split count stays exact for any lengths.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from engines.attention.metadata import AttentionMetadata
from engines.attention.triton_paged import (
    HAS_TRITON,
    INTERPRET,
    LOG2E,
    _check_device,
    _next_pow2,
    _num_sms,
    paged_attention_triton,
    store_kv_triton,
)

if HAS_TRITON:
    import triton
    import triton.language as tl

    from engines.attention.triton_paged import _reduce_segments_kernel

MAX_SPLITS = 32
MIN_KEYS_PER_SPLIT = 256  # below this a split's fixed cost (q load, partial write) shows
WAVES = 4  # programs per SM the split count aims for: loads in flight hide the gather latency

if HAS_TRITON:

    @triton.jit
    def _decode_kernel(
        q_ptr,
        out_ptr,
        k_cache_ptr,
        v_cache_ptr,
        block_table_ptr,
        seq_lens_ptr,
        part_acc_ptr,
        part_max_ptr,
        part_sum_ptr,
        scale_log2,
        stride_qt,
        stride_qh,
        stride_ot,
        stride_oh,
        stride_kb,
        stride_ks,
        stride_kh,
        stride_vb,
        stride_vs,
        stride_vh,
        stride_bt,
        QPK: tl.constexpr,
        ROWS: tl.constexpr,
        NUM_HEADS: tl.constexpr,
        HEAD_DIM: tl.constexpr,
        HEAD_DIM_P: tl.constexpr,
        BLOCK_SIZE: tl.constexpr,
        TILE: tl.constexpr,
        NUM_SPLITS: tl.constexpr,
        UPCAST: tl.constexpr,
        PRECISION: tl.constexpr,
    ):
        seq = tl.program_id(0)  # = its query token: every sequence has exactly one
        kv_head = tl.program_id(1)
        split = tl.program_id(2)
        seq_len = tl.load(seq_lens_ptr + seq)

        rows = tl.arange(0, ROWS)
        head = kv_head * QPK + rows
        row_ok = rows < QPK
        d = tl.arange(0, HEAD_DIM_P)
        d_ok = d < HEAD_DIM
        q_off = seq * stride_qt + head[:, None] * stride_qh + d[None, :]
        q = tl.load(q_ptr + q_off, mask=row_ok[:, None] & d_ok[None, :], other=0.0)
        if UPCAST:  # the interpreter's dot has no bf16
            q = q.to(tl.float32)

        # The one query is the last token: it sees every key, so no causal mask, only the range.
        chunk = tl.cdiv(tl.cdiv(seq_len, NUM_SPLITS), TILE) * TILE
        lo = split * chunk
        hi = tl.minimum(lo + chunk, seq_len)
        m_i = tl.full([ROWS], float("-inf"), tl.float32)
        l_i = tl.zeros([ROWS], tl.float32)
        acc = tl.zeros([ROWS, HEAD_DIM_P], tl.float32)
        kv_mask_d = d_ok[None, :]
        for start in range(lo, hi, TILE):
            j = start + tl.arange(0, TILE)
            j_ok = j < hi
            block = tl.load(block_table_ptr + seq * stride_bt + j // BLOCK_SIZE, mask=j_ok, other=0)
            block = block.to(tl.int64)
            offset = j % BLOCK_SIZE
            k_off = block[:, None] * stride_kb + offset[:, None] * stride_ks + kv_head * stride_kh
            v_off = block[:, None] * stride_vb + offset[:, None] * stride_vs + kv_head * stride_vh
            kv_mask = j_ok[:, None] & kv_mask_d
            k = tl.load(k_cache_ptr + k_off + d[None, :], mask=kv_mask, other=0.0)
            v = tl.load(v_cache_ptr + v_off + d[None, :], mask=kv_mask, other=0.0)
            if UPCAST:
                k = k.to(tl.float32)
                v = v.to(tl.float32)
            s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * scale_log2
            s = tl.where(j_ok[None, :], s, float("-inf"))
            # Every tile holds >= 1 valid key (start < hi), so m_new is finite on every row.
            m_new = tl.maximum(m_i, tl.max(s, 1))
            alpha = tl.exp2(m_i - m_new)
            p = tl.exp2(s - m_new[:, None])
            l_i = l_i * alpha + tl.sum(p, 1)
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
            m_i = m_new

        out_mask = row_ok[:, None] & d_ok[None, :]
        if NUM_SPLITS == 1:
            out = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]
            o_off = seq * stride_ot + head[:, None] * stride_oh + d[None, :]
            tl.store(out_ptr + o_off, out.to(out_ptr.dtype.element_ty), mask=out_mask)
        else:
            # Partials [T, Hq, S(, D_P)], the reduce kernel's layout; empty splits store m = -inf.
            row = (seq * NUM_HEADS + head) * NUM_SPLITS + split
            tl.store(part_max_ptr + row, m_i, mask=row_ok)
            tl.store(part_sum_ptr + row, l_i, mask=row_ok)
            tl.store(part_acc_ptr + row[:, None] * HEAD_DIM_P + d[None, :], acc, mask=out_mask)


class DecodeConfig(NamedTuple):
    tile: int  # keys per inner iteration
    num_splits: int  # KV splits per (sequence, KV head); 1 = no reduce pass
    num_warps: int
    num_stages: int


def decode_splits(
    num_seqs: int, num_kv_heads: int, max_seq_len: int, num_sms: int, waves: int = WAVES
) -> int:
    """Splits so that (sequences x KV heads x splits) programs give `waves` per SM, each split
    keeping >= MIN_KEYS_PER_SPLIT keys; large batches get 1 (no reduce pass)."""
    programs = max(1, num_seqs * num_kv_heads)
    want = -(-waves * num_sms // programs)
    by_keys = max(1, max_seq_len // MIN_KEYS_PER_SPLIT)
    return max(1, min(MAX_SPLITS, want, by_keys))


def decode_config(q: torch.Tensor, num_kv_heads: int, meta: AttentionMetadata) -> DecodeConfig:
    wide = q.element_size() <= 2 and not INTERPRET
    splits = 1
    if q.device.type == "cuda":
        splits = decode_splits(meta.num_seqs, num_kv_heads, meta.max_seq_len, _num_sms(q.device))
    return DecodeConfig(tile=64 if wide else 32, num_splits=splits, num_warps=4, num_stages=3)


def is_decode_batch(q: torch.Tensor, meta: AttentionMetadata) -> bool:
    """Every sequence has exactly one new token (T == num_seqs and none has more than one)."""
    return meta.max_query_len == 1 and q.shape[0] == meta.num_seqs


def decode_attention_triton(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    meta: AttentionMetadata,
    scale: float,
    config: DecodeConfig | None = None,
) -> torch.Tensor:
    """q `[num_seqs, Hq, D]` (one token per sequence) against the paged cache -> `[num_seqs, Hq, D]`.

    Reads `meta.block_table` and `meta.seq_lens` only. `config` overrides the launch (tests force
    splits; the benchmark sweeps tiles and stages)."""
    _check_device(q)
    num_tokens, num_heads, head_dim = q.shape
    num_kv_heads = k_cache.shape[2]
    if num_heads % num_kv_heads:
        raise ValueError(f"{num_heads} query heads are not a multiple of {num_kv_heads} KV heads")
    if not is_decode_batch(q, meta):
        raise ValueError("decode_attention_triton needs exactly one new token per sequence")
    if q.stride(2) != 1 or k_cache.stride(3) != 1 or v_cache.stride(3) != 1:
        raise ValueError("decode_attention_triton needs unit-stride head_dim")
    out = torch.empty_like(q)
    if num_tokens == 0:
        return out
    cfg = config or decode_config(q, num_kv_heads, meta)
    qpk = num_heads // num_kv_heads
    head_dim_p = max(16, _next_pow2(head_dim))  # tl.dot needs K >= 16
    splits = cfg.num_splits
    parts = (num_tokens, num_heads, splits)
    f32, dev = torch.float32, q.device
    part_acc = torch.empty((*parts, head_dim_p), dtype=f32, device=dev) if splits > 1 else out
    part_max = torch.empty(parts, dtype=f32, device=dev) if splits > 1 else out
    part_sum = torch.empty(parts, dtype=f32, device=dev) if splits > 1 else out
    _decode_kernel[(meta.num_seqs, num_kv_heads, splits)](
        q,
        out,
        k_cache,
        v_cache,
        meta.block_table,
        meta.seq_lens,
        part_acc,
        part_max,
        part_sum,
        scale * LOG2E,
        q.stride(0),
        q.stride(1),
        out.stride(0),
        out.stride(1),
        k_cache.stride(0),
        k_cache.stride(1),
        k_cache.stride(2),
        v_cache.stride(0),
        v_cache.stride(1),
        v_cache.stride(2),
        meta.block_table.stride(0),
        QPK=qpk,
        ROWS=max(16, _next_pow2(qpk)),  # tl.dot needs M >= 16
        NUM_HEADS=num_heads,
        HEAD_DIM=head_dim,
        HEAD_DIM_P=head_dim_p,
        BLOCK_SIZE=meta.block_size,
        TILE=cfg.tile,
        NUM_SPLITS=splits,
        UPCAST=INTERPRET,
        PRECISION="ieee" if q.dtype == torch.float32 or INTERPRET else None,
        num_warps=cfg.num_warps,
        num_stages=cfg.num_stages,
    )
    if splits > 1:
        _reduce_segments_kernel[(num_tokens, num_heads)](
            out,
            part_acc,
            part_max,
            part_sum,
            out.stride(0),
            out.stride(1),
            NUM_HEADS=num_heads,
            HEAD_DIM=head_dim,
            HEAD_DIM_P=head_dim_p,
            NUM_SEGMENTS=splits,
            SEGMENTS_P=_next_pow2(splits),
        )
    return out


class TritonPagedBackend:
    """`backend=triton`: the store kernel, then the decode kernel for pure decode batches and the
    unified paged kernel for everything else (CUDA, or interpreted CPU)."""

    name = "triton"

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
        # Write before read: the kernels read new tokens from the cache, never from k/v.
        store_kv_triton(k, v, k_cache, v_cache, meta.slot_mapping)
        if is_decode_batch(q, meta):
            return decode_attention_triton(q, k_cache, v_cache, meta, scale)
        return paged_attention_triton(q, k_cache, v_cache, meta, scale)
