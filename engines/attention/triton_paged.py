"""Triton paged attention: a store-KV kernel and the unified attention kernel (any query lengths).

One program per (sequence, q-tile, KV head[, KV segment]) packs the qpk = Hq/Hkv query heads that
share a KV head into its rows (vLLM unified attention, docs/apc.md §14.5), gathers K/V through the
block table for any block size (1 included) and runs an online softmax in fp32. Decode batches too
small to fill the GPU split the keys into segments, merged by a reduce kernel. Pure decode batches
go to triton_decode.py instead (the backend, TritonPagedBackend, lives there). Runs on CPU tensors
under TRITON_INTERPRET=1 (read at import, like `triton.jit`); importing without triton is fine.
"""

from __future__ import annotations

import math
import os
from typing import NamedTuple

import torch

from engines.attention.metadata import AttentionMetadata

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU-only installs: the torch backend still works
    triton = None
    tl = None

HAS_TRITON = triton is not None
INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"
LOG2E = 1.4426950408889634
MAX_SEGMENTS = 16

if HAS_TRITON:

    @triton.jit
    def _store_kv_kernel(
        k_ptr,
        v_ptr,
        k_cache_ptr,
        v_cache_ptr,
        slot_ptr,
        stride_kt,
        stride_kh,
        stride_vt,
        stride_vh,
        stride_cb,
        stride_cs,
        stride_ch,
        NUM_KV_HEADS: tl.constexpr,
        HEAD_DIM: tl.constexpr,
        HEADS_P: tl.constexpr,
        HEAD_DIM_P: tl.constexpr,
        BLOCK_SIZE: tl.constexpr,
    ):
        token = tl.program_id(0)
        slot = tl.load(slot_ptr + token)
        h = tl.arange(0, HEADS_P)[:, None]
        d = tl.arange(0, HEAD_DIM_P)[None, :]
        # Negative slots are padding: the mask drops the whole row (no scalar branch needed).
        mask = (h < NUM_KV_HEADS) & (d < HEAD_DIM) & (slot >= 0)
        safe = tl.maximum(slot, 0)
        dst = (safe // BLOCK_SIZE) * stride_cb + (safe % BLOCK_SIZE) * stride_cs + h * stride_ch + d
        k = tl.load(k_ptr + token * stride_kt + h * stride_kh + d, mask=mask)
        v = tl.load(v_ptr + token * stride_vt + h * stride_vh + d, mask=mask)
        tl.store(k_cache_ptr + dst, k.to(k_cache_ptr.dtype.element_ty), mask=mask)
        tl.store(v_cache_ptr + dst, v.to(v_cache_ptr.dtype.element_ty), mask=mask)

    @triton.jit
    def _paged_attention_kernel(
        q_ptr,
        out_ptr,
        k_cache_ptr,
        v_cache_ptr,
        block_table_ptr,
        query_start_ptr,
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
        NUM_HEADS: tl.constexpr,
        HEAD_DIM: tl.constexpr,
        HEAD_DIM_P: tl.constexpr,
        BLOCK_SIZE: tl.constexpr,
        BLOCK_M: tl.constexpr,
        BLOCK_Q: tl.constexpr,
        TILE: tl.constexpr,
        NUM_SEGMENTS: tl.constexpr,
        UPCAST: tl.constexpr,
        PRECISION: tl.constexpr,
    ):
        seq = tl.program_id(0)
        q_tile = tl.program_id(1)
        kv_head = tl.program_id(2) // NUM_SEGMENTS
        segment = tl.program_id(2) % NUM_SEGMENTS
        q_start = tl.load(query_start_ptr + seq)
        q_len = tl.load(query_start_ptr + seq + 1) - q_start
        if q_tile * BLOCK_Q >= q_len:  # grids are sized for the longest query of the batch
            return
        seq_len = tl.load(seq_lens_ptr + seq)
        context_len = seq_len - q_len

        # Row m of the tile is local query token q_tile*BLOCK_Q + m // QPK, head kv_head*QPK + m % QPK.
        rows = tl.arange(0, BLOCK_M)
        tok = q_tile * BLOCK_Q + rows // QPK
        head = kv_head * QPK + rows % QPK
        row_ok = (tok < q_len) & (rows < BLOCK_Q * QPK)
        d = tl.arange(0, HEAD_DIM_P)
        d_ok = d < HEAD_DIM
        q_off = (q_start + tok)[:, None] * stride_qt + head[:, None] * stride_qh + d[None, :]
        q = tl.load(q_ptr + q_off, mask=row_ok[:, None] & d_ok[None, :], other=0.0)
        if UPCAST:  # the interpreter's dot has no bf16; fp32 is also the exact reference
            q = q.to(tl.float32)

        # The tile's last query sees keys [0, kv_end); segment `segment` takes one TILE-aligned slice.
        kv_end = tl.minimum(context_len + (q_tile + 1) * BLOCK_Q, seq_len)
        seg_len = tl.cdiv(tl.cdiv(kv_end, NUM_SEGMENTS), TILE) * TILE
        kv_lo = segment * seg_len
        kv_hi = tl.minimum(kv_lo + seg_len, kv_end)

        m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK_M], tl.float32)
        acc = tl.zeros([BLOCK_M, HEAD_DIM_P], tl.float32)
        for start in range(kv_lo, kv_hi, TILE):
            j = start + tl.arange(0, TILE)
            j_ok = j < kv_hi
            # Key j lives in block block_table[seq, j // B] at offset j % B (B = 1: a slot list).
            block = tl.load(block_table_ptr + seq * stride_bt + j // BLOCK_SIZE, mask=j_ok, other=0)
            block = block.to(tl.int64)
            offset = j % BLOCK_SIZE
            kv_mask = j_ok[:, None] & d_ok[None, :]
            k_off = block[:, None] * stride_kb + offset[:, None] * stride_ks + kv_head * stride_kh
            v_off = block[:, None] * stride_vb + offset[:, None] * stride_vs + kv_head * stride_vh
            k = tl.load(k_cache_ptr + k_off + d[None, :], mask=kv_mask, other=0.0)
            v = tl.load(v_cache_ptr + v_off + d[None, :], mask=kv_mask, other=0.0)
            if UPCAST:
                k = k.to(tl.float32)
                v = v.to(tl.float32)
            s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * scale_log2
            visible = (j[None, :] <= context_len + tok[:, None]) & j_ok[None, :]
            s = tl.where(visible, s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, 1))
            # Rows with nothing visible yet keep m = -inf; shift by 0 there to avoid inf - inf.
            m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
            alpha = tl.exp2(m_i - m_safe)
            p = tl.exp2(s - m_safe[:, None])
            l_i = l_i * alpha + tl.sum(p, 1)
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
            m_i = m_new

        out_mask = row_ok[:, None] & d_ok[None, :]
        if NUM_SEGMENTS == 1:
            out = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]
            o_off = (q_start + tok)[:, None] * stride_ot + head[:, None] * stride_oh + d[None, :]
            tl.store(out_ptr + o_off, out.to(out_ptr.dtype.element_ty), mask=out_mask)
        else:
            # Partials [T, Hq, S(, D_P)], contiguous; merged by _reduce_segments_kernel.
            row = ((q_start + tok) * NUM_HEADS + head) * NUM_SEGMENTS + segment
            tl.store(part_max_ptr + row, m_i, mask=row_ok)
            tl.store(part_sum_ptr + row, l_i, mask=row_ok)
            tl.store(part_acc_ptr + row[:, None] * HEAD_DIM_P + d[None, :], acc, mask=out_mask)

    @triton.jit
    def _reduce_segments_kernel(
        out_ptr,
        part_acc_ptr,
        part_max_ptr,
        part_sum_ptr,
        stride_ot,
        stride_oh,
        NUM_HEADS: tl.constexpr,
        HEAD_DIM: tl.constexpr,
        HEAD_DIM_P: tl.constexpr,
        NUM_SEGMENTS: tl.constexpr,
        SEGMENTS_P: tl.constexpr,
    ):
        token = tl.program_id(0)
        head = tl.program_id(1)
        seg = tl.arange(0, SEGMENTS_P)
        seg_ok = seg < NUM_SEGMENTS
        d = tl.arange(0, HEAD_DIM_P)
        row = (token * NUM_HEADS + head) * NUM_SEGMENTS + seg
        m = tl.load(part_max_ptr + row, mask=seg_ok, other=float("-inf"))
        l_s = tl.load(part_sum_ptr + row, mask=seg_ok, other=0.0)
        acc = tl.load(
            part_acc_ptr + row[:, None] * HEAD_DIM_P + d[None, :], mask=seg_ok[:, None], other=0.0
        )
        m_max = tl.max(m, 0)
        m_max = tl.where(m_max == float("-inf"), 0.0, m_max)
        w = tl.exp2(m - m_max)  # empty segments (m = -inf) weigh 0
        total = tl.sum(l_s * w, 0)
        out = tl.sum(acc * w[:, None], 0) / tl.where(total == 0.0, 1.0, total)
        o_off = token * stride_ot + head * stride_oh + d
        tl.store(out_ptr + o_off, out.to(out_ptr.dtype.element_ty), mask=d < HEAD_DIM)


