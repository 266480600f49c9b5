"""The answer per goal: which design and settings win, by how much, decided by the claims' rules.

Per arrival pattern, the best cell of each design at the user's capacity is compared. With at
least three seeds on both (Poisson arrivals, the shipped pairings) the per-seed differences'
95% t-interval decides (harness/claims/strength.py): wholly beyond the tolerance is a win, wholly
inside it a tie, otherwise undecided. A deterministic pattern (a burst, a trace replay) decides on
the exact values. Across patterns: one winner is the answer; two are "depends on the arrival
pattern", with the patterns where each wins; no reuse at all is "no difference beyond the 0%-hit
cost" (claim 1: caching costs under 1% throughput at a 0% hit rate).
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from harness.advise.grid import USER
from harness.claims import keys
from harness.claims.record import depends, undecided
from harness.claims.strength import ABOVE, BELOW, MIN_SEEDS, describe, interval, side
from harness.claims.tree_reuse import POINTS
from harness.report.decomposition import TIE_TOLERANCE

TIE, UNDECIDED = "tie", "undecided"
NO_REUSE = "no difference beyond the 0%-hit cost"
NO_REUSE_CEILING = 0.01  # below 1% ideal hit rate at page 1 nothing is worth a cache's choice


@dataclass(frozen=True)
class Goal:
    name: str
    key: str
    higher_is_better: bool
    absolute: bool  # hit rate: points; the others: relative

    @property
    def tolerance(self) -> float:
        return POINTS if self.absolute else TIE_TOLERANCE

    def gain(self, base: float, other: float) -> float:
        """How much better `other` is than `base` (points, or a fraction of `base`)."""
        diff = other - base if self.higher_is_better else base - other
        return diff if self.absolute else diff / base if base else 0.0

    def show(self, value: float) -> str:
        if self.key == keys.HIT_RATE:
            return f"{value:.1%}"
        if self.key == keys.THROUGHPUT:
            return f"{value:,.0f} tok/s"
        return f"{value:,.1f} ms"

    def margin(self, gain: float) -> str:
        """Points of hit rate; for time and throughput, the gain as a share of the loser's."""
        return f"{100 * gain:.1f} points" if self.absolute else f"{gain:.0%}"

    def ratio(self, values: list[float]) -> str:
        """`2.32x lower` / `1.05x higher`: the winner against the loser, as a reader compares."""
        hi, lo = max(values), min(values)
        factor = hi / lo if lo > 0 else float("inf")
        return f"{factor:.2f}x {'higher' if self.higher_is_better else 'lower'}"


GOALS = (
    Goal("TTFT p50", keys.TTFT_P50, False, False),
    Goal("TTFT p99", keys.TTFT_P99, False, False),
    Goal("throughput", keys.THROUGHPUT, True, False),
    Goal("hit rate", keys.HIT_RATE, True, True),
)


@dataclass(frozen=True)
class Duel:
    """One goal under one arrival pattern: the best cell of each design and who wins."""

    pattern: str
    goal: Goal
    winner: str  # a design, TIE or UNDECIDED
    best: dict[str, str]  # design -> its best cell
    labels: dict[str, str]  # design -> its best cell for a reader
    values: dict[str, float]  # design -> its best cell's mean value
    gain: float  # the better design's gain over the other (>= 0)
    evidence: str  # the deciding interval, or "exact (deterministic)"

    def text(self) -> str:
        cells = "; ".join(f"{self.best[d]} {self.goal.show(v)}" for d, v in self.values.items())
        if self.winner == TIE:
            head = f"tie (within {self.goal.margin(self.goal.tolerance)})"
        elif self.winner == UNDECIDED:
            head = "undecided (the interval straddles the tolerance)"
        else:
            by = (
                self.goal.margin(self.gain)
                if self.goal.absolute
                else self.goal.ratio(list(self.values.values()))
            )
            head = f"{self.best[self.winner]} by {by}"
        return f"{head}: {cells}; {self.evidence}"


@dataclass(frozen=True)
class Answer:
    goal: Goal
    verdict: str
    duels: tuple[Duel, ...]


def user_runs(runs: pd.DataFrame) -> pd.DataFrame:
    return runs[runs["capacity"] == USER]


