"""The `metrics` config group: its record (`MetricsConfig`, a field of RunConfig) and its checks;
`metrics.goodput="ttft:200,tpot:50"` takes the keys `vllm bench serve --goodput` accepts."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from harness.config.errors import BadInput

SLO_METRICS = ("ttft", "tpot", "e2el")  # the keys `vllm bench serve --goodput` accepts


@dataclass
class MetricsConfig:
    """Which statistics the summary reports, with `vllm bench serve`'s meanings.

    goodput: SLOs in ms as "ttft:200,tpot:50" (keys ttft, tpot, e2el): `request_goodput` counts
    requests meeting all of them per second (None when unset). percentiles: the p<N> fields
    reported for TTFT, TPOT, ITL, E2EL and queue delay (the report's figures read p99).
    """

    goodput: str | None = None
    percentiles: list[float] = field(default_factory=lambda: [50.0, 90.0, 99.0])


def parse_slos(text: str | None) -> dict[str, float]:
    """ "ttft:200,tpot:50" -> {"ttft": 200.0, "tpot": 50.0} (ms); None or "" -> {}."""
    slos: dict[str, float] = {}
    for item in (text or "").replace(" ", ",").split(","):
        if not item:
            continue
        key, sep, value = item.partition(":")
        if not sep or key not in SLO_METRICS:
            raise BadInput(
                f"metrics.goodput: {item!r} is not <metric>:<ms> with metric one of "
                f'{", ".join(SLO_METRICS)} (e.g. metrics.goodput="ttft:200,tpot:50")'
            )
        try:
            slos[key] = float(value)
        except ValueError:
            raise BadInput(
                f"metrics.goodput: {value!r} in {item!r} is not a number of ms"
            ) from None
        if not 0 < slos[key] < math.inf:
            raise BadInput(
                f"metrics.goodput: the {key} SLO must be a positive finite number of ms, got {value}"
            )
    return slos


def check_metrics(metrics: MetricsConfig) -> None:
    """Raise BadInput naming the first bad field of `metrics` (before anything is built)."""
    parse_slos(metrics.goodput)
    for p in metrics.percentiles:
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 <= p <= 100:
            raise BadInput(f"metrics.percentiles: each must be a number in [0, 100], got {p!r}")
