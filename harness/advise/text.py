"""advice.md: the answer first (per goal, with its verdict and the cells behind it), then why,
the ceilings, what would change the answer, and how the grid was run."""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from harness.advise.grid import FIT, Pattern
from harness.advise.runner import Grid
from harness.advise.server import ServerRun
from harness.advise.traffic import Traffic
from harness.advise.verdict import GOALS, NO_REUSE, TIE, UNDECIDED, Answer, no_reuse
from harness.advise.why import Causes, Ceilings, main_cause

BURST_NOTE = (
    "The traffic has no arrival times: `python -m harness` would send it as one burst, which "
    "favours one design, so the advice ran one burst and Poisson arrivals at {rates} "
    "({fractions} of the {burst:.1f} req/s the burst reached)."
)


@dataclass(frozen=True)
class Advice:
    traffic: Traffic
    patterns: tuple[Pattern, ...]
    grid: Grid
    answers: list[Answer]
    causes: list[Causes]
    ceilings: Ceilings
    figure: str
    quick: bool
    served: list[ServerRun] = field(default_factory=list)  # --server: the live server's runs


def arrivals_note(a: Advice) -> str:
    if a.traffic.has_times:
        return "Arrivals: the traffic's own times (arrival_s), replayed as given."
    rates = a.grid.rates
    poisson = [p for p in a.patterns if p.fraction is not None]
    burst = rates[poisson[0].name] / poisson[0].fraction if poisson and poisson[0].fraction else 0.0
    return BURST_NOTE.format(
        rates=", ".join(f"{rates[p.name]:.1f}" for p in poisson) + " req/s",
        fractions=", ".join(f"{p.fraction:g}" for p in poisson),
        burst=burst,
    )


def render(a: Advice) -> str:
    t = a.traffic
    lines = [
        f"# Which prefix cache for `{t.cfg.workload.name}`?",
        "",
        arrivals_note(a),
        "",
        "## Answer",
        "",
    ]
    for ans in a.answers:
        lines.append(f"- **{ans.goal.name}: {ans.verdict}**")
        for d in ans.duels:
            lines.append(f"  - {a.grid.where(d.pattern)}: {d.text()}")
    lines += ["", "## Why (hit rate)", ""]
    if no_reuse(a.grid.runs):
        lines.append(
            f"{NO_REUSE}: no prompt shares a prefix with an earlier one even at page 1 in an "
            "unbounded cache, so neither design can reuse anything and both pay only their "
            "bookkeeping (claim 1: under 1% throughput at a 0% hit rate). Latency differences "
            "above are the two schedulers' own (SGLang's prefill-only steps vs vLLM's mixed "
            "steps), not the caches'."
        )
    for c in a.causes:
        lines.append(f"- {a.grid.where(c.pattern)}: mostly {main_cause(c)}")
        lines += [f"  - {x}" for x in c.lines()]
    lines += ["", "## Ceilings", "", *_ceilings(a.ceilings, a.grid.runs, t.capacity)]
    if a.served:
        lines += ["", "## Your server", "", *_served(a)]
    lines += ["", "## What would change the answer", "", *_changes(a)]
    lines += ["", "## The grid", "", *_setup(a)]
    return "\n".join(lines) + "\n"


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.1%}"


def _ceilings(c: Ceilings, runs: pd.DataFrame, capacity: int) -> list[str]:
    best = runs.groupby("cache")["hit_rate"].max()
    return [
        f"- an ideal cache (unbounded, page 1): {_pct(c.ideal_page1)}; at block 16: {_pct(c.ideal_block16)}",
        f"- at your capacity ({capacity:,} tokens, page 1): Belady {_pct(c.belady)}, LRU {_pct(c.lru)}",
        "- reached in the grid: " + ", ".join(f"{d} {v:.1%}" for d, v in best.items()),
    ]


