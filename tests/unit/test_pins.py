"""The upstream pairings (apc + vLLM scheduler, radix + SGLang scheduler) keep, request by request,
the cached tokens, preemptions, recomputed tokens, outputs and eviction counters recorded in
tests/data/pins.json before the scheduler became its own axis (see tests/pin_support.py)."""

from __future__ import annotations

import json

import pytest

from tests.pin_support import CASES, PINS, pin_of

RECORDED = json.loads(PINS.read_text())


def test_every_case_is_pinned():
    assert set(RECORDED) == set(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_pinned_run_is_unchanged(name):
    got = pin_of(CASES[name].overrides)
    want = RECORDED[name]
    assert got["run"] == want["run"]
    diffs = {
        rid: (got["requests"].get(rid), pin)
        for rid, pin in want["requests"].items()
        if got["requests"].get(rid) != pin
    }
    assert not diffs, f"{len(diffs)} requests differ, e.g. {next(iter(diffs.items()))}"
