"""Claim 24 (issue 51, item 4): SGLang's overlap loop and prefix hits under concurrency, at the
quick size, in this process: the row's structure and what each arm does on PR #26378's shape.

Behaviours, not numbers: one request at a time every arm reaches the stream's theory; at
concurrency 4 the overlap never adds hits to radix, the gap to theory is same-batch prefills, vLLM's
scheduler (which shares within a step) keeps the theory sync or async, and the hash cache under
SGLang's scheduler has nothing late to match; at concurrency 16 the overlap costs radix hits.
"""

from __future__ import annotations

import pytest

from harness.claims.arms import APC, RADIX
from harness.claims.overlap import CLAIM
from harness.claims.overlap_runs import ARMS, SGLANG, VLLM, overlap_arm
from harness.claims.registry import CLAIMS
from harness.config.schema import register_configs

register_configs()  # the schemas Hydra composes against
pytestmark = pytest.mark.slow  # the session's quick claims (tests/quick_claims.py): minutes of CPU


@pytest.fixture(scope="module")
def quick(quick_claims):
    """Claim 24 as the session's quick measurement found it (tests/quick_claims.py)."""
    row, finding = quick_claims.row(CLAIM.key), quick_claims.finding(CLAIM.key)
    cells = {(d["stream"], d["load"]): d for d in finding.details}
    return quick_claims.out, row, finding, cells


def test_the_claim_is_registered_with_its_row(quick):
    out, row, finding, _ = quick
    assert CLAIMS.get("overlap") is CLAIM and row.number == 24
    assert "42.70%" in row.result and "38.06%" in row.result  # published beside measured
    assert "same-batch prefills (off - theory)" in row.result
    assert (out / row.figure).is_file()
    assert "3 seeds" in row.evidence and "overlap cost" in row.evidence
    assert set(finding.figure.groups["PR shape c=4"]) == set(ARMS)  # each arm against theory


def test_one_at_a_time_every_arm_reaches_the_theory(quick):
    *_, cells = quick
    cell = cells[("PR shape", "c=1")]
    for arm in ARMS:
        assert cell["hits"][arm] == pytest.approx(cell["theory"], abs=1e-9), arm


def test_at_concurrency_4_the_loss_is_same_batch_prefills_not_the_overlap(quick):
    *_, cells = quick
    cell = cells[("PR shape", "c=4")]
    theory, hits = cell["theory"], cell["hits"]
    radix_on, radix_off = hits[overlap_arm(RADIX, "on")], hits[overlap_arm(RADIX, "off")]
    assert all(on <= off for on, off in zip(radix_on, radix_off))
    assert all(off <= t for off, t in zip(radix_off, theory))
    assert sum(theory) > sum(radix_off)  # requests prefilled together lose their group's prompt
    cross = f"{APC}+{SGLANG}"
    assert hits[overlap_arm(cross, "on")] == hits[overlap_arm(cross, "off")]  # nothing late
    for mode in ("sync", "async"):  # vLLM hashes prompt blocks at allocation: shared in-step
        assert hits[f"{APC}+{VLLM} {mode}"] == pytest.approx(theory, abs=1e-9)


def test_at_concurrency_16_the_overlap_costs_radix_hits(quick):
    _, row, _, cells = quick
    cell = cells[("PR shape", "c=16")]
    effect = cell[f"{RADIX} overlap effect (on - off)"]
    assert all(e <= 0 for e in effect) and sum(effect) < 0
    # one load holds (16) and another does not (4): the verdict names the load
    assert row.verdict.startswith("depends on the load")
