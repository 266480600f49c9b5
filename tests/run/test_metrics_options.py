"""vLLM's serving-benchmark options: goodput against SLOs, the percentiles to report, and the
client-side concurrency cap (`load.max_concurrency`) of the load generator."""

from __future__ import annotations

import pytest

from harness.client.inprocess import drive
from harness.metrics.config import MetricsConfig, parse_slos
from harness.metrics.format import format_summary
from harness.metrics.summarize import summarize, summary_dict
from harness.metrics.table import itls_ms, request_table
from harness.run.execute import execute
from tests.engine_util import as_workload, make_engine, replace_all, shared_prompt_requests
from tests.harness_util import compose_config, summary_of, with_base
from tests.metrics_util import CTX, RECORDS, REQUESTS


def test_slos_parse_like_vllm_goodput():
    assert parse_slos("ttft:200,tpot:50") == {"ttft": 200.0, "tpot": 50.0}
    assert parse_slos("ttft:200 e2el:1000") == {"ttft": 200.0, "e2el": 1000.0}
    assert parse_slos(None) == {} and parse_slos("") == {}


@pytest.mark.parametrize(
    "text, needle",
    [
        ("itl:5", "metric one of ttft, tpot, e2el"),
        ("ttft", "<metric>:<ms>"),
        ("ttft:fast", "'fast' in 'ttft:fast' is not a number"),
        ("tpot:-1", "must be a positive finite number"),
    ],
)
def test_bad_slos_name_the_field(text, needle):
    with pytest.raises(ValueError, match="metrics.goodput") as info:
        parse_slos(text)
    assert needle in str(info.value)


def table():
    return request_table(RECORDS, REQUESTS, CTX)


def test_goodput_counts_requests_meeting_every_slo():
    # TTFT a 250, b 250, c 500; TPOT a 250, b none (counts as 0), c 125; duration 2 s.
    goodput = lambda slos: summary_dict(
        summarize(table(), itls_ms(RECORDS), 2.0, metrics=MetricsConfig(goodput=slos))
    )["request_goodput"]
    assert goodput("ttft:250") == 1.0  # a and b (250 each); c (500) misses
    assert goodput("ttft:500") == 1.5
    assert goodput("ttft:500,tpot:200") == 1.0  # a's TPOT 250 fails; b (TPOT 0) and c pass
    assert goodput("e2el:300") == 0.5  # only b (250)
    assert summary_dict(summarize(table(), itls_ms(RECORDS), 2.0))["request_goodput"] is None


def test_goodput_is_printed_only_when_asked_for():
    plain = summary_dict(summarize(table(), itls_ms(RECORDS), 2.0))
    slo = summary_dict(
        summarize(table(), itls_ms(RECORDS), 2.0, metrics=MetricsConfig(goodput="ttft:500"))
    )
    assert "goodput" not in format_summary(plain)
    assert "Request goodput (req/s):                 1.50" in format_summary(slo)


def test_percentiles_are_the_ones_asked_for():
    s = summary_dict(
        summarize(table(), itls_ms(RECORDS), 2.0, metrics=MetricsConfig(percentiles=[25, 99.9]))
    )
    assert s["p25_ttft_ms"] == 250.0 and "p99.9_ttft_ms" in s and "p90_ttft_ms" not in s
    assert "p25_e2el_ms" in s and "p25_e2e_latency_ms" in s and "p95_itl_ms" in s
    default = summary_dict(summarize(table(), itls_ms(RECORDS), 2.0))
    assert {"p50_ttft_ms", "p90_ttft_ms", "p99_ttft_ms"} <= set(default)


@pytest.mark.parametrize("cache", ["apc", "radix"])
def test_max_concurrency_caps_requests_in_flight(cache):
    requests = replace_all(shared_prompt_requests(groups=2, per_group=3), arrival_s=0.0)
    engine = make_engine(cache)
    records = drive(engine, as_workload(requests), scripted=False, max_concurrency=2)
    assert len(records) == len(requests)
    events = sorted([(r.arrival_s, 1) for r in records] + [(r.finish_s, -1) for r in records])
    in_flight = peak = 0
    for _, delta in events:  # a finish at the same instant as a send comes first (-1 < 1)
        in_flight += delta
        peak = max(peak, in_flight)
    assert peak == 2
    finishes = {r.finish_s for r in records}
    held = [r for r in records if r.arrival_s > 0]
    assert len(held) == len(requests) - 2
    assert all(r.arrival_s in finishes for r in held)  # sent when a slot freed, timed from there


def test_run_reports_goodput_and_max_concurrency(tmp_path, capsys):
    overrides = with_base(['metrics.goodput="ttft:100000,e2el:100000"', "load.max_concurrency=2"])
    assert execute(compose_config(overrides), tmp_path / "run") == 0, capsys.readouterr().err
    summary = summary_of(tmp_path / "run")
    assert summary["max_concurrency"] == 2
    assert summary["request_goodput"] == pytest.approx(summary["request_throughput"])


@pytest.mark.parametrize(
    "override, needle",
    [
        ("load.max_concurrency=0", "load.max_concurrency must be an integer in [1,"),
        ('metrics.goodput="ttft=5"', "metrics.goodput"),
        ("metrics.percentiles=[50,101]", "metrics.percentiles"),
    ],
)
def test_bad_options_are_one_line(override, needle):
    from harness.config.preflight import preflight

    problem = preflight(with_base([override]))
    assert problem is not None and needle in problem, problem
