"""`python -m harness.run.overhead`: where the 0%-hit overhead goes, measured robustly on a busy machine.

The overhead suite measures the end-to-end on/off throughput ratio on the wall clock, which on a
shared 2-core box carries other processes' load. This tool repeats the same measured window
(unique workload, warm-up, flush, the measured run: harness/run/pipeline.py's prepare and
measure, with the same checks and step accounting as the CLI) in one process, on/off pairs per engine in ABBA
order (on-off for even seeds, off-on for odd ones), and
records both clocks: wall time and this process's CPU time (immune to other processes' load), plus
the scheduler's cache-bookkeeping time. One extra cProfile pass per arm attributes the run's time to
code areas (cache package, scheduler, executor/model, torch), so an on/off difference has an address.
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import json
import pstats
import sys
from pathlib import Path

import pandas as pd

from engines.cache import designs
from harness.config.schema import RunConfig
from harness.report.stats import ratio_ci
from harness.results.owned_dir import out_and_overrides_problem
from harness.run.compose import compose
from harness.run.engine_target import ENGINE, engine_of
from harness.run.pipeline import measure, prepare

# every cache design (its preset), caching on and off
ARMS = tuple((d.name, on) for d in designs() for on in (True, False))
# Code areas for the profile, first match wins (paths relative to the repository).
AREAS = (
    *((f"cache/{d.name}", d.source) for d in designs()),  # each design's own package
    ("cache/common", "engines/cache/"),  # protocol.py, records.py
    ("scheduler", "engines/sched/"),
    ("step loop", "engines/loop.py"),
    ("engine loop", "engines/engine.py"),
    ("executor+model", "engines/"),
    ("torch (python)", "torch/"),
    ("C builtins (torch ops)", "~"),
)


def config(engine: str, cache_on: bool, overrides: list[str]) -> RunConfig:
    # Step by step: a decode run replays a stretch's bookkeeping in bulk, which an engine never
    # does, so the loop's CPU time would understate what caching costs per step.
    args = [
        "workload=unique",
        f"engine={engine}",
        f"engine.prefix_caching={cache_on}",
        "engine.decode_runs=false",
        *overrides,
    ]
    return compose(args, job_name="overhead").cfg


def measure_arm(cfg: RunConfig, seed: int, profile: cProfile.Profile | None = None) -> dict:
    """One measured window of `cfg` at `seed`, through the run pipeline (warm-up, flush, run)."""
    prepared = prepare(dataclasses.replace(cfg, seed=seed), ENGINE)
    measured = measure(cfg, prepared, profile=profile)
    if measured.status != "ok":
        raise RuntimeError(f"overhead run {cfg.engine.cache} seed {seed}: {measured.error}")
    engine, requests = engine_of(prepared), prepared.workload_requests
    records = measured.items
    prompt = sum(len(r.prompt_ids) * r.n for r in requests)
    return {
        "wall_s": measured.wall_s,
        "cpu_s": measured.cpu_s,
        "tokens": prompt + sum(r.output_tokens for r in records),
        "cached_tokens": sum(r.cached_tokens for r in records),
        "duration_s": max((r.finish_s for r in records), default=0.0),  # virtual when simulated
        "bookkeeping_ms": engine.loop.bookkeeping_ns / 1e6,
        "num_steps": engine.loop.num_steps,
    }


def area_seconds(profile: cProfile.Profile) -> dict[str, float]:
    """Self time (tottime) per code area."""
    out = dict.fromkeys([a for a, _ in AREAS] + ["other"], 0.0)
    stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]  # not in typeshed
    for (filename, _, _), (_, _, tottime, _, _) in stats.items():
        path = filename.replace("\\", "/")
        area = next((a for a, key in AREAS if key in path), "other")
        out[area] += tottime
    return out


def abba_order(seed: int) -> list[tuple[str, bool]]:
    """The arms of one seed, the on/off order of each engine's pair alternating with the seed (ABBA):
    a drift in machine speed then biases no arm, as it would if on always ran first."""
    order = []
    for engine in dict.fromkeys(e for e, _ in ARMS):
        pair = [(engine, True), (engine, False)]
        order += pair if seed % 2 == 0 else pair[::-1]
    return order


def run(repeats: int, overrides: list[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    configs = {(e, on): config(e, on, overrides) for e, on in ARMS}
    rows = []
    for seed in range(repeats):
        for engine, on in abba_order(seed):
            rows.append(
                {
                    "engine": engine,
                    "cache_on": on,
                    "seed": seed,
                    **measure_arm(configs[engine, on], seed),
                }
            )
    profiles = []
    for (engine, on), cfg in configs.items():
        prof = cProfile.Profile()
        m = measure_arm(cfg, 0, prof)
        profiles.append(
            {"engine": engine, "cache_on": on, "wall_s": m["wall_s"], **area_seconds(prof)}
        )
    return pd.DataFrame(rows), pd.DataFrame(profiles)


def ratios(runs: pd.DataFrame) -> pd.DataFrame:
    """Per engine and clock: geometric mean of paired on/off throughput ratios, 95% t-interval on
    the log scale."""
    out = []
    for engine, g in runs.groupby("engine"):
        on = g[g["cache_on"]].set_index("seed")
        off = g[~g["cache_on"]].set_index("seed")
        for clock in ("wall_s", "cpu_s"):
            r = (on["tokens"] / on[clock]) / (off["tokens"] / off[clock])
            ci = ratio_ci(r.dropna().tolist())
            out.append(
                {
                    "engine": engine,
                    "clock": clock,
                    "n_pairs": ci.n,
                    "ratio": ci.mean,
                    "ci_low": ci.low,
                    "ci_high": ci.high,
                }
            )
        extra_ms = (on["bookkeeping_ms"] - off["bookkeeping_ms"]) / (off["wall_s"] * 1e3)
        out.append(
            {
                "engine": engine,
                "clock": "bookkeeping_share_added",
                "n_pairs": len(extra_ms),
                "ratio": 1 - extra_ms.mean(),
                "ci_low": None,
                "ci_high": None,
            }
        )
    return pd.DataFrame(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m harness.run.overhead", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--repeats", type=int, default=5, help="interleaved seeds per arm (>= 2)")
    parser.add_argument("--out", type=Path, default=Path("results/overhead-profile"))
    parser.add_argument(
        "overrides", nargs="*", help="Hydra overrides, e.g. model=tiny workload.num_prompts=4"
    )
    args = parser.parse_args(argv)
    if args.repeats < 2:
        print("error: --repeats must be >= 2 for an interval", file=sys.stderr)
        return 2
    problem = out_and_overrides_problem(args.out, args.overrides)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    runs, profiles = run(args.repeats, args.overrides)
    args.out.mkdir(parents=True, exist_ok=True)
    table = ratios(runs)
    runs.to_csv(args.out / "runs.csv", index=False)
    profiles.to_csv(args.out / "profile.csv", index=False)
    table.to_csv(args.out / "ratios.csv", index=False)
    pd.set_option("display.width", 200)
    print(table.to_string(index=False))
    print(profiles.round(4).to_string(index=False))
    (args.out / "overrides.json").write_text(
        json.dumps({"repeats": args.repeats, "overrides": args.overrides}) + "\n"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
