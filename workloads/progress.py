"""Progress bars for the steps that can take more than a few seconds (trace expansion, bounds,
the measured run, the report, sweeps): shown on a terminal only, and only once a step has run for
a second. PREFIXBENCH_PROGRESS=1 shows them on any stderr (a log file), 0 hides them."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sized
from typing import TypeVar

from tqdm import tqdm

T = TypeVar("T")


def progress(
    iterable: Iterable[T] | None, desc: str, unit: str = "it", total: int | None = None
) -> tqdm:
    """`tqdm` over `iterable` (None: a bar moved with `.update()`), erased when done."""
    if total is None and isinstance(iterable, Sized):
        total = len(iterable)
    return tqdm(
        iterable, desc=desc, unit=unit, total=total, leave=False, disable=_disable(), delay=1.0
    )


def _disable() -> bool | None:
    """None lets tqdm decide: shown when stderr is a terminal."""
    forced = os.environ.get("PREFIXBENCH_PROGRESS")
    return None if forced is None else forced.strip() in ("0", "")
