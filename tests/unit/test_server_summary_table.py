"""The printed table of a live-server run: the server's preemption counter beside the twin's, the
twin's evictions, its prediction and exact counts, and which timeline it used and why.

Before, a server run printed the in-process rows: `Preemptions: 0` while the server's counter
had moved by 2, `Evictions: n/a` while the twin had counted 197, and nothing of the prediction.
"""

from __future__ import annotations

from harness.metrics.format import format_summary

# what harness/live_server/record.py adds to a server run's summary (the keys the table reads)
SERVER = {
    "server_flavour": "vllm",
    "server_preemptions_delta": 2,
    "reported_cached_tokens_sum": 14720,
    "kv_events": "subscribed to ipc:///tmp/vllm-kv.ipc",
    "num_preemptions": 0,  # the replies carry none: not printed for a server run
    "evictions": None,
}
TWIN = {
    "twin_timeline": "step_locked",
    "twin_compared_with": "per_request",
    "twin_preemptions": 2,
    "twin_evictions": 197,
    "twin_predicted_tokens": 14720,
    "twin_matches": 48,
    "twin_requests": 48,
    "twin_kv_steps_equal": 41,
    "twin_kv_server_steps": 41,
}


def test_a_server_run_prints_both_counters_and_the_twins_prediction():
    lines = format_summary({**SERVER, **TWIN}).splitlines()
    assert "Preemptions (server delta / twin):       2 / 2" in lines
    assert "Evictions (twin):                        197" in lines
    assert "predicted 14,720 of 14,720 cached tokens; 48/48 requests exact; KV steps 41/41" in lines
    assert (
        "Timeline:                                step-locked (the server published its KV events)"
        in lines
    )
    assert not any(line.startswith(("Preemptions:", "Evictions:")) for line in lines)


def test_without_kv_events_the_timeline_says_predicted_and_why():
    summary = {
        **SERVER,
        **TWIN,
        "twin_timeline": "predicted",
        "twin_kv_steps_equal": None,
        "twin_kv_server_steps": None,
        "twin_matches": 44,
        "kv_events": "unavailable: the server publishes no KV events",
    }
    text = format_summary(summary)
    assert "48 requests exact" in text and "44/48" in text and "KV steps" not in text
    assert "predicted (no KV events: unavailable: the server publishes no KV events)" in text


def test_parallel_samples_are_compared_with_the_counter_only():
    summary = {
        **SERVER,
        **TWIN,
        "twin_compared_with": "counter_delta",
        "twin_matches_counter": True,
    }
    assert "n > 1: against the counter only, equal" in format_summary(summary)


def test_an_in_process_run_keeps_its_own_rows():
    lines = format_summary({"evictions": 3, "num_preemptions": 1}).splitlines()
    assert "Evictions:                               3" in lines
    assert "Preemptions:                             1" in lines


def test_a_server_run_with_a_host_tier_prints_the_twin_per_tier():
    tiers = {
        "twin_tier_requests": 8,
        "twin_tier_matches": 8,
        "twin_predicted_host_tokens": 576,
        "twin_served_host_tokens": 576,
    }
    text = format_summary({**SERVER, **TWIN, **tiers})
    assert "48/48 requests exact; host tier 576 of 576 tokens, 8/8 requests exact per tier" in text
    assert "host tier" not in format_summary({**SERVER, **TWIN})
