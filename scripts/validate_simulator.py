"""Validate the simulated executor against the real one on this CPU (hardware=cpu_measured).

    python scripts/validate_simulator.py [--workloads system_prompt multiturn] [--engines apc radix]

Runs each (workload, engine) through `python -m harness` with model s: executor=real on the wall
clock (`--repeats` times; the median of each metric, since other load on the machine perturbs
single runs), then executor=simulated on the fitted cost model once (it is deterministic), and
compares median TTFT and throughput (goal: within 15%). Hit counts must match exactly. The cost
model describes an idle CPU (calibrated in thread CPU time) while real runs read the wall clock, so
each row records the load average: on a shared 2-core machine, load above ~1 slows real runs. A
second comparison runs both executors in this process with the real one on a CPU-time clock
(`ThreadCpuClock`: what the wall clock would read on an idle CPU), which other load cannot skew.
Writes a table to stdout and JSON to results/validation/<stamp>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness_child import ROOT, hardware_override, run_harness  # noqa: E402

sys.path.insert(0, str(ROOT))

from engines.cache import DESIGNS  # noqa: E402  (every design by default)

METRICS = (
    "median_ttft_ms",
    "mean_ttft_ms",
    "median_tpot_ms",
    "output_throughput",
    "total_token_throughput",
    "duration",
)


def rel_error(simulated: float | None, real: float | None) -> float | None:
    if simulated is None or real is None or real == 0:
        return None
    return (simulated - real) / real


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", nargs="+", default=["system_prompt", "multiturn"])
    ap.add_argument("--engines", nargs="+", default=DESIGNS.names())
    ap.add_argument("--model", default="s")
    ap.add_argument("--hardware", default="cpu_measured")
    ap.add_argument("--repeats", type=int, default=3, help="real runs per (workload, engine)")
    ap.add_argument(
        "--out", default=None, help="JSON path (default results/validation/<stamp>.json)"
    )
    ap.add_argument("overrides", nargs="*", help="extra harness overrides for every run")
    args = ap.parse_args()

    stamp = time.strftime("%Y%m%d-%H%M%S")
    rows = []
    for workload in args.workloads:
        for engine in args.engines:
            runs: dict[str, list[Any]] = {"real": [], "simulated": []}
            loads = []  # 1-minute load average before each real run: the wall clock shares the CPU
            for executor, num_runs in (("real", args.repeats), ("simulated", 1)):
                for i in range(num_runs):
                    overrides = [
                        f"workload={workload}",
                        f"engine={engine}",
                        f"model={args.model}",
                        f"executor={executor}",
                        "label=validate_simulator",
                        f"hydra.run.dir=results/validation/{stamp}/{workload}-{engine}-{executor}-{i}",
                        *args.overrides,
                    ]
                    if executor == "simulated":
                        overrides.append(hardware_override(args.hardware))
                    if executor == "real":
                        loads.append(os.getloadavg()[0])
                    run = run_harness(overrides)
                    if run.summary is None:
                        raise SystemExit(f"run failed ({' '.join(overrides)}):\n{run.stderr_tail}")
                    runs[executor].append(run.summary)
            real, sim = _median_summary(runs["real"]), runs["simulated"][0]
            row = {"workload": workload, "engine": engine, "real_runs": len(runs["real"])}
            for metric in METRICS:
                row[f"real_{metric}"] = real.get(metric)
                row[f"sim_{metric}"] = sim.get(metric)
                row[f"err_{metric}"] = rel_error(sim.get(metric), real.get(metric))
            row["real_hit_rate"], row["sim_hit_rate"] = real.get("hit_rate"), sim.get("hit_rate")
            row["hits_identical"] = real.get("engine_hits") == sim.get("engine_hits")
            row["real_wall_s"], row["sim_wall_s"] = real.get("wall_s"), sim.get("wall_s")
            row["load_average"] = statistics.median(loads)
            row["real_status"], row["sim_status"] = real.get("status"), sim.get("status")
            row["real_error"] = real.get("error")
            cpu = cpu_clock_metrics(workload, engine, args.model, args.hardware)
            for metric in ("median_ttft_ms", "median_tpot_ms", "output_throughput"):
                row[f"cpu_real_{metric}"] = cpu["real"][metric]
                row[f"cpu_sim_{metric}"] = cpu["simulated"][metric]
                row[f"cpu_err_{metric}"] = rel_error(cpu["simulated"][metric], cpu["real"][metric])
            row["cpu_hits_identical"] = (
                cpu["real"]["cached_tokens"] == cpu["simulated"]["cached_tokens"]
            )
            rows.append(row)
            print(_line(row), flush=True)
            print(_cpu_line(row), flush=True)

    worst = _worst(rows, "err_")
    worst_cpu = _worst(rows, "cpu_err_")
    report = {
        "stamp": stamp,
        "hardware": args.hardware,
        "model": args.model,
        "goal": 0.15,
        "worst_abs_error_ttft_throughput": worst,
        "worst_abs_error_ttft_throughput_cpu_clock": worst_cpu,
        "rows": rows,
    }
    out = Path(args.out) if args.out else ROOT / f"results/validation/{stamp}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1))
    print(
        f"worst |relative error| (median TTFT, output throughput): wall clock {worst:.3f}, "
        f"CPU-time clock {worst_cpu:.3f}; wrote {out}"
    )


def _worst(rows: list[dict], prefix: str) -> float:
    metrics = ("median_ttft_ms", "output_throughput")
    return max(
        abs(r[f"{prefix}{m}"]) for r in rows for m in metrics if r[f"{prefix}{m}"] is not None
    )


def _cpu_line(r: dict) -> str:
    parts = [
        f"{m} real {r[f'cpu_real_{m}']:9.2f} sim {r[f'cpu_sim_{m}']:9.2f} ({r[f'cpu_err_{m}']:+.1%})"
        for m in ("median_ttft_ms", "output_throughput", "median_tpot_ms")
    ]
    return (
        f"{'  cpu clock':21s} | "
        + " | ".join(parts)
        + f" | hits identical: {r['cpu_hits_identical']}"
    )


class ThreadCpuClock:
    """The run clock of an otherwise idle CPU: CPU time of this thread, plus any idle jumps.

    The engine loop, cache bookkeeping and the model forward (torch on 1 thread) all run on the
    calling thread, so their CPU time is what the wall clock would read with nothing else running.
    """

    def __init__(self) -> None:
        self.restart()

    def restart(self) -> None:
        self._t0 = time.thread_time()
        self._idle_s = 0.0

    def now(self) -> float:
        return time.thread_time() - self._t0 + self._idle_s

    def wait_until(self, t_s: float) -> None:
        self._idle_s += max(0.0, t_s - self.now())

    def advance(self, dt_s: float) -> None:
        """Measured time advances by itself."""


def cpu_clock_metrics(workload: str, engine: str, model: str, hardware: str) -> dict:
    """Median TTFT, median TPOT and output throughput of the real executor on a CPU-time clock and
    of the simulated one, in this process (no other load is counted)."""
    import torch
    from hydra import compose, initialize_config_dir

    from engines.build import build_engine
    from harness.client.arrivals import with_arrivals
    from harness.client.inprocess import drive
    from harness.config.schema import RunConfig, to_schema
    from harness.config.tokenspace import token_space_for
    from workloads.base import generate
    from workloads.tokens import warmup_requests

    torch.set_num_threads(1)
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        overrides = [f"workload={workload}", f"engine={engine}", f"model={model}"]
        cfg = to_schema(
            compose("config", overrides=overrides + [hardware_override(hardware)]), RunConfig
        )
    space = token_space_for(cfg.model)
    requests = with_arrivals(generate(cfg.workload, cfg.seed, space), cfg.load, cfg.seed)
    warm = warmup_requests(space, cfg.seed, 2, 64, 4)
    out = {}
    for executor in ("real", "simulated"):
        eng = build_engine(
            cfg.engine, cfg.model, executor=executor, device="cpu", hardware=cfg.hardware
        )
        drive(eng, warm)
        eng.records.clear()
        assert eng.cache.reset()
        if executor == "real":
            from engines.real_executor import RealExecutor

            assert isinstance(eng.executor, RealExecutor)
            eng.executor.clock = ThreadCpuClock()
        records = drive(eng, requests)
        out[executor] = _metrics(records)
    return out


def _metrics(records) -> dict:
    duration = max(r.finish_s for r in records)
    tpots = [
        (r.finish_s - r.first_token_s) / (r.output_tokens - 1)
        for r in records
        if r.output_tokens > 1
    ]
    return {
        "median_ttft_ms": 1000 * statistics.median(r.first_token_s - r.arrival_s for r in records),
        "median_tpot_ms": 1000 * statistics.median(tpots) if tpots else None,
        "output_throughput": sum(r.output_tokens for r in records) / duration,
        "cached_tokens": sum(r.cached_tokens for r in records),
    }


def _median_summary(summaries: list[dict]) -> dict:
    """Per numeric field, the median over repeated runs; other fields from the first run."""
    out = dict(summaries[0])
    for key, value in out.items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out[key] = statistics.median(s[key] for s in summaries)
    return out


def _line(r: dict) -> str:
    def fmt(metric: str, scale: float = 1.0) -> str:
        real, sim, err = r[f"real_{metric}"], r[f"sim_{metric}"], r[f"err_{metric}"]
        return f"{metric} real {real * scale:9.2f} sim {sim * scale:9.2f} ({err:+.1%})"

    return (
        f"{r['workload']:14s} {r['engine']:6s} | {fmt('median_ttft_ms')} | {fmt('output_throughput')} | "
        f"{fmt('median_tpot_ms')} | hits identical: {r['hits_identical']} (hit rate {r['real_hit_rate']:.3f})"
        f" | status real {r['real_status']} sim {r['sim_status']} | load {r['load_average']:.1f}"
    )


if __name__ == "__main__":
    main()