def _changes(a: Advice) -> list[str]:
    hit = next(x for x in a.answers if x.goal.key == GOALS[-1].key)
    out = [
        f"- under {a.grid.where(d.pattern)}: {d.winner} leads by {d.goal.margin(d.gain)} of hit "
        f"rate, mostly {cause}"
        for d in hit.duels
        if d.winner not in (TIE, UNDECIDED)
        for cause in [next((main_cause(c) for c in a.causes if c.pattern == d.pattern), "")]
    ]
    won = {d.winner for d in hit.duels} - {TIE, UNDECIDED}
    if len(hit.duels) > 1:
        out.append(
            "- the arrival pattern flips the answer: requests arriving together (a burst of "
            f"{a.traffic.num_requests}) and the same requests spread out are served best by "
            "different designs"
            if len(won) == 2
            else "- the arrival pattern does not flip it in this grid (one burst, and Poisson up "
            f"to {max(a.grid.rates.values(), default=0.0):.1f} req/s)"
        )
    out.append(_capacity_change(a))
    return out


def _capacity_change(a: Advice) -> str:
    if a.traffic.capacity_fits:
        return (
            f"- your capacity ({a.traffic.capacity:,} tokens) holds the whole working set "
            f"({a.traffic.working_set:,}): eviction plays no part; a smaller one would add it"
        )
    if not (a.grid.runs["capacity"] == FIT).any():  # --quick runs no -fit cells
        return (
            f"- a capacity of {a.traffic.working_set:,} tokens would hold the whole working set; "
            "the full grid (without --quick) measures the designs there"
        )
    return (
        f"- a capacity of {a.traffic.working_set:,} tokens holds the whole working set: the "
        "eviction lines above give, per arrival pattern, the hit rate each design loses at yours "
        "(the `-fit` cells)"
    )


def _served(a: Advice) -> list[str]:
    """The live server's measured hit rate beside the best of each design under the pattern."""
    out = []
    best = (
        a.grid.runs[a.grid.runs["capacity"] != FIT].groupby(["pattern", "cache"])["hit_rate"].max()
    )
    for s in a.served:
        where = a.grid.where(s.pattern)
        if s.rate is not None:
            where = (
                f"Poisson {s.rate:.1f} req/s (the same fraction of the server's burst throughput)"
            )
        designs = ", ".join(f"{c} {v:.1%}" for (p, c), v in best.items() if p == s.pattern)
        out.append(f"- {where}: {s.text()}; the designs here: {designs}")
    return out


def _rounded(t: Traffic) -> str:
    given = int(t.cfg.engine.kv_capacity_tokens)
    if t.cfg.hardware is not None and given != t.capacity and given // 32 * 32 != t.capacity:
        return " (what the preset's memory holds after the weights, in whole pages of 32)"
    return f" (rounded down from {given:,} to whole pages of 32)" if given != t.capacity else ""


def _setup(a: Advice) -> list[str]:
    t, runs = a.traffic, a.grid.runs
    cfg = t.cfg
    where = (
        f"simulated at hardware preset {cfg.hardware.name}"
        if cfg.executor == "simulated" and cfg.hardware is not None
        else f"executor {cfg.executor}"
    )
    out = [
        f"- {t.num_requests} requests, {where}, model {cfg.model.name}; your KV capacity "
        f"{t.capacity:,} tokens{_rounded(t)}, working set {t.working_set:,} (every request's "
        "prompt and output tokens)",
        f"- {len(runs)} runs ({'--quick' if a.quick else 'full grid'}), "
        f"cells: {', '.join(sorted(runs['cell'].unique()))}; seeds {sorted(runs['seed'].unique().tolist())} "
        "(several only for the shipped pairings under Poisson arrivals, where the result is random)",
        f"- figure: {a.figure}; every run's folder: runs/<pattern>/<cell>-seed<N> (`python -m harness.report` reads them)",
    ]
    out += [f"- skipped {name}: {why}" for name, why in a.grid.skipped.items()]
    return out
