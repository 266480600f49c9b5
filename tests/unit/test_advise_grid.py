"""The advice grid's design and verdict rules without running anything: which cells and patterns
a traffic gets, the legal sizes, the capacity read from the user, and how per-pattern duels
become one verdict ("depends on the arrival pattern" naming where each design wins)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.advise.grid import FIT, LEGAL_SIZES, cells, patterns, seeds_for, shipped
from harness.advise.traffic import read_traffic
from harness.advise.verdict import GOALS, TIE, Duel, overall
from harness.config.errors import BadInput

HIT = GOALS[-1]


def test_no_arrival_times_give_a_burst_and_three_poisson_rates_with_seeds():
    full = patterns(has_times=False, quick=False)
    assert [p.name for p in full] == ["burst", "poisson-0.25", "poisson-0.5", "poisson-0.9"]
    assert full[0].seeds == (0,) and full[1].seeds == (0, 1, 2)
    assert [p.name for p in patterns(has_times=False, quick=True)] == ["burst", "poisson-0.5"]
    assert [p.name for p in patterns(has_times=True, quick=False)] == ["trace"]


def test_cells_cover_the_square_the_legal_sizes_and_the_fit_capacity():
    names = [c.name for c in cells(quick=False, capacity_fits=False)]
    assert names[:2] == ["apc", "radix"]
    square = {"apc-sglang", "radix-p16", "radix-p16-vllm", "radix-vllm"}
    assert square | {"apc-b32", "radix-p32", "radix-lpm", "apc-fit", "radix-fit"} == set(names[2:])
    assert 1 not in LEGAL_SIZES["apc"]  # vLLM's attention backends take multiples of 16
    assert {c.name for c in cells(quick=True, capacity_fits=False)} == {"apc", "radix", *square}
    assert not any(c.capacity == FIT for c in cells(quick=False, capacity_fits=True))


def test_only_the_shipped_pairings_at_your_capacity_get_every_seed():
    poisson = patterns(has_times=False, quick=False)[1]
    apc, radix = shipped()
    assert seeds_for(apc, poisson) == (0, 1, 2) == seeds_for(radix, poisson)
    others = [c for c in cells(quick=False, capacity_fits=False) if c not in (apc, radix)]
    assert all(seeds_for(c, poisson) == (0,) for c in others)


def _duel(pattern: str, winner: str) -> Duel:
    values = {"apc": 0.7, "radix": 0.8}
    return Duel(
        pattern,
        HIT,
        winner,
        {"apc": "apc", "radix": "radix"},
        {"apc": "apc b16", "radix": "radix p1"},
        values,
        0.1,
        "exact",
    )


def test_different_winners_per_pattern_depend_on_the_arrival_pattern():
    where = {"burst": "one burst", "poisson-0.5": "Poisson 7.0 req/s"}
    verdict = overall((_duel("burst", "apc"), _duel("poisson-0.5", "radix")), where)
    assert (
        verdict
        == "depends on the arrival pattern (apc under one burst; radix under Poisson 7.0 req/s)"
    )
    one = overall((_duel("burst", "apc"), _duel("poisson-0.5", TIE)), where)
    assert one == "apc (apc b16) (tie or undecided under Poisson 7.0 req/s)"
    assert overall((_duel("burst", TIE),), where).startswith("no difference")


def _prompts(tmp_path: Path, n: int, length: int) -> Path:
    path = tmp_path / "p.jsonl"
    lines = [{"prompt_ids": list(range(1 + i, 1 + i + length)), "output_len": 4} for i in range(n)]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    return path


def test_the_capacity_is_the_users_in_whole_pages_of_32_else_the_presets(tmp_path):
    path = _prompts(tmp_path, 3, 40)
    mine = read_traffic(
        ["workload=prompts", f"workload.path={path}", "engine.kv_capacity_tokens=3000"]
    )
    assert (
        mine.capacity == 2976 and mine.working_set == 160
    )  # 3 x (40 + 4) tokens, in whole pages of 32
    assert mine.capacity_fits and not mine.has_times
    preset = read_traffic(["workload=prompts", f"workload.path={path}"])
    assert preset.capacity == 426784  # h100_llama3_8b_bf16 after the weights, pages of 32


def test_keys_the_grid_sets_are_refused_naming_the_key(tmp_path):
    path = _prompts(tmp_path, 3, 40)
    with pytest.raises(BadInput, match=r"^engine.block_size is chosen by the advice grid"):
        read_traffic(["workload=prompts", f"workload.path={path}", "engine.block_size=32"])
