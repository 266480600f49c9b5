"""Confidence intervals for the report: Student-t intervals of a mean, and of a ratio on the log scale.

The 0%-hit overhead (docs/benchmarking.md §6) is measured on interleaved pairs: the cache-on and the
cache-off run of one engine with the same seed, run back to back. Each pair gives one ratio
on/off; the interval is the two-sided 95% Student-t interval of the mean ratio over the pairs
(n - 1 degrees of freedom), taken on the log scale (`ratio_ci`) so it stays positive. With 5-20
pairs a t-interval covers better than a percentile bootstrap. One value gets no interval (n=1).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

# Two-sided 95% Student-t quantiles t(0.975, df) for df = 1..30 (standard table values).
_T975 = (
    12.706,
    4.303,
    3.182,
    2.776,
    2.571,
    2.447,
    2.365,
    2.306,
    2.262,
    2.228,
    2.201,
    2.179,
    2.160,
    2.145,
    2.131,
    2.120,
    2.110,
    2.101,
    2.093,
    2.086,
    2.080,
    2.074,
    2.069,
    2.064,
    2.060,
    2.056,
    2.052,
    2.048,
    2.045,
    2.042,
)
_Z975 = 1.959964


def t_quantile_975(df: int) -> float:
    """t(0.975, df); beyond the table the Cornish-Fisher expansion around the normal quantile."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    if df <= len(_T975):
        return _T975[df - 1]
    z = _Z975
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


class MeanCI(NamedTuple):
    """Mean of n values with its two-sided 95% t-interval (low/high None when n < 2)."""

    mean: float
    low: float | None
    high: float | None
    n: int


def mean_ci(values: Sequence[float]) -> MeanCI:
    xs = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    if not xs:
        raise ValueError("mean_ci needs at least one finite value")
    n = len(xs)
    mean = sum(xs) / n
    if n < 2:
        return MeanCI(mean, None, None, n)
    sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1))
    half = t_quantile_975(n - 1) * sd / math.sqrt(n)
    return MeanCI(mean, mean - half, mean + half, n)


def bounded_ci(values: Sequence[float], non_negative: bool) -> MeanCI:
    """mean_ci, with the bounds of a quantity that cannot be negative (a rate, a share, a latency)
    clipped at zero: the t-interval is symmetric, the quantity is not."""
    ci = mean_ci(values)
    if not non_negative or ci.low is None:
        return ci
    return MeanCI(ci.mean, max(ci.low, 0.0), ci.high, ci.n)


def ratio_ci(values: Sequence[float]) -> MeanCI:
    """Geometric mean of positive ratios with the t-interval taken on the log scale, so the bounds
    are positive and a ratio r and its inverse 1/r get mirror-image intervals."""
    logs = [
        math.log(float(v))
        for v in values
        if v is not None and math.isfinite(float(v)) and float(v) > 0
    ]
    ci = mean_ci(logs)
    if ci.low is None or ci.high is None:
        return MeanCI(math.exp(ci.mean), None, None, ci.n)
    return MeanCI(math.exp(ci.mean), math.exp(ci.low), math.exp(ci.high), ci.n)


def geometric_ci(values: Sequence[float]) -> MeanCI:
    """What a log axis shows of positive values (TTFTs): their geometric mean with the
    t-interval of the mean log, so the interval is positive and symmetric on that axis; an
    arithmetic interval clipped at zero would run off a log axis. Same arithmetic as ratio_ci;
    equal values give back that value exactly (exp(log(x)) may not)."""
    xs = [float(v) for v in values if v is not None and math.isfinite(float(v)) and float(v) > 0]
    if xs and min(xs) == max(xs):
        bound = xs[0] if len(xs) >= 2 else None
        return MeanCI(xs[0], bound, bound, len(xs))
    return ratio_ci(xs)


# Figures draw an interval only from this many values on: at n = 2 the 95% t-interval is
# mean +- 12.7 x the half-range, wider than anything the two runs say, and clipped at zero it
# reads as a measurement. Below it the runs themselves are drawn, as points.
MIN_INTERVAL_N = 3


def drawn_interval(ci: MeanCI) -> MeanCI:
    """`ci` as a figure draws it: without bounds below MIN_INTERVAL_N values."""
    return ci if ci.n >= MIN_INTERVAL_N else MeanCI(ci.mean, None, None, ci.n)
