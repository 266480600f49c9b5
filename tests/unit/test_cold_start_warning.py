"""A flushed server's run warns when it did not start cold, and not when a burst merely reached
the server in another order than it was sent (CI on 03d5539: a burst's g0-q1 was taken first,
so g0-q0, the first sent, hit 64 tokens of it and the run warned of a warm cache)."""

from __future__ import annotations

import pandas as pd

from harness.live_server.record import _cold_hits


def test_one_at_a_time_the_first_sent_request_must_hit_nothing():
    ok = pd.DataFrame({"cached_tokens": [64, 0, 64]})
    assert _cold_hits(ok, one_at_a_time=True) == 64


def test_a_burst_warns_only_when_every_request_hit():
    assert _cold_hits(pd.DataFrame({"cached_tokens": [64, 0, 64]}), one_at_a_time=False) == 0
    assert _cold_hits(pd.DataFrame({"cached_tokens": [64, 32, 64]}), one_at_a_time=False) == 32
    assert _cold_hits(pd.DataFrame({"cached_tokens": []}), one_at_a_time=False) == 0