class LaunchConfig(NamedTuple):
    block_m: int  # tile rows = block_q tokens x qpk heads (padded to a power of two)
    block_q: int  # query tokens per tile
    tile: int  # keys per inner iteration
    num_segments: int  # KV splits per (sequence, q-tile, KV head); 1 = no reduce pass
    num_warps: int
    num_stages: int


def _next_pow2(n: int) -> int:
    return 1 << max(0, math.ceil(math.log2(max(n, 1))))


def _num_sms(device: torch.device) -> int:
    if device.type != "cuda":
        return 1
    return torch.cuda.get_device_properties(device).multi_processor_count


def launch_config(
    q: torch.Tensor, num_kv_heads: int, meta: AttentionMetadata, num_segments: int | None = None
) -> LaunchConfig:
    """Tile sizes: 16-row tiles for decode (as vLLM), larger ones for prefill; split-KV only for
    decode batches whose (sequence, KV head) programs would leave most SMs idle."""
    qpk = q.shape[1] // num_kv_heads
    decode = meta.max_query_len <= 1
    wide = q.element_size() <= 2 and not INTERPRET
    block_m = max(16 if decode else (128 if wide else 64), _next_pow2(qpk))
    tile = 64 if wide else 32
    if num_segments is None:
        num_segments = 1
        if decode and q.device.type == "cuda":
            programs = max(1, meta.num_seqs * num_kv_heads)
            num_segments = -(-2 * _num_sms(q.device) // programs)
            num_segments = max(1, min(MAX_SEGMENTS, num_segments, -(-meta.max_seq_len // tile)))
    num_warps = 4 if block_m <= 64 else 8
    return LaunchConfig(block_m, block_m // qpk, tile, num_segments, num_warps, 2 if decode else 3)


def _check_device(t: torch.Tensor) -> None:
    if not HAS_TRITON:
        raise RuntimeError("backend 'triton' needs the triton package; use backend=torch")
    if t.device.type == "cpu" and not INTERPRET:
        raise RuntimeError(
            "backend 'triton' on CPU tensors needs TRITON_INTERPRET=1 set before engines.attention "
            "is imported; use backend=torch on CPU"
        )


def store_kv_triton(
    k: torch.Tensor,
    v: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> None:
    """Write k/v `[T, Hkv, D]` into `[num_blocks, B, Hkv, D]` caches at flat slots; slots < 0 skipped."""
    _check_device(k)
    num_tokens, num_kv_heads, head_dim = k.shape
    if num_tokens == 0:
        return
    if (
        k.stride(2) != 1
        or v.stride(2) != 1
        or k_cache.stride(3) != 1
        or k_cache.stride() != v_cache.stride()
    ):
        raise ValueError("store_kv_triton needs unit-stride head_dim and caches of one layout")
    _store_kv_kernel[(num_tokens,)](
        k,
        v,
        k_cache,
        v_cache,
        slot_mapping,
        k.stride(0),
        k.stride(1),
        v.stride(0),
        v.stride(1),
        k_cache.stride(0),
        k_cache.stride(1),
        k_cache.stride(2),
        NUM_KV_HEADS=num_kv_heads,
        HEAD_DIM=head_dim,
        HEADS_P=_next_pow2(num_kv_heads),
        HEAD_DIM_P=_next_pow2(head_dim),
        BLOCK_SIZE=k_cache.shape[1],
    )


def paged_attention_triton(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    meta: AttentionMetadata,
    scale: float,
    num_segments: int | None = None,
    config: LaunchConfig | None = None,
) -> torch.Tensor:
    """q `[T, Hq, D]` against K/V already in the paged cache (new tokens included) -> `[T, Hq, D]`.

    `num_segments` forces the split-KV path (tests); None picks it from the batch shape. `config`
    replaces the whole launch (the benchmark's sweep).
    """
    _check_device(q)
    num_tokens, num_heads, head_dim = q.shape
    num_kv_heads = k_cache.shape[2]
    if num_heads % num_kv_heads:
        raise ValueError(f"{num_heads} query heads are not a multiple of {num_kv_heads} KV heads")
    if q.stride(2) != 1 or k_cache.stride(3) != 1 or v_cache.stride(3) != 1:
        raise ValueError("paged_attention_triton needs unit-stride head_dim")
    out = torch.empty_like(q)
    if num_tokens == 0:
        return out
    cfg = config or launch_config(q, num_kv_heads, meta, num_segments)
    head_dim_p = max(16, _next_pow2(head_dim))  # tl.dot needs K >= 16
    parts = (num_tokens, num_heads, cfg.num_segments)
    f32, dev = torch.float32, q.device
    part_acc = (
        torch.empty((*parts, head_dim_p), dtype=f32, device=dev) if cfg.num_segments > 1 else out
    )
    part_max = torch.empty(parts, dtype=f32, device=dev) if cfg.num_segments > 1 else out
    part_sum = torch.empty(parts, dtype=f32, device=dev) if cfg.num_segments > 1 else out
    grid = (meta.num_seqs, -(-meta.max_query_len // cfg.block_q), num_kv_heads * cfg.num_segments)
    _paged_attention_kernel[grid](
        q,
        out,
        k_cache,
        v_cache,
        meta.block_table,
        meta.query_start_loc,
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
        QPK=num_heads // num_kv_heads,
        NUM_HEADS=num_heads,
        HEAD_DIM=head_dim,
        HEAD_DIM_P=head_dim_p,
        BLOCK_SIZE=meta.block_size,
        BLOCK_M=cfg.block_m,
        BLOCK_Q=cfg.block_q,
        TILE=cfg.tile,
        NUM_SEGMENTS=cfg.num_segments,
        UPCAST=INTERPRET,
        # fp32 must not silently drop to tf32; other dtypes keep Triton's default.
        PRECISION="ieee" if q.dtype == torch.float32 or INTERPRET else None,
        num_warps=cfg.num_warps,
        num_stages=cfg.num_stages,
    )
    if cfg.num_segments > 1:
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
            NUM_SEGMENTS=cfg.num_segments,
            SEGMENTS_P=_next_pow2(cfg.num_segments),
        )
    return out
