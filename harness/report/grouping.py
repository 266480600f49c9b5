"""Which runs may share a line, a panel and a figure: only the plotted variable and the arm differ.

A sweep figure draws a metric against one config key (the KV capacity, say). Runs join one line
only when their resolved configs differ in that key and the seed alone; the lines of one panel
differ in the engine's knobs too (the arms being compared); runs that differ in anything else (the
number of requests, the load, the warm-up, ...) get a panel of their own, titled by the values
that set it apart. So no line or panel ever mixes runs of different configurations.
"""

from __future__ import annotations

from typing import NamedTuple

import pandas as pd

from harness.report.tables import NOT_VARYING

ARM_PREFIX = "config.engine."  # keys that make the arms of one panel differ
# Keys that name the platform or the workload: one figure each, never a panel title.
FIGURE_KEYS = (
    "config.workload.name",
    "config.model.name",
    "config.executor",
    "config.hardware.name",
)


class Panel(NamedTuple):
    title: str  # `key=value, ...` setting this panel apart from the figure's others; '' if alone
    runs: (
        pd.DataFrame
    )  # with a `line` column: runs of one line differ only in the variable and seed


def _config_columns(runs: pd.DataFrame, variable: str, figure_keys: tuple[str, ...]) -> list[str]:
    return [
        c
        for c in runs.columns
        if c.startswith("config.")
        and c not in (*NOT_VARYING, variable)
        and not c.startswith(figure_keys)
    ]


def _key(runs: pd.DataFrame, columns: list[str]) -> pd.Series:
    if not columns:
        return pd.Series("", index=runs.index, dtype=object)
    return runs[columns].map(str).agg("\x1f".join, axis=1)


def _differing(runs: pd.DataFrame, columns: list[str], by: pd.Series) -> list[str]:
    """Columns whose value differs between the groups `by` (constant within each)."""
    return [c for c in columns if runs[c].map(str).groupby(by).first().nunique() > 1]


def _describe(row: pd.Series, columns: list[str]) -> str:
    return ", ".join(f"{c.removeprefix('config.')}={_plain(row[c])}" for c in columns)


def _plain(value: object) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def panels(
    runs: pd.DataFrame, variable: str, figure_keys: tuple[str, ...] = FIGURE_KEYS
) -> list[Panel]:
    """The runs of one figure split into panels (what is fixed) and lines (the arm), `variable`
    (a `config.` column) left free. Each run's `line` is its arm, plus the engine keys that set it
    apart from another line of the same arm."""
    cols = _config_columns(runs, variable, figure_keys)
    fixed = [c for c in cols if not c.startswith(ARM_PREFIX)]
    arm_cols = [c for c in cols if c.startswith(ARM_PREFIX)]
    panel_key = _key(runs, fixed)
    apart = _differing(runs, fixed, panel_key)
    out = []
    for _, group in runs.groupby(panel_key, sort=True):
        line_key = _key(group, arm_cols)
        extra = [
            c
            for c in _differing(group, arm_cols, line_key)
            if group[c].map(str).groupby(group["arm"]).nunique().max() > 1
        ]
        lines = [
            " ".join(
                [str(row["arm"]), *(f"{c.removeprefix('config.')}={_plain(row[c])}" for c in extra)]
            )
            for _, row in group.iterrows()
        ]
        out.append(Panel(_describe(group.iloc[0], apart), group.assign(line=lines)))
    return out
