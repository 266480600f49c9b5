"""`python -m harness.overhead`: where the 0%-hit overhead goes, measured robustly on a busy machine.

The overhead suite measures the end-to-end on/off throughput ratio on the wall clock, which on a
shared 2-core box carries other processes' load. This tool repeats the same measured window
(unique workload, warm-up, flush, `Engine.run`) in one process, on/off pairs per engine in ABBA
order (on-off for even seeds, off-on for odd ones), and
records both clocks: wall time and this process's CPU time (immune to other processes' load), plus
the scheduler's cache-bookkeeping time. One extra cProfile pass per arm attributes the run's time to
code areas (cache package, scheduler, executor/model, torch), so an on/off difference has an address.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import sys
import time
from pathlib import Path

import pandas as pd
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from engines.build import build_engine
from harness.config import CONF_DIR, RunConfig  # noqa: F401  (registers the schemas)
from harness.load import fan_out, with_arrivals
from harness.owned_dir import out_and_overrides_problem
from harness.report.stats import ratio_ci
from harness.tokenspace import token_space_for
from workloads.base import generate
from workloads.tokens import warmup_requests

ARMS = (("apc", True), ("apc", False), ("radix", True), ("radix", False))
# Code areas for the profile, first match wins (paths relative to the repository).
AREAS = (
    ("cache/apc", "engines/cache/apc/"),
    ("cache/radix", "engines/cache/radix/"),
    ("cache/base", "engines/cache/"),
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
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3", job_name="overhead"):
        return OmegaConf.to_object(compose(config_name="config", overrides=args))


def measure(cfg: RunConfig, seed: int, profile: cProfile.Profile | None = None) -> dict:
    """One measured window, as harness.runner runs it: warm up, flush, run the workload."""
    torch.set_num_threads(cfg.threads)
    space = token_space_for(cfg.model)
    requests = fan_out(
        with_arrivals(generate(cfg.workload, seed, space), cfg.load, seed), scripted=True
    )
    engine = build_engine(
        cfg.engine, cfg.model, executor=cfg.executor, device=cfg.device, hardware=cfg.hardware
    )
    warm = warmup_requests(
        space, seed, cfg.warmup.num_requests, cfg.warmup.prompt_len, cfg.warmup.output_len
    )
    engine.run(fan_out(warm, scripted=True))
    engine.records.clear()
    assert engine.cache.reset(), "the cache refused to flush"
    engine.loop.bookkeeping_ns = 0
    wall0, cpu0 = time.perf_counter(), time.process_time()
    if profile is not None:
        profile.enable()
    engine.run(requests)
    if profile is not None:
        profile.disable()
    wall_s, cpu_s = time.perf_counter() - wall0, time.process_time() - cpu0
    tokens = sum(len(r.prompt_ids) for r in requests) + sum(r.output_tokens for r in engine.records)
    hit = sum(r.cached_tokens for r in engine.records)
    duration_s = max((r.finish_s for r in engine.records), default=0.0)  # virtual when simulated
    return {
        "wall_s": wall_s,
        "cpu_s": cpu_s,
        "tokens": tokens,
        "cached_tokens": hit,
        "duration_s": duration_s,
        "bookkeeping_ms": engine.loop.bookkeeping_ns / 1e6,
        "num_steps": engine.loop.num_steps,
    }


def area_seconds(profile: cProfile.Profile) -> dict[str, float]:
    """Self time (tottime) per code area."""
    out = dict.fromkeys([a for a, _ in AREAS] + ["other"], 0.0)
    for (filename, _, _), (_, _, tottime, _, _) in pstats.Stats(profile).stats.items():
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
                    **measure(configs[engine, on], seed),
                }
            )
    profiles = []
    for (engine, on), cfg in configs.items():
        prof = cProfile.Profile()
        m = measure(cfg, 0, prof)
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
        prog="python -m harness.overhead", description=__doc__.splitlines()[0]
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
