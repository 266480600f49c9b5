"""Claims 25-28 (issue 50, item 7): the KV tier claims at the quick size, in this process.

Behaviours, not numbers: a re-sent prompt that finds nothing on the device loads from the host
tier and gets its first token sooner than computed, by more the longer the prompt; on multi-turn
chat the tier adds host hits, throughput and lower TTFT to both designs; with nothing reused the
tier stores every prompt and, its stores off the critical path, costs the simulated engine nothing;
a second pass of concurrent prompts gains throughput with the share of them the host holds.
"""

from __future__ import annotations

import pytest

from harness.claims import tier_cost, tier_multiturn, tier_throughput, tier_ttft
from harness.claims.arms import APC, RADIX
from harness.claims.registry import CLAIMS, ordered
from harness.claims.tier_arms import DESIGNS, OFF, ON, arm_label
from harness.config.schema import register_configs

register_configs()  # the schemas Hydra composes against

pytestmark = pytest.mark.slow  # the session's quick claims (tests/quick_claims.py): minutes of CPU


def _check(claim, quick_claims):
    """The claim's row and finding as the session's quick measurement made them
    (tests/quick_claims.py)."""
    row, finding = quick_claims.row(claim.key), quick_claims.finding(claim.key)
    assert (quick_claims.out / row.figure).is_file()
    return row, finding


@pytest.fixture(scope="module")
def ttft(quick_claims):
    return _check(tier_ttft.CLAIM, quick_claims)


@pytest.fixture(scope="module")
def multiturn(quick_claims):
    return _check(tier_multiturn.CLAIM, quick_claims)


@pytest.fixture(scope="module")
def cost(quick_claims):
    return _check(tier_cost.CLAIM, quick_claims)


@pytest.fixture(scope="module")
def throughput(quick_claims):
    return _check(tier_throughput.CLAIM, quick_claims)


def test_the_tier_claims_follow_the_last_claim_in_the_registry():
    numbers = {c.key: c.number for c in ordered()}
    keys = ("tier_ttft", "tier_multiturn", "tier_cost", "tier_throughput")
    assert [numbers[k] for k in keys] == [25, 26, 27, 28]
    assert CLAIMS.get("tier_cost") is tier_cost.CLAIM


def test_a_host_load_beats_computing_the_prompt_again(ttft):
    row, finding = ttft
    assert "2-22x lower" in row.result  # published beside measured
    cells = {(d["design"], d["prompt_tokens"]): d for d in finding.details}
    for (_, n), cell in cells.items():
        # the blog's GPU prefix caching off: the re-sent prompt finds nothing on the device
        assert cell["device_hit_tokens"] == 0 and cell["device_hit_tokens_no_tier"] == 0
        assert cell["host_hit_tokens"] >= n - 1  # the whole prompt from the host (radix: n - 1)
        assert cell["loaded_ttft_ms"] < cell["computed_ttft_ms"]
        assert cell["load_ms"] > 0
    for design in DESIGNS:  # the longer the prompt, the more a load saves
        short, long = (cells[(design, n)]["ratio"] for n in sorted({n for _, n in cells}))
        assert long > short


def test_multiturn_the_tier_adds_host_hits_throughput_and_lower_ttft(multiturn):
    row, finding = multiturn
    assert "up to 6x throughput and 80% lower TTFT" in row.result
    (setting,) = finding.details
    for design in DESIGNS:
        off, on = setting[arm_label(design, OFF)], setting[arm_label(design, ON)]
        assert off["host_hit_rate"] == 0 and on["host_hit_rate"] > 0
        assert on["hit_rate"] > off["hit_rate"]
        assert on["throughput"] > off["throughput"]
        assert on["mean_ttft_ms"] < off["mean_ttft_ms"]


def test_a_tier_that_is_never_hit_costs_the_simulated_engine_nothing(cost):
    row, finding = cost
    assert "-12.3%" in row.result and "3 seeds" in row.evidence
    assert {(d["design"], d["load"]) for d in finding.details} == {
        (d, load) for d in (APC, RADIX) for load in ("burst", "Poisson")
    }
    for cell in finding.details:
        assert cell["cost_per_seed"] == [0.0, 0.0, 0.0]  # stores are off the critical path
    assert "stored" in row.result
    assert row.verdict == "does not hold"


def test_throughput_grows_with_the_share_the_host_holds(throughput):
    row, finding = throughput
    assert "up to 9x throughput" in row.result
    cells = {(d["design"], d["share"]): d for d in finding.details}
    for design in DESIGNS:
        half, full = cells[(design, 0.5)], cells[(design, 1.0)]
        for cell, share in ((half, 0.5), (full, 1.0)):
            assert cell["device_hit_rate"] == 0  # the repeats left the device (GPU caching off)
            assert cell["host_hit_rate"] == pytest.approx(share, abs=0.01)
            assert cell["ratio"] > 1
        assert full["ratio"] > half["ratio"]
