"""The decode kernel (triton_decode.py) == the torch paged path == float64 reference attention.

Runs under TRITON_INTERPRET=1 on CPU (conftest). Cases reuse test_attention's builder: shuffled,
non-contiguous blocks in a cache of large garbage, so a wrong slot or a read past a sequence's end
fails. GQA ratios 1, 4, 8; page 1 and 16; fp32 and bf16; one split and several (some empty).
"""

from __future__ import annotations

import pytest
import torch

from engines.attention.backend import get_attention_backend
from engines.attention.reference import reference_attention
from engines.attention.torch_paged import store_kv_torch
from engines.attention.triton_decode import (
    DecodeConfig,
    decode_attention_triton,
    decode_splits,
    is_decode_batch,
)
from tests.unit.test_attention import TRITON_OK, make_case, max_err

needs_triton = pytest.mark.skipif(not TRITON_OK, reason="needs triton and TRITON_INTERPRET=1")
TOLERANCE = {torch.float32: 1e-5, torch.bfloat16: 3e-2}
# Three sequences: a short one, one ending mid-page, one spanning many tiles of 32 keys.
CONTEXT_LENS = [4, 41, 130]


def decode_case(ratio: int, block_size: int, dtype: torch.dtype, seed: int = 0):
    case = make_case(CONTEXT_LENS, [1, 1, 1], block_size, 2 * ratio, 2, dtype=dtype, seed=seed)
    k_cache, v_cache = case.fresh_caches()
    store_kv_torch(case.k_new, case.v_new, k_cache, v_cache, case.meta.slot_mapping)
    return case, k_cache, v_cache


@needs_triton
@pytest.mark.parametrize("splits", [1, 3, 8], ids=lambda s: f"splits{s}")
@pytest.mark.parametrize("dtype", list(TOLERANCE), ids=str)
@pytest.mark.parametrize("block_size", [1, 16])
@pytest.mark.parametrize("ratio", [1, 4, 8], ids=lambda r: f"gqa{r}")
def test_decode_kernel_matches_reference_and_torch(ratio, block_size, dtype, splits):
    # 8 splits of 32-key chunks leave the short sequences' later splits empty: the reduce weighs
    # them 0.
    case, k_cache, v_cache = decode_case(ratio, block_size, dtype, seed=ratio + block_size)
    config = DecodeConfig(tile=32, num_splits=splits, num_warps=4, num_stages=2)
    out = decode_attention_triton(case.q, k_cache, v_cache, case.meta, case.scale, config)
    assert out.dtype == dtype
    reference = reference_attention(case.q, k_cache, v_cache, case.meta, case.scale)
    assert max_err(out, reference) <= TOLERANCE[dtype]
    torch_out = get_attention_backend("torch").forward(
        case.q, case.k_new, case.v_new, *case.fresh_caches(), case.meta, case.scale
    )
    assert max_err(out, torch_out) <= TOLERANCE[dtype]


@needs_triton
@pytest.mark.parametrize("block_size", [1, 16])
def test_triton_backend_routes_decode_batches_to_the_decode_kernel(block_size, monkeypatch):
    # Through the backend (store, then attend): a decode batch takes the decode kernel, which
    # must give the dense answer; a mixed batch keeps the unified kernel.
    from engines.attention import triton_decode

    calls: list[str] = []
    real = triton_decode.decode_attention_triton
    monkeypatch.setattr(
        triton_decode,
        "decode_attention_triton",
        lambda *a, **k: calls.append("decode") or real(*a, **k),
    )
    case = make_case(CONTEXT_LENS, [1, 1, 1], block_size, 8, 2, seed=4)
    out = get_attention_backend("triton").forward(
        case.q, case.k_new, case.v_new, *case.fresh_caches(), case.meta, case.scale
    )
    assert calls == ["decode"]
    assert max_err(out, case.dense()) <= 1e-5
    mixed = make_case([7, 0], [1, 5], block_size, 8, 2, seed=5)
    assert not is_decode_batch(mixed.q, mixed.meta)
    out = get_attention_backend("triton").forward(
        mixed.q, mixed.k_new, mixed.v_new, *mixed.fresh_caches(), mixed.meta, mixed.scale
    )
    assert calls == ["decode"] and max_err(out, mixed.dense()) <= 1e-5


def test_decode_splits_follow_occupancy():
    # 132 SMs: batch 16 x 8 KV heads (128 programs) gets 4 waves' worth; 256 x 8 needs no split;
    # short contexts keep >= 256 keys per split.
    assert decode_splits(16, 8, 2048, 132) == 5
    assert decode_splits(256, 8, 2048, 132) == 1
    assert decode_splits(1, 8, 300, 132) == 1
    assert decode_splits(1, 8, 100_000, 132) == 32


@needs_triton
def test_decode_kernel_rejects_non_decode_batches():
    case = make_case([3, 0], [2, 1], 16, 4, 2)
    with pytest.raises(ValueError, match="one new token per sequence"):
        decode_attention_triton(case.q, case.k_cache, case.v_cache, case.meta, case.scale)


# ---------------------------------------------------------------- CUDA (skipped without a GPU)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("block_size", [1, 16])
def test_gpu_decode_kernel_realistic_heads(block_size, dtype):
    # 32/8 heads, head_dim 128, automatic splits over 1-3k keys.
    case = make_case(
        [1500, 3000, 64, 2047], [1] * 4, block_size, 32, 8, head_dim=128, dtype=dtype,
        device="cuda", seed=1,
    )  # fmt: skip
    k_cache, v_cache = case.fresh_caches()
    store_kv_torch(case.k_new, case.v_new, k_cache, v_cache, case.meta.slot_mapping)
    out = decode_attention_triton(case.q, k_cache, v_cache, case.meta, case.scale)
    tol = {torch.float32: 1e-4, torch.bfloat16: 3e-2}[dtype]
    assert max_err(out, case.dense()) <= tol
