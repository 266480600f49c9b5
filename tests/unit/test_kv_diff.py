"""Claim 7's wrong-K/V statistic (harness/claims/kv_tap.py): served K/V equal to the fresh ones
differ by 0, and one wrong block among many is not averaged away."""

from __future__ import annotations

import torch

from harness.claims.kv_tap import BLOCK, kv_diff, kv_diffs


def _kv(positions: int, seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn((3, 2, positions, 2, 8), generator=generator)  # layers, K/V, pos, heads, dim


def test_equal_kv_differ_by_nothing_and_only_the_served_positions_count():
    fresh = _kv(5 * BLOCK, 0)
    served = fresh[:, :, : 3 * BLOCK].clone()
    assert kv_diff(served, fresh) == 0.0  # the fresh prompt's positions past the prefix ignored


def test_one_stale_block_scores_as_a_whole_wrong_block():
    fresh = _kv(8 * BLOCK, 0)
    served = fresh.clone()
    served[1, 0, 2 * BLOCK : 3 * BLOCK] = _kv(BLOCK, 1)[1, 0]  # one layer's K, one block
    # unrelated values of the same scale: relative difference about sqrt(2)
    assert 1.0 < kv_diff(served, fresh) < 2.0


def test_relative_noise_scores_its_scale():
    fresh = _kv(4 * BLOCK, 0)
    noise = _kv(4 * BLOCK, 2)
    assert abs(kv_diff(fresh + 0.01 * noise, fresh) - 0.01) < 0.005
    assert kv_diffs({"a": fresh}, {"a": fresh, "b": fresh}, ["a", "b"]) == [0.0]
