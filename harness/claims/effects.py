"""The 2 x 2 effects every claim prints, in one convention (the report's decomposition.csv too).

For a factor A (e.g. the cache, apc -> radix) crossed with B (the scheduler, vllm | sglang):
the simple effect of A under each level of B, the main effect (their mean) and the interaction,
the standard 2 x 2 one: HALF the difference of the two simple effects. When the interaction is
as large as the main effect, the main effect hides opposite or one-cell effects, so a design's
effect is judged by its simple effects instead (`judged`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

CONVENTION = "interaction = half the difference of the two simple effects (standard 2x2 effect)"


@dataclass(frozen=True)
class Effects:
    simple: dict[str, float]  # level of B -> effect of A under it
    main: float
    interaction: float

    @property
    def use_simple(self) -> bool:
        return abs(self.interaction) >= abs(self.main)

    def judged(self, passes: Callable[[float], bool]) -> bool:
        """Whether the effect passes: the main effect, or every simple effect when the
        interaction is as large as the main effect."""
        if self.use_simple:
            return all(passes(v) for v in self.simple.values())
        return passes(self.main)

    def text(self, scale: float = 100.0, unit: str = " pts") -> str:
        simple = ", ".join(f"under {k} {scale * v:+.1f}{unit}" for k, v in self.simple.items())
        how = "judged by simple effects" if self.use_simple else "judged by the main effect"
        return (
            f"main {scale * self.main:+.1f}{unit}, interaction {scale * self.interaction:+.1f}"
            f"{unit} ({simple}; {how})"
        )


def effects(cells: Mapping[tuple[str, str], float], a: tuple[str, str], b: tuple[str, str]):
    """Effects of A's change a[0] -> a[1], across B's levels b, on `cells[(a_level, b_level)]`."""
    simple = {lvl: cells[a[1], lvl] - cells[a[0], lvl] for lvl in b}
    values = list(simple.values())
    return Effects(simple, sum(values) / 2, (values[1] - values[0]) / 2)
