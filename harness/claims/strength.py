"""How sure a verdict is: its evidence size and the interval rule every seeded claim decides by.

A seeded comparison is decided on the 95% t-interval of its per-seed values, never on one seed:
`side` says whether the whole interval lies at or above a threshold, wholly below it, or
straddles it (then the claim's rule says "undecided"). `Evidence` is what each row of
claims.md/claims.csv prints beside its verdict: how many runs and seeds it rests on and, where
the claim computed one, the interval that decided it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from harness.report.stats import MeanCI, mean_ci

ABOVE, BELOW, STRADDLES = "above", "below", "straddles"
MIN_SEEDS = 3  # below this a t-interval says nothing useful (n = 2: +-12.7 half-ranges)


def interval(values: Sequence[float]) -> MeanCI:
    """The mean of per-seed values with its two-sided 95% t-interval."""
    return mean_ci(values)


def side(ci: MeanCI, threshold: float) -> str:
    """ABOVE when the interval's low end reaches the threshold, BELOW when its high end stays
    under it, STRADDLES otherwise, and always STRADDLES under MIN_SEEDS values: a cell that
    passes in one seed is never enough."""
    if ci.n < MIN_SEEDS or ci.low is None or ci.high is None:
        return STRADDLES
    if ci.low >= threshold:
        return ABOVE
    if ci.high < threshold:
        return BELOW
    return STRADDLES


def describe(ci: MeanCI, scale: float = 1.0, unit: str = "") -> str:
    """`mean [low, high] (n=N)` in the claim's unit (e.g. scale 100, unit ' points')."""
    if ci.low is None or ci.high is None:
        return f"{ci.mean * scale:+.2f}{unit} (n={ci.n}, no interval)"
    return (
        f"{ci.mean * scale:+.2f}{unit} [{ci.low * scale:+.2f}, {ci.high * scale:+.2f}] (n={ci.n})"
    )


@dataclass(frozen=True)
class Evidence:
    """What a verdict rests on: runs made, distinct seeds among them, and the deciding interval
    (empty when the claim decides on exact counts of deterministic runs)."""

    num_runs: int
    num_seeds: int
    interval: str = ""

    def text(self) -> str:
        seeds = "1 seed" if self.num_seeds == 1 else f"{self.num_seeds} seeds"
        base = f"{self.num_runs} runs, {seeds}" if self.num_runs else "no harness runs"
        return f"{base}; deciding interval {self.interval}" if self.interval else base
