"""claims.md and claims.csv from the rows, with the command line that produced them."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, fields
from pathlib import Path

import pandas as pd

from harness.claims.record import Row

COLUMNS = (
    "number",
    "claim",
    "source",
    "threshold",
    "setup",
    "measured",
    "result",
    "verdict",
    "figure",
)


def write_csv(rows: Sequence[Row], path: Path) -> None:
    pd.DataFrame([asdict(r) for r in rows], columns=[f.name for f in fields(Row)]).to_csv(
        path, index=False
    )


def write_markdown(
    rows: Sequence[Row], details: dict[int, list[dict]], command: str, path: Path
) -> None:
    head = [
        "#",
        "claim",
        "source",
        "verdict (conditions)",
        "evidence",
        "result",
        "real vLLM server",
        "figure",
    ]
    lines = [
        "# Claims about APC and RadixAttention, re-measured",
        "",
        f"Command: `{command}`. Each verdict follows the rule written next to its claim before measuring "
        "(below the table). Simulated runs project GPU time from a roofline cost model; hit rates, outputs and "
        "cache bookkeeping are exact; simulated GPU numbers are projections. Every verdict is given with its "
        "conditions (load, capacity, dtype, seeds). 2x2 effects use one convention: the interaction is half the "
        "difference of the two simple effects (as decomposition.csv).",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    for r in rows:
        figure = f"![claim {r.number}]({r.figure})" if r.figure else ""
        verdict = f"**{r.verdict}** (conditions: {r.setup})" if r.setup else f"**{r.verdict}**"
        cells = [
            str(r.number),
            r.claim,
            r.source,
            verdict,
            r.evidence,
            r.result,
            r.real_server,
            figure,
        ]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    for r in rows:
        lines += [
            "",
            f"## {r.number}. {r.claim}",
            "",
            f"- Source: {r.source}",
            f"- Verdict rule: {r.threshold}",
            f"- Setup: {r.setup}",
            f"- Measured: {r.measured}",
            f"- Result: {r.result}",
            f"- Verdict: **{r.verdict}**, under the setup's conditions ({r.seconds:.0f} s)",
            f"- Evidence: {r.evidence}",
            f"- Real vLLM server: {r.real_server or 'not a server check'}",
        ]
        if details.get(r.number):
            lines += [
                "",
                "<details><summary>numbers</summary>",
                "",
                "```json",
                json.dumps(details[r.number], indent=1, default=_plain),
                "```",
                "",
                "</details>",
            ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _plain(value: object) -> object:
    """numpy scalars, NaN and friends, for json.dumps."""
    try:
        return value.item()  # type: ignore[attr-defined]
    except AttributeError:
        return str(value)
