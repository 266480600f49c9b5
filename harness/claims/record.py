"""The records of a claim check: the claim as published, what was found, and the verdicts.

A verdict is one of `holds`, `does not hold`, `depends on <what>`, `undecided: <why>` or
`not measurable here: <why>`; the helpers below are the only way the claim modules spell them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

HOLDS = "holds"
FAILS = "does not hold"


def depends(on: str) -> str:
    return f"depends on {on}"


def undecided(why: str) -> str:
    return f"undecided: {why}"


def not_measurable(why: str) -> str:
    return f"not measurable here: {why}"


UNSURE = "undecided"  # a condition whose interval straddles the threshold, in `sum_up`


def sum_up(on: str, states: dict[str, str], unsure: str = UNSURE) -> str:
    """One verdict from per-condition ones (condition -> HOLDS, FAILS or UNSURE): the same
    everywhere gives that; `depends on <on>` only when one condition holds and another does not;
    any other mix (holds or fails beside undecided) is undecided, naming each condition's label.
    `unsure` is how an undecided condition is named in the list."""
    found = set(states.values())
    if len(found) == 1 and found != {UNSURE}:
        return found.pop()
    parts = "; ".join(
        f"{unsure if label == UNSURE else label} on {', '.join(c for c, v in states.items() if v == label)}"
        for label in (HOLDS, UNSURE, FAILS)
        if label in found
    )
    if HOLDS in found and FAILS in found:
        return depends(f"{on}: {parts}")
    return undecided(parts)


@dataclass(frozen=True)
class Figure:
    """Grouped bars: groups -> series -> value, with an optional reference line (the threshold)."""

    title: str
    ylabel: str
    groups: dict[str, dict[str, float]]
    reference: float | None = None
    reference_label: str = ""


@dataclass(frozen=True)
class Finding:
    """What one claim's experiments found. `details` rows go under the table in claims.md."""

    setup: str
    measured: str
    result: str
    verdict: str
    figure: Figure | None = None
    details: list[dict[str, object]] = field(default_factory=list)
    # the interval that decided the verdict (harness/claims/strength.py), "" for exact counts
    interval: str = ""


@dataclass(frozen=True)
class Claim:
    """A published claim and the rule that turns measurements into its verdict."""

    number: int
    key: str  # names the claim's runs folder and figure
    statement: str
    source: str
    threshold: str  # the verdict rule, written before measuring
    measure: Callable[..., Finding]  # (Context) -> Finding


@dataclass(frozen=True)
class Row:
    """One line of claims.csv / claims.md."""

    number: int
    claim: str
    source: str
    threshold: str
    setup: str
    measured: str
    result: str
    verdict: str
    figure: str  # path relative to the output folder, or ""
    seconds: float
    real_server: str = ""  # the claim on a live vLLM server (harness/claims/server.py), or ""
    evidence: str = ""  # runs, seeds and the deciding interval (harness/claims/strength.py)


@dataclass(frozen=True)
class Checked:
    """One claim as checked: its row and, unless its experiment crashed, what it found."""

    claim: Claim
    row: Row
    finding: Finding | None
