"""Verdict labels state what was found (issue 47, item 4): `depends on` only where one condition
holds and another does not; holds (or does not hold) beside undecided is labelled undecided,
naming each condition. Claims 1 and 8 sum their conditions this way."""

from __future__ import annotations

import pandas as pd

from harness.claims.record import FAILS, HOLDS, UNSURE, sum_up
from harness.claims.strength import interval


def test_same_everywhere_is_that_label():
    assert sum_up("the load", {"a": HOLDS, "b": HOLDS}) == HOLDS
    assert sum_up("the load", {"a": FAILS, "b": FAILS}) == FAILS
    assert sum_up("the load", {"a": UNSURE, "b": UNSURE}) == "undecided: undecided on a, b"


def test_depends_only_when_one_holds_and_another_fails():
    assert sum_up("the load", {"a": HOLDS, "b": FAILS}) == (
        "depends on the load: holds on a; does not hold on b"
    )
    assert sum_up("the load", {"a": HOLDS, "b": UNSURE}) == "undecided: holds on a; undecided on b"
    assert sum_up("x", {"a": FAILS, "b": UNSURE}) == "undecided: undecided on b; does not hold on a"


def test_claim_1_mix_of_holds_and_straddles_is_undecided():
    from harness.claims.zero_hit import _verdict

    cols = ["hardware", "engine", "share", "low", "high"]
    rows = [("h100", "apc", 0.002, 0.001, 0.003), ("h200", "apc", 0.009, 0.005, 0.02)]
    verdict = _verdict(pd.DataFrame(rows, columns=cols).assign(shape="decode-heavy"))
    assert verdict == (
        "undecided: holds on h100 decode-heavy; undecided (interval straddles 1%) on h200 decode-heavy"
    )


def test_claim_8_poisson_straddling_is_undecided_not_depends():
    from harness.claims.free_order import BURST, POISSON, _state

    lead_burst = {1024: interval([0.05])}  # the deterministic burst: its exact lead
    straddling = {1024: interval([0.02, -0.01, 0.03])}
    below = {1024: interval([0.001, 0.0, 0.002])}
    assert _state(BURST, lead_burst) == HOLDS
    assert _state(POISSON, straddling) == UNSURE
    assert _state(POISSON, below) == FAILS


def test_claim_1_added_cpu_ignores_a_load_that_slows_both_runs_of_a_pair():
    from harness.claims.zero_hit import added_cpu

    on, off = pd.Series([1.02, 1.01, 1.03]), pd.Series([1.00, 1.00, 1.00])
    quiet = added_cpu(on, off)
    assert quiet.round(6).tolist() == [0.02, 0.01, 0.03]
    slowed = added_cpu(on * pd.Series([1.0, 1.6, 1.0]), off * pd.Series([1.0, 1.6, 1.0]))
    assert slowed.round(6).tolist() == quiet.round(6).tolist()  # the pair's difference was 1.6x
    # the least disturbed off time scales every seed: a slowed off run does not inflate it
    assert added_cpu(on, pd.Series([1.00, 1.50, 1.00]))[0] == quiet[0]
