"""Fleet output shows the routing: a simulated fleet's printed summary names the router and
gives per replica its requests, hit rate and load, and the imbalance."""

from __future__ import annotations

from harness.metrics.format import format_summary
from tests.harness_util import SMALL, SYSTEM_PROMPT_SMALL, merged, run_harness

SIM = ["executor=simulated", "hardware=h100_llama3_8b_bf16"]


def test_the_printed_summary_of_a_fleet_shows_each_replica(tmp_path):
    run = run_harness(
        merged(SMALL, SYSTEM_PROMPT_SMALL, SIM) + ["fleet.replicas=3", "fleet.router=cache_aware"],
        tmp_path / "run",
    )
    assert run.returncode == 0, run.stderr
    s = run.summary
    text = format_summary(s).splitlines()
    assert any(ln.startswith("Router:") and "cache_aware (3 replicas)" in ln for ln in text)
    assert any(ln.startswith("Bound, any router (%):") for ln in text)
    assert any(ln.startswith("Imbalance (max/mean requests):") for ln in text)
    head = text.index(next(ln for ln in text if ln.split()[:2] == ["replica", "requests"]))
    rows = [ln.split() for ln in text[head + 1 : head + 4]]
    sent = sum(p["prompt_tokens"] for p in s["fleet_per_replica"])
    for row, p in zip(rows, s["fleet_per_replica"]):
        assert int(row[0]) == p["replica"] and int(row[1]) == p["requests"]
        assert float(row[3]) == round(100 * p["prompt_tokens"] / sent, 2)
    # a single engine prints no fleet block
    one = run_harness(merged(SMALL, SYSTEM_PROMPT_SMALL, SIM), tmp_path / "one")
    assert not any(ln.startswith("Router:") for ln in format_summary(one.summary).splitlines())
