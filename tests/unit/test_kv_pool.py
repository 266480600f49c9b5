"""The KV pool: per-layer tensors, the reserved block 0, capacity arithmetic, slot addressing."""

from __future__ import annotations

import pytest
import torch

from engines.attention.metadata import AttentionMetadata
from engines.attention.torch_paged import store_kv_torch
from engines.config import EngineConfig
from engines.kv_pool import KVPool, KVPoolShape, num_blocks_for_tokens


def test_layout_is_one_k_and_one_v_tensor_per_layer():
    pool = KVPool(num_layers=3, num_blocks=5, block_size=16, num_kv_heads=2, head_dim=8)
    assert len(pool.k_cache) == len(pool.v_cache) == 3
    for k, v in zip(pool.k_cache, pool.v_cache):
        assert k.shape == v.shape == (5, 16, 2, 8)
        assert k.dtype == torch.float32 and k.device.type == "cpu"
        assert k.abs().sum().item() == 0 and v.abs().sum().item() == 0  # zeros, never NaN garbage
    assert len({k.data_ptr() for k in pool.k_cache + pool.v_cache}) == 6  # no aliasing


@pytest.mark.parametrize(
    ("num_blocks", "block_size", "capacity"), [(5, 16, 64), (11, 1, 10), (2, 4, 4)]
)
def test_capacity_excludes_reserved_block_zero(num_blocks, block_size, capacity):
    pool = KVPool(1, num_blocks, block_size, 1, 4)
    assert pool.capacity_tokens == capacity
    assert pool.capacity_blocks == num_blocks - 1


def test_engine_config_capacity_round_trips():
    cfg = EngineConfig()  # 65536 tokens in blocks of 16 -> 4096 usable + block 0
    assert num_blocks_for_tokens(cfg.kv_capacity_tokens, cfg.block_size) == cfg.num_blocks == 4097
    shape = KVPoolShape(1, cfg.num_blocks, cfg.block_size, 1, 1, torch.float32)
    assert shape.capacity_tokens == cfg.kv_capacity_tokens


def test_for_capacity_rounds_up_to_whole_blocks():
    pool = KVPool.for_capacity(100, num_layers=1, block_size=16, num_kv_heads=1, head_dim=4)
    assert pool.num_blocks == 8 and pool.capacity_tokens == 112
    assert KVPool.for_capacity(100, 1, 1, 1, 4).capacity_tokens == 100


@pytest.mark.parametrize(("dtype", "expected"), [(torch.float32, 46080), (torch.bfloat16, 23040)])
def test_bytes_per_token_counts_k_and_v_of_every_layer(dtype, expected):
    # SmolLM2-135M: 30 layers, 3 KV heads of 64 -> 2 * 30 * 3 * 64 elements per token.
    pool = KVPool(30, 2, 1, 3, 64, dtype=dtype)
    assert pool.bytes_per_token == expected
    assert pool.total_bytes == 2 * expected
    actual = sum(t.numel() * t.element_size() for t in pool.k_cache + pool.v_cache)
    assert actual == pool.total_bytes


@pytest.mark.parametrize("block_size", [1, 4])
def test_slots_from_metadata_address_the_pool(block_size):
    # seq 0: 2 cached + 3 new; seq 1: 2 new. Tables are shuffled, block 0 never used.
    pool = KVPool(2, 12, block_size, 2, 4)
    tables = [[7, 3, 9, 4, 5], [11, 6]] if block_size == 1 else [[7, 3], [11]]
    meta = AttentionMetadata.build([2, 0], [3, 2], tables, block_size)
    k = torch.arange(5 * 2 * 4, dtype=torch.float32).view(5, 2, 4) + 1
    store_kv_torch(k, -k, *pool.layer(1), meta.slot_mapping)
    got_k, got_v = pool.read_tokens(1, meta.slot_mapping)
    assert torch.equal(got_k, k) and torch.equal(got_v, -k)
    assert pool.k_cache[0].abs().sum().item() == 0  # other layers untouched
    assert pool.k_cache[1][0].abs().sum().item() == 0  # reserved block untouched
    first_new = tables[0][2 // block_size]  # position 2 of seq 0
    assert torch.equal(pool.k_cache[1][first_new, 2 % block_size], k[0])
    pool.zero_()
    assert all(t.abs().sum().item() == 0 for t in pool.k_cache + pool.v_cache)


@pytest.mark.parametrize(
    "args",
    [(0, 4, 16, 1, 4), (1, 1, 16, 1, 4), (1, 4, 0, 1, 4), (1, 4, 16, 0, 4), (1, 4, 16, 1, 0)],
)
def test_rejects_degenerate_shapes(args):
    with pytest.raises(ValueError):
        KVPool(*args)
