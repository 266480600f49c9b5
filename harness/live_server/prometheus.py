"""Reading a server's Prometheus /metrics text: counters summed over label sets, info labels.

Only the text exposition format's sample lines are read (`name{labels} value`); comments and
types are skipped. A counter's delta over the measured phase is what a run records, never its
cumulative value.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{(.*)\})?\s+(\S+)")
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float


def parse(text: str) -> list[Sample]:
    out = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if m is None:
            continue
        try:
            value = float(m.group(4))
        except ValueError:
            continue
        labels = dict(_LABEL.findall(m.group(3) or ""))
        out.append(Sample(m.group(1), labels, value))
    return out


def counter(samples: Iterable[Sample], names: Iterable[str]) -> float | None:
    """The first of `names` present, summed over its label sets; None if none is."""
    samples = list(samples)
    for name in names:
        values = [s.value for s in samples if s.name == name]
        if values:
            return sum(values)
    return None


def info_labels(samples: Iterable[Sample], name: str | None) -> dict[str, str]:
    """The labels of an `..._info` gauge (its first sample), or {}."""
    if name is None:
        return {}
    return next((dict(s.labels) for s in samples if s.name == name), {})
