"""The one palette of every figure (the report's and the claims'): a fixed colour per arm.

A cache design's arms take the colours its registration gives (engines/cache/<name>/ `DESIGN`):
the shipped arm `<design>`, caching off `<design>-off`, and its variants `<design>-<variant>` (in
the claims also `<design> <variant>`). Any other arm or series takes a colour from `PALETTE`.
"""

from __future__ import annotations

import zlib

from engines.cache import designs

# Claim series that are not arms: a salt on or off, an effect of the 2 x 2 decomposition.
SERIES_COLOURS = {
    "no salt": "#7f7f7f",
    "salted": "#2ca02c",
    "data structure": "#9467bd",
    "scheduler": "#8c564b",
}
# A live server's figure (plots_server.py): what the server measured is drawn filled in its arm's
# colour, the twin's prediction hatched in the same colour, the bounds in greys, so measured vs
# twin never reads as two designs (apc and radix are two colours).
BOUND_COLOURS = {"ideal": "#d9d9d9", "lru": "#a6a6a6", "belady": "#737373"}
TWIN_HATCH = "////"
PALETTE = ("#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#393b79", "#637939", "#843c39")


def _arm_colours(separator: str) -> dict[str, str]:
    colours = {}
    for design in designs():
        style = design.style
        colours[design.name] = style.colour
        colours[f"{design.name}-off"] = style.off_colour
        for variant, value in style.variant_colours.items():
            colours[f"{design.name}{separator}{variant}"] = value
    return colours


ARM_COLOURS = _arm_colours("-")  # the report's arm names
_NAMED = {**ARM_COLOURS, **_arm_colours(" "), **SERIES_COLOURS}  # and the claims' series names


def colour(arm: str) -> str:
    """An arm's colour in the report: its first word's fixed colour (`apc load.rate=8` is drawn
    as `apc`), else one picked from `PALETTE` by the name, the same in every figure."""
    base = str(arm).split(" ")[0]
    return ARM_COLOURS.get(base) or PALETTE[zlib.crc32(base.encode()) % len(PALETTE)]


def series_colours(series: list[str]) -> dict[str, str]:
    """The colours of one claim figure's series: each named one its fixed colour, the others the
    palette's colours in order, skipping those already in the figure."""
    fixed = {s: _NAMED[s] for s in series if s in _NAMED}
    spare = iter([c for c in PALETTE if c not in fixed.values()] * 4)
    return {s: fixed.get(s) or next(spare) for s in series}