def duel(runs: pd.DataFrame, pattern: str, goal: Goal) -> Duel:
    """The best cell of each design at the user's capacity under `pattern`, compared."""
    df = user_runs(runs)
    df = df[df["pattern"] == pattern]
    means = df.groupby(["cache", "cell"])[goal.key].mean()
    best: dict[str, str] = {}
    values: dict[str, float] = {}
    for cache, group in means.groupby(level=0, sort=True):
        cell = (group.idxmax() if goal.higher_is_better else group.idxmin())[1]
        best[cache], values[cache] = cell, float(group[cache, cell])
    (a, b) = sorted(values)
    gain = goal.gain(values[a], values[b])  # > 0: b better
    per_seed = _paired(df, goal, best[a], best[b])
    if per_seed is not None and len(per_seed) >= MIN_SEEDS:
        ci = interval(per_seed)
        scale, unit = (100.0, " points") if goal.absolute else (100.0, "%")
        evidence = f"interval of the per-seed gain of {b} {describe(ci, scale, unit)}"
        winner = _by_interval(ci, goal.tolerance, a, b)
    else:
        evidence = (
            "exact (deterministic runs)"
            if _deterministic(df, pattern, goal)
            else f"{len(per_seed or [])} run(s) each: no interval (a point comparison)"
        )
        winner = b if gain >= goal.tolerance else a if -gain >= goal.tolerance else TIE
    label_of = dict(zip(df["cell"], df["label"]))
    labels = {c: label_of[cell] for c, cell in best.items()}
    return Duel(pattern, goal, winner, best, labels, values, abs(gain), evidence)


def _deterministic(df: pd.DataFrame, pattern: str, goal: Goal) -> bool:
    """A burst or a trace replay gives the same hit rates every time, and the same times on the
    simulated executor's virtual clock; the wall clock of a real executor varies run to run."""
    simulated = bool((df["executor"] == "simulated").all())
    return pattern in ("burst", "trace") and (goal.key == keys.HIT_RATE or simulated)


def _paired(df: pd.DataFrame, goal: Goal, cell_a: str, cell_b: str) -> list[float] | None:
    a = df[df["cell"] == cell_a].set_index("seed")[goal.key]
    b = df[df["cell"] == cell_b].set_index("seed")[goal.key]
    seeds = sorted(set(a.index) & set(b.index))
    return [goal.gain(float(a[s]), float(b[s])) for s in seeds] if seeds else None


def _by_interval(ci, tolerance: float, a: str, b: str) -> str:
    if side(ci, tolerance) == ABOVE:
        return b
    if side(ci, -tolerance) == BELOW:
        return a
    if ci.low is not None and ci.high is not None and -tolerance < ci.low and ci.high < tolerance:
        return TIE
    return UNDECIDED


def no_reuse(runs: pd.DataFrame) -> bool:
    """No prompt shares a prefix with an earlier one, even at page 1 in an unbounded cache."""
    return float(runs["ideal_hit_rate_token"].max()) < NO_REUSE_CEILING


def answers(runs: pd.DataFrame, where: dict[str, str]) -> list[Answer]:
    """Per goal, the duels under every pattern (`where`: pattern name -> words) and the verdict."""
    duels_of = {g.key: tuple(duel(runs, p, g) for p in where) for g in GOALS}
    if no_reuse(runs):
        return [Answer(g, NO_REUSE, duels_of[g.key]) for g in GOALS]
    return [Answer(g, overall(duels_of[g.key], where), duels_of[g.key]) for g in GOALS]


def overall(duels: tuple[Duel, ...], where: dict[str, str]) -> str:
    """One winner; `depends on the arrival pattern` with where each wins; a tie; undecided."""
    won = {d.winner for d in duels} - {TIE, UNDECIDED}
    if len(won) == 2:
        flips = "; ".join(
            f"{w} under {', '.join(where[d.pattern] for d in duels if d.winner == w)}"
            for w in sorted(won)
        )
        return depends(f"the arrival pattern ({flips})")
    if len(won) == 1:
        (w,) = won
        cells = sorted({d.labels[w] for d in duels if d.winner == w})
        rest = [where[d.pattern] for d in duels if d.winner != w]
        tail = f" (tie or undecided under {', '.join(rest)})" if rest else ""
        return f"{w} ({' / '.join(cells)}){tail}"
    if any(d.winner == UNDECIDED for d in duels):
        return undecided("the intervals straddle the tolerance; more seeds would decide")
    return "no difference (within the tolerance under every arrival pattern)"
