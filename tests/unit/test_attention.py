"""The paged-attention core: triton == torch == dense unpaged attention on irregular shapes.

On CPU the Triton kernels run under TRITON_INTERPRET=1 (set by conftest), so sizes stay small.
Every case writes its cached prefix into shuffled, non-contiguous blocks of a cache filled with
large garbage, and leaves the new tokens' slots as garbage too: a backend that reads a wrong slot,
or reads before it writes, fails the comparison.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
import torch

from engines.attention import torch_paged, triton_paged
from engines.attention.backend import get_attention_backend
from engines.attention.metadata import AttentionMetadata
from engines.attention.reference import dense_attention, reference_attention
from engines.attention.torch_paged import store_kv_torch
from engines.attention.triton_paged import paged_attention_triton, store_kv_triton
from engines.registry import UnknownNameError

# The CPU tests run Triton only through its interpreter (conftest sets it when there is no GPU).
TRITON_OK = triton_paged.HAS_TRITON and triton_paged.INTERPRET
needs_triton = pytest.mark.skipif(not TRITON_OK, reason="needs triton and TRITON_INTERPRET=1")
HEAD_DIM = 16
GARBAGE = 100.0  # unwritten cache slots hold values that would dominate any softmax they leak into


@dataclass
class Case:
    q: torch.Tensor  # [T, Hq, D]
    k_new: torch.Tensor  # [T, Hkv, D]: this step's keys
    v_new: torch.Tensor
    keys: list[torch.Tensor]  # per sequence, all context + new keys (the dense truth)
    values: list[torch.Tensor]
    k_cache: torch.Tensor  # [num_blocks, B, Hkv, D], holding only the cached prefixes
    v_cache: torch.Tensor
    meta: AttentionMetadata
    scale: float

    def dense(self) -> torch.Tensor:
        m = self.meta
        return dense_attention(
            self.q, self.keys, self.values, m.query_lens_host, m.context_lens_host, self.scale
        )

    def fresh_caches(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.k_cache.clone(), self.v_cache.clone()


def make_case(
    context_lens: list[int],
    query_lens: list[int],
    block_size: int,
    num_heads: int,
    num_kv_heads: int,
    *,
    head_dim: int = HEAD_DIM,
    dtype: torch.dtype = torch.float32,
    device: str = "cpu",
    seed: int = 0,
    tables: list[list[int]] | None = None,
) -> Case:
    """Random q/K/V; block ids drawn shuffled from 1..num_blocks-1 (block 0 stays reserved)."""
    gen = torch.Generator().manual_seed(seed)
    seq_lens = [c + n for c, n in zip(context_lens, query_lens)]
    pages = [-(-n // block_size) for n in seq_lens]
    if tables is None:
        ids = (torch.randperm(sum(pages) + 3, generator=gen) + 1).tolist()  # 3 spare blocks
        tables = [ids[sum(pages[:s]) : sum(pages[: s + 1])] for s in range(len(pages))]
    num_blocks = max(max(t) for t in tables) + 2
    kv_dims = (num_blocks, block_size, num_kv_heads, head_dim)
    k_cache = torch.randn(kv_dims, generator=gen) * GARBAGE
    v_cache = torch.randn(kv_dims, generator=gen) * GARBAGE
    keys = [torch.randn(n, num_kv_heads, head_dim, generator=gen) for n in seq_lens]
    values = [torch.randn(n, num_kv_heads, head_dim, generator=gen) for n in seq_lens]
    for s, table in enumerate(tables):
        for j in range(context_lens[s]):  # only the cached prefix is in the pool
            k_cache[table[j // block_size], j % block_size] = keys[s][j]
            v_cache[table[j // block_size], j % block_size] = values[s][j]
    q = torch.randn(sum(query_lens), num_heads, head_dim, generator=gen)
    k_new = torch.cat([k[c:] for k, c in zip(keys, context_lens)])
    v_new = torch.cat([v[c:] for v, c in zip(values, context_lens)])
    to: dict[str, Any] = dict(dtype=dtype, device=device)
    return Case(
        q=q.to(**to),
        k_new=k_new.to(**to),
        v_new=v_new.to(**to),
        keys=[k.to(**to) for k in keys],
        values=[v.to(**to) for v in values],
        k_cache=k_cache.to(**to),
        v_cache=v_cache.to(**to),
        meta=AttentionMetadata.build(context_lens, query_lens, tables, block_size, device=device),
        scale=head_dim**-0.5,
    )


def run_backend(name: str, case: Case) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    k_cache, v_cache = case.fresh_caches()
    backend = get_attention_backend(name, case.q.device)
    out = backend.forward(case.q, case.k_new, case.v_new, k_cache, v_cache, case.meta, case.scale)
    return out, k_cache, v_cache


def batch_shape(mode: str, cached: int) -> tuple[list[int], list[int]]:
    """extend: a long prefill, a decode row and a fresh prompt mixed; decode: three key lengths."""
    if mode == "extend":
        return [cached, 2 * cached + 3, 0], [11, 1, 20]
    return [cached, cached + 9, 2 * cached + 30], [1, 1, 1]


def backends() -> list[str]:
    return ["torch", "triton"] if TRITON_OK else ["torch"]


def max_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.float() - b.float()).abs().max().item()


@pytest.mark.parametrize("mode", ["extend", "decode"])
@pytest.mark.parametrize("heads", [(4, 2), (8, 1)], ids=["gqa4:2", "gqa8:1"])
@pytest.mark.parametrize("cached", [0, 7, 33])
@pytest.mark.parametrize("block_size", [1, 16])
def test_backends_match_dense_attention(block_size, cached, heads, mode):
    ctx, qlens = batch_shape(mode, cached)
    case = make_case(ctx, qlens, block_size, *heads, seed=cached + block_size)
    dense = case.dense()
    outs = {name: run_backend(name, case)[0] for name in backends()}
    for name, out in outs.items():
        assert max_err(out, dense) <= 1e-5, name
    if "triton" in outs:
        assert max_err(outs["triton"], outs["torch"]) <= 1e-5


@pytest.mark.parametrize("mode", ["extend", "decode"])
def test_non_power_of_two_head_groups(mode):
    # SmolLM2's 9 query heads over 3 KV heads: qpk = 3 leaves unused rows in every 2^k-row tile.
    case = make_case(*batch_shape(mode, 7), 16, 9, 3, seed=12)
    for name in backends():
        assert max_err(run_backend(name, case)[0], case.dense()) <= 1e-5, name


@needs_triton
@pytest.mark.parametrize(
    ("block_size", "mode", "num_segments"),
    [(1, "decode", 3), (16, "extend", 5), (16, "decode", 16)],
)
def test_triton_split_kv_matches_dense(block_size, mode, num_segments):
    # Segments past the keys' end stay empty (16 segments over 34..96 keys): the reduce weighs them 0.
    case = make_case(*batch_shape(mode, 33), block_size, 4, 2, seed=5)
    k_cache, v_cache = case.fresh_caches()
    store_kv_triton(case.k_new, case.v_new, k_cache, v_cache, case.meta.slot_mapping)
    out = paged_attention_triton(
        case.q, k_cache, v_cache, case.meta, case.scale, num_segments=num_segments
    )
    assert max_err(out, case.dense()) <= 1e-5


@pytest.mark.parametrize("name", backends())
def test_write_before_read_across_sequences(name):
    # Seq 1's cached prefix is block 5, which seq 0 fills in this very step (an APC block matched
    # at allocation, before any forward pass wrote it). B = 4:
    #   seq 0: ctx 0, new 6 -> blocks [5, 2]      seq 1: ctx 4 (= block 5), new 3 -> blocks [5, 7]
    case = make_case([0, 4], [6, 3], 4, 4, 2, tables=[[5, 2], [5, 7]], seed=3)
    case.keys[1][:4] = case.keys[0][:4]  # the shared block holds seq 0's first four keys
    case.values[1][:4] = case.values[0][:4]
    out, _, _ = run_backend(name, case)
    assert max_err(out, case.dense()) <= 1e-5


@pytest.mark.parametrize("name", backends())
@pytest.mark.parametrize("block_size", [1, 16])
def test_forward_stores_new_kv_exactly_at_slots(name, block_size):
    case = make_case([7, 0], [5, 3], block_size, 4, 2, seed=11)
    _, k_cache, v_cache = run_backend(name, case)
    flat = (-1, 2, HEAD_DIM)
    slots = case.meta.slot_mapping
    assert torch.equal(k_cache.view(flat)[slots], case.k_new)
    assert torch.equal(v_cache.view(flat)[slots], case.v_new)
    untouched = torch.ones(k_cache.view(flat).shape[0], dtype=torch.bool)
    untouched[slots] = False
    assert torch.equal(k_cache.view(flat)[untouched], case.k_cache.view(flat)[untouched])
    assert torch.equal(v_cache.view(flat)[untouched], case.v_cache.view(flat)[untouched])


@pytest.mark.parametrize("name", backends())
def test_strided_views_of_a_fused_qkv_projection(name):
    # The model splits one fused projection: q, k, v are non-contiguous views with a wide row stride.
    case = make_case([7, 0], [4, 6], 16, 4, 2, seed=6)
    fused = torch.cat([t.flatten(1) for t in (case.q, case.k_new, case.v_new)], dim=1)
    q, k, v = fused.split([4 * HEAD_DIM, 2 * HEAD_DIM, 2 * HEAD_DIM], dim=1)
    views = [t.view(10, -1, HEAD_DIM) for t in (q, k, v)]
    assert not views[0].is_contiguous()
    k_cache, v_cache = case.fresh_caches()
    out = get_attention_backend(name).forward(*views, k_cache, v_cache, case.meta, case.scale)
    assert max_err(out, case.dense()) <= 1e-5


@pytest.mark.parametrize("store", [store_kv_torch] + ([store_kv_triton] if TRITON_OK else []))
def test_store_skips_negative_slots(store):
    k_cache = torch.zeros(3, 2, 1, HEAD_DIM)
    v_cache = torch.zeros(3, 2, 1, HEAD_DIM)
    k = torch.arange(3 * HEAD_DIM, dtype=torch.float32).view(3, 1, HEAD_DIM) + 1
    store(k, -k, k_cache, v_cache, torch.tensor([5, -1, 2]))
    flat_k, flat_v = k_cache.view(6, HEAD_DIM), v_cache.view(6, HEAD_DIM)
    assert torch.equal(flat_k[5], k[0, 0]) and torch.equal(flat_k[2], k[2, 0])
    assert torch.equal(flat_v[5], -k[0, 0])
    assert flat_k[[0, 1, 3, 4]].abs().sum().item() == 0  # the padding row wrote nothing


def test_torch_backend_chunks_long_queries(monkeypatch):
    # 13 rows in chunks of 4 over a cached prefix of 7: every chunk re-derives the mask.
    monkeypatch.setattr(torch_paged, "CHUNK_ROWS", 4)
    case = make_case([7, 0], [13, 9], 16, 4, 2, seed=2)
    assert max_err(run_backend("torch", case)[0], case.dense()) <= 1e-5


def test_torch_backend_reuses_scratch_across_calls_and_decode_groups(monkeypatch):
    # A budget of 64 gathered key elements (2 heads x 16 dims -> 2 keys) puts every decode row in
    # its own group; one backend instance then serves a large and a smaller batch in turn.
    monkeypatch.setattr(torch_paged, "DECODE_GROUP_KEY_ELEMENTS", 64)
    backend = get_attention_backend("torch")
    for case in (
        make_case(*batch_shape("decode", 33), 16, 4, 2, seed=7),
        make_case(*batch_shape("extend", 7), 1, 4, 2, seed=8),
    ):
        k_cache, v_cache = case.fresh_caches()
        out = backend.forward(
            case.q, case.k_new, case.v_new, k_cache, v_cache, case.meta, case.scale
        )
        assert max_err(out, case.dense()) <= 1e-5


@pytest.mark.parametrize(("dtype", "tol"), [(torch.float16, 4e-3), (torch.bfloat16, 3e-2)])
def test_low_precision_on_cpu(dtype, tol):
    # The interpreter upcasts bf16/fp16 to fp32 inside tl.dot; torch runs SDPA natively.
    case = make_case(*batch_shape("extend", 7), 16, 4, 2, dtype=dtype, seed=9)
    dense = case.dense()
    for name in backends():
        out = run_backend(name, case)[0]
        assert out.dtype == dtype
        assert max_err(out, dense) <= tol, name


def test_dense_attention_uniform_scores_average_visible_values():
    # q = k = 0: every visible key scores equally, so row i returns the mean of v[0 : ctx + i + 1].
    ctx, n = 2, 2
    v = torch.arange(4, dtype=torch.float32).view(4, 1, 1).expand(4, 1, 16).contiguous()
    out = dense_attention(torch.zeros(n, 2, 16), [torch.zeros(4, 1, 16)], [v], [n], [ctx], 0.25)
    assert out[0, :, 0].tolist() == [1.0, 1.0]  # mean(0, 1, 2)
    assert out[1, :, 0].tolist() == [1.5, 1.5]  # mean(0, 1, 2, 3)


def test_reference_attention_reads_through_block_table():
    case = make_case([5, 3], [2, 4], 4, 4, 2, seed=4)
    k_cache, v_cache = case.fresh_caches()
    store_kv_torch(case.k_new, case.v_new, k_cache, v_cache, case.meta.slot_mapping)
    ref = reference_attention(case.q, k_cache, v_cache, case.meta, case.scale)
    assert max_err(ref, case.dense()) <= 1e-6


def test_backend_registry():
    assert get_attention_backend("auto", "cpu").name == "torch"
    assert get_attention_backend("torch", "cpu").name == "torch"
    with pytest.raises(UnknownNameError, match="valid: auto, torch, triton"):
        get_attention_backend("flash", "cpu")


def test_triton_on_cpu_without_interpreter_fails_clearly(monkeypatch):
    monkeypatch.setattr(triton_paged, "INTERPRET", False)
    monkeypatch.setattr(triton_paged, "HAS_TRITON", True)
    case = make_case([0], [2], 1, 2, 1)
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET=1"):
        paged_attention_triton(case.q, case.k_cache, case.v_cache, case.meta, case.scale)


# ---------------------------------------------------------------- CUDA (skipped without a GPU)

GPU_TOLERANCE = {torch.float32: 1e-4, torch.float16: 4e-3, torch.bfloat16: 3e-2}


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", list(GPU_TOLERANCE), ids=str)
@pytest.mark.parametrize("mode", ["extend", "decode"])
@pytest.mark.parametrize("cached", [0, 7, 33])
@pytest.mark.parametrize("block_size", [1, 16])
def test_gpu_backends_match_dense(block_size, cached, mode, dtype):
    for heads in [(4, 2), (8, 1)]:
        case = make_case(*batch_shape(mode, cached), block_size, *heads, dtype=dtype, device="cuda")
        dense = case.dense()
        for name in ["torch", "triton"]:
            assert max_err(run_backend(name, case)[0], dense) <= GPU_TOLERANCE[dtype], (name, heads)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", list(GPU_TOLERANCE), ids=str)
@pytest.mark.parametrize("mode", ["extend", "decode"])
@pytest.mark.parametrize("block_size", [1, 16])
def test_gpu_realistic_heads_and_split_kv(block_size, mode, dtype):
    # 32 q heads / 8 KV heads, head_dim 128, 1k+ keys: real tile sizes, and for decode the
    # automatic split-KV path (few sequences x KV heads leave most SMs idle).
    ctx, qlens = (
        ([700, 1200, 0], [300, 1, 260]) if mode == "extend" else ([1500, 3000, 64], [1, 1, 1])
    )
    case = make_case(
        ctx, qlens, block_size, 32, 8, head_dim=128, dtype=dtype, device="cuda", seed=1
    )
    assert get_attention_backend("auto", "cuda").name == "triton"
    dense = case.dense()
    for name in ["torch", "triton"]:
        assert max_err(run_backend(name, case)[0], dense) <= GPU_TOLERANCE[dtype], name
