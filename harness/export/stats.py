"""Distributions as the Benchmark Report writes them: a `Statistics` object (units, mean, stddev,
min, the schema's percentiles p0.1 ... p99.9, max) from a column of per-request values, and a
`SequenceLength` (fixed when every value is equal)."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

# The schema's percentile fields and the percentile each one names.
PERCENTILES = (
    ("p0p1", 0.1),
    ("p1", 1.0),
    ("p5", 5.0),
    ("p10", 10.0),
    ("p25", 25.0),
    ("p50", 50.0),
    ("p75", 75.0),
    ("p90", 90.0),
    ("p95", 95.0),
    ("p99", 99.0),
    ("p99p9", 99.9),
)


def finite(values: Iterable[object]) -> np.ndarray:
    """The finite numbers among `values` (a missing latency is NaN or None, never a zero)."""
    arr = np.asarray([v for v in values if v is not None], dtype=float)
    return arr[np.isfinite(arr)]


def statistics(values: Iterable[object], units: str) -> dict[str, object] | None:
    """A `Statistics` object over the finite values; None when there are none. Percentiles are
    numpy's linear interpolation, the method vLLM's and SGLang's benchmarks use."""
    arr = finite(values)
    if arr.size == 0:
        return None
    out: dict[str, object] = {
        "units": units,
        "mean": float(arr.mean()),
        "stddev": float(arr.std()),
        "min": float(arr.min()),
    }
    for name, q in PERCENTILES:
        out[name] = float(np.percentile(arr, q))
    out["max"] = float(arr.max())
    return out


def total(value: object, units: str) -> dict[str, object] | None:
    """A single measured number (a run's throughput, its overall hit rate) as `Statistics`."""
    if value is None or isinstance(value, bool):
        return None
    number = float(value)  # type: ignore[arg-type]
    return {"units": units, "mean": number} if np.isfinite(number) else None


def sequence_length(values: Iterable[object]) -> dict[str, object] | None:
    """A `SequenceLength`: `fixed` when all values are equal, else `other` with mean, std, min,
    max (prefixbench's lengths come from a generator or a trace, not one named distribution)."""
    arr = finite(values)
    if arr.size == 0:
        return None
    lo, hi = int(arr.min()), int(arr.max())
    if lo == hi:
        return {"distribution": "fixed", "value": lo}
    return {
        "distribution": "other",
        "value": float(arr.mean()),
        "std_dev": float(arr.std()),
        "min": lo,
        "max": max(hi, 1),
    }
