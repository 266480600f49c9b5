"""Claim 7's wrong-K/V statistic (harness/claims/kv_tap.py): served K/V equal to the fresh ones
differ by 0, one wrong block among many is not averaged away and shows in its own layer, and a
request's score is its worst layer against that layer's tolerance."""

from __future__ import annotations

import torch

from harness.claims.kv_tap import BLOCK, envelope, kv_diff, kv_diffs, score


def _kv(positions: int, seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn((3, 2, positions, 2, 8), generator=generator)  # layers, K/V, pos, heads, dim


def test_equal_kv_differ_by_nothing_and_only_the_served_positions_count():
    fresh = _kv(5 * BLOCK, 0)
    served = fresh[:, :, : 3 * BLOCK].clone()
    diff = kv_diff(served, fresh)  # the fresh prompt's positions past the prefix ignored
    assert diff.shape == (3, 2) and float(diff.abs().max()) == 0.0


def test_one_stale_block_scores_in_its_own_layer_as_a_whole_wrong_block():
    fresh = _kv(8 * BLOCK, 0)
    served = fresh.clone()
    served[1, 0, 2 * BLOCK : 3 * BLOCK] = _kv(BLOCK, 1)[1, 0]  # one layer's K, one block
    diff = kv_diff(served, fresh)
    # unrelated values of the same scale: relative difference about sqrt(2), in that layer's K only
    assert 1.0 < float(diff[1, 0]) < 2.0
    assert float(diff.sum() - diff[1, 0]) == 0.0


def test_relative_noise_scores_its_scale_in_every_layer_and_against_the_tolerance():
    fresh = _kv(4 * BLOCK, 0)
    diff = kv_diff(fresh + 0.01 * _kv(4 * BLOCK, 2), fresh)
    assert float((diff - 0.01).abs().max()) < 0.005
    tolerance = torch.full((3, 2), 0.1)
    tolerance[0] = 0.004  # a layer whose rounding floor is small catches it
    assert 1.0 < score(diff, tolerance) < 5.0
    assert score(diff, torch.full((3, 2), 0.1)) < 1.0
    assert [float(d.max()) for d in kv_diffs({"a": fresh}, {"a": fresh, "b": fresh}, "ab")] == [0.0]
    both = envelope([diff, torch.zeros(3, 2)])
    assert both is not None and torch.equal(both, diff) and envelope([]) is None
