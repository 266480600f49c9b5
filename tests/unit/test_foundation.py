"""The contracts every part builds on: registries, configs, attention metadata."""

from __future__ import annotations

import pytest

from engines.attention.metadata import AttentionMetadata
from engines.config import EngineConfig
from engines.registry import Registry, UnknownNameError


def test_registry_lists_valid_names_on_unknown():
    reg: Registry[int] = Registry("widget")
    reg.add("b", 2)
    reg.add("a", 1)
    assert reg.get("a") == 1
    with pytest.raises(UnknownNameError, match=r"unknown widget 'c'; valid: a, b"):
        reg.get("c")


def test_registry_refuses_duplicates():
    reg: Registry[int] = Registry("widget")
    reg.add("a", 1)
    with pytest.raises(ValueError):
        reg.add("a", 2)


@pytest.mark.parametrize(
    "field", ["block_size", "kv_capacity_tokens", "max_num_seqs", "max_num_batched_tokens"]
)
@pytest.mark.parametrize("value", [0, -4])
def test_engine_config_rejects_non_positive(field, value):
    cfg = EngineConfig(**{field: value})
    with pytest.raises(ValueError, match=f"engine.{field} must be a positive integer"):
        cfg.validate()


def test_engine_config_capacity_in_blocks():
    cfg = EngineConfig(block_size=16, kv_capacity_tokens=160)
    cfg.validate()
    assert cfg.num_blocks == 11  # 10 usable + the reserved block 0


def test_metadata_slot_mapping_follows_block_table():
    # seq 0: 5 cached + 3 new in blocks [1, 2]; seq 1: 4 new in block [3]; B = 4
    m = AttentionMetadata.build([5, 0], [3, 4], [[1, 2], [3]], block_size=4)
    assert m.positions.tolist() == [5, 6, 7, 0, 1, 2, 3]
    assert m.slot_mapping.tolist() == [9, 10, 11, 12, 13, 14, 15]
    assert m.query_start_loc.tolist() == [0, 3, 7]
    assert m.seq_lens.tolist() == [8, 4]
    assert m.block_table.tolist() == [[1, 2], [3, 0]]


def test_metadata_block_size_one_is_a_slot_list():
    m = AttentionMetadata.build([2], [2], [[7, 3, 9, 4]], block_size=1)
    assert m.slot_mapping.tolist() == [9, 4]
