"""Progress bars for the steps that can take more than a few seconds (trace expansion, bounds,
the report, sweeps): shown on a terminal only, and only once a step has run for a second."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeVar

from tqdm import tqdm

T = TypeVar("T")


def progress(iterable: Iterable[T], desc: str, unit: str = "it", total: int | None = None) -> tqdm:
    """`tqdm` over `iterable`, silent when stderr is not a terminal (disable=None) and for steps
    shorter than a second (delay), and erased when done (leave=False)."""
    if total is None and hasattr(iterable, "__len__"):
        total = len(iterable)
    return tqdm(iterable, desc=desc, unit=unit, total=total, leave=False, disable=None, delay=1.0)
