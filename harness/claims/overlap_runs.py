"""Claim 24's runs: the arms, the loads and the per-seed hit rates they give.

Six arms on one stream: SGLang's scheduler over the radix tree (its shipped pairing) and over the
hash cache, each with the overlap loop off and on, and vLLM's scheduler over the hash cache with
async scheduling off and on. A load is a client concurrency (`load.max_concurrency`) or a Poisson
rate; every seed draws the stream and the arrivals afresh, and the theory is the stream's own
ideal hit rate (an unbounded cache, every repeat of a group reusing its system prompt).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from engines.config import UPSTREAM_SCHEDULER
from harness.claims import keys
from harness.claims.arms import APC, H100_8B, RADIX, engine
from harness.claims.experiment import Context

FOLDER = "24-overlap"
SGLANG, VLLM = UPSTREAM_SCHEDULER[RADIX], UPSTREAM_SCHEDULER[APC]
OFF, ON = "off", "on"
# arm label -> engine overrides; the first four are SGLang's scheduler, overlap off and on
ARMS: dict[str, tuple[str, ...]] = {
    f"{RADIX} overlap {OFF}": (engine(RADIX), "engine.overlap=false"),
    f"{RADIX} overlap {ON}": (engine(RADIX), "engine.overlap=true"),
    f"{APC}+{SGLANG} overlap {OFF}": (engine(APC, SGLANG), "engine.overlap=false"),
    f"{APC}+{SGLANG} overlap {ON}": (engine(APC, SGLANG), "engine.overlap=true"),
    f"{APC}+{VLLM} sync": (engine(APC), "engine.async_scheduling=false"),
    f"{APC}+{VLLM} async": (engine(APC), "engine.async_scheduling=true"),
}
SGLANG_CACHES = (RADIX, f"{APC}+{SGLANG}")  # the caches SGLang's scheduler drives here
THEORY_ARM = f"{RADIX} overlap {OFF}"  # page 1: its ideal hit rate is the token-level theory


def overlap_arm(cache: str, state: str) -> str:
    """The arm label of `cache` (an entry of SGLANG_CACHES) with the overlap loop off or on."""
    return f"{cache} overlap {state}"


@dataclass(frozen=True)
class Stream:
    """A workload: its label in the results and its overrides."""

    label: str
    overrides: tuple[str, ...]


@dataclass(frozen=True)
class Load:
    """How requests are released: at most `concurrency` in flight, or Poisson at `rate` req/s."""

    concurrency: int | None = None
    rate: float | None = None

    @property
    def label(self) -> str:
        return f"c={self.concurrency}" if self.concurrency else f"Poisson {self.rate:g}/s"

    @property
    def overrides(self) -> tuple[str, ...]:
        if self.concurrency:
            return (f"load.max_concurrency={self.concurrency}",)
        return ("load.mode=poisson", f"load.rate={self.rate}")


@dataclass(frozen=True)
class Cell:
    """One stream at one load: per arm, the hit rate of each seed; the theory of each seed."""

    stream: str
    load: str
    hits: dict[str, list[float]]
    theory: list[float]

    def mean(self, arm: str) -> float:
        values = self.hits[arm]
        return sum(values) / len(values)

    def theory_mean(self) -> float:
        return sum(self.theory) / len(self.theory)

    def overlap_effect(self, cache: str) -> list[float]:
        """Per seed, hit rate with the overlap loop on minus off (negative: the overlap costs)."""
        on, off = self.hits[overlap_arm(cache, ON)], self.hits[overlap_arm(cache, OFF)]
        return [a - b for a, b in zip(on, off)]

    def same_batch_effect(self, cache: str) -> list[float]:
        """Per seed, hit rate with the overlap loop off minus the theory: what requests prefilled
        together (never sharing under SGLang's scheduler) and anything else but the overlap lose."""
        return [a - t for a, t in zip(self.hits[overlap_arm(cache, OFF)], self.theory)]


def measure_cell(ctx: Context, stream: Stream, load: Load, seeds: range) -> Cell:
    """Every arm at every seed on one stream and load (simulated H100 Llama-3.1-8B)."""
    hits: dict[str, list[float]] = {arm: [] for arm in ARMS}
    theory = []
    for seed in seeds:
        for arm, engine_overrides in ARMS.items():
            # a folder name: no spaces, and no "/" (Poisson labels say req/s)
            name = re.sub(r"[^\w=.+-]", "_", f"{stream.label}-{load.label}-{arm}-seed{seed}")
            overrides = (
                *H100_8B,
                *stream.overrides,
                *engine_overrides,
                *load.overrides,
                f"seed={seed}",
            )
            summary = ctx.run(FOLDER, name, overrides).summary
            hits[arm].append(keys.value(summary, keys.HIT_RATE))
            if arm == THEORY_ARM:  # the stream's theory at page 1, as the PR's radix computed it
                theory.append(keys.value(summary, keys.IDEAL_HIT_RATE))
    return Cell(stream.label, load.label, hits, theory)
