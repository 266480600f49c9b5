"""Whole-trace speed work must not move a single result: a Mooncake prefix replayed with the
trace_h100 settings gives the recorded per-request cached tokens, preemptions, recomputed tokens,
simulated times (every token time, bit for bit) and eviction counters.

The recording (tests/data/trace_prefix_pin.json) was made before the speed work, with
`python -m tests.trace_replay`; re-record only for a deliberate behaviour change.
"""

from __future__ import annotations

import json

import pytest

from tests.trace_replay import PIN_CASES, PIN_PATH, replay_case


@pytest.fixture(scope="module")
def pinned() -> dict:
    return json.loads(PIN_PATH.read_text())


@pytest.mark.parametrize("name", sorted(PIN_CASES))
def test_trace_prefix_replay_is_unchanged(pinned, name):
    got = replay_case(name)
    want = pinned[name]
    assert got["stats"] == want["stats"]
    assert got["stats"]["num_evictions"] > 0  # the capacity is really exceeded
    assert got["requests"].keys() == want["requests"].keys()
    changed = [rid for rid, row in got["requests"].items() if row != want["requests"][rid]]
    assert not changed, (
        f"{len(changed)} requests differ, first {changed[0]}: {got['requests'][changed[0]]} != {want['requests'][changed[0]]}"
    )
