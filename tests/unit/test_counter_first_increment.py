"""A server counter that has not been incremented yet reads 0, not "unknown".

SGLang 0.5.23 exports `sglang:cached_tokens_total` only from a request's first cached token on
(a labelled Prometheus counter appears at its first increment), so a run against a freshly
started server read no counter before and 4,672 after, and reported no hit delta at all.
"""

from __future__ import annotations

from harness.live_server import prometheus
from harness.live_server.cache_state import counters
from harness.live_server.flavours import FLAVOURS
from harness.live_server.replies import delta

SGLANG = FLAVOURS.get("sglang")
BEFORE = """# TYPE sglang:prompt_tokens_total counter
sglang:prompt_tokens_total{model_name="m"} 12.0
"""
AFTER = BEFORE.replace("12.0", "5000.0") + (
    '# TYPE sglang:cached_tokens_total counter\nsglang:cached_tokens_total{model_name="m"} 4672.0\n'
)


def test_a_counter_not_yet_exported_reads_zero_and_the_delta_is_kept():
    before = counters(prometheus.parse(BEFORE), SGLANG)
    after = counters(prometheus.parse(AFTER), SGLANG)
    assert before.hits == 0 and before.queries == 12
    assert delta(before.hits, after.hits, "hits") == 4672


def test_a_page_without_the_servers_metrics_is_still_unknown():
    other = prometheus.parse(
        "# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 3.0\n"
    )
    assert counters(other, SGLANG).hits is None
    assert counters([], SGLANG).hits is None  # /metrics did not answer
