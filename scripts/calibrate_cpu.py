"""Calibrate the `fitted` cost model on this CPU and write `conf/hardware/cpu_measured.yaml`.

    python scripts/calibrate_cpu.py [--model s] [--threads 1] [--repeats 5]

Times the real executor (model forward on the KV pool, torch attention) over a grid of step
shapes, fits FITTED_TERMS, and writes the preset (with the fit's residuals as comments) plus a
JSON report of every grid point. Takes about 1.5 minutes on a 2-core machine.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from dataclasses import asdict
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engines.model.presets import get_preset  # noqa: E402
from engines.simulate.calibrate import default_grid, fit, hardware_config, measure, report_rows  # noqa: E402
from engines.simulate.cost_model import HardwareConfig  # noqa: E402

# Where each field of the preset comes from, written next to it in the YAML.
FIELD_NOTES = {
    "name": "preset name (hardware=cpu_measured)",
    "kind": "linear fit over the step shape (engines/simulate/cost_model.py FITTED_TERMS)",
    "num_params": "parameters of the measured model (record only; the fit does not use it)",
    "num_layers": "measured model's shape (record only)",
    "bytes_per_param": "fp32 weights",
    "kv_bytes_per_element": "fp32 KV pool",
    "step_overhead_s": "fitted: fixed cost per step (metadata, launches, logits of one row)",
    "fit_per_token_s": "fitted: per new token (dense layers)",
    "fit_per_attention_pair_s": "fitted: per query-key pair, sum n*(c+n/2)",
    "fit_per_prefill_seq_s": "fitted: per sequence with > 1 new token (per-sequence attention call)",
    "fit_per_decode_seq_s": "fitted: per decode sequence (logits row, gather bookkeeping)",
    "fit_per_kv_token_s": "fitted: per K/V token read, sum (c+n)",
    "fit_per_kv_block_s": "fitted: per KV block-table entry read, sum ceil((c+n)/B)",
    "charge_host_time": "the engine loop's measured CPU time between steps is charged too (same core)",
    "fit_cache_kv_tokens": "fitted knee: KV tokens a step reads before leaving the CPU caches",
    "fit_per_kv_token_beyond_cache_s": "fitted: extra cost per KV token beyond the knee",
}


def _yaml_value(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, float):
        return repr(value)
    return str(value)


def preset_yaml(hw: HardwareConfig, header: list[str], residual_lines: list[str]) -> str:
    lines = [f"# {h}" for h in header]
    lines += ["defaults:", "  - base_hardware", "  - _self_"]
    default = HardwareConfig()
    for name, value in asdict(hw).items():
        if value == getattr(default, name) and name not in FIELD_NOTES:
            continue  # roofline-only constants stay unset
        note = FIELD_NOTES.get(name)
        lines.append(f"{name}: {_yaml_value(value)}" + (f"  # {note}" if note else ""))
    lines += [
        "",
        "# Residuals per grid point (phase new ctx batch block: measured_ms predicted_ms rel_err):",
    ]
    lines += [f"#   {r}" for r in residual_lines]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="s", help="model preset to time (engines.model.presets)")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    ap.add_argument("--repeats", type=int, default=5, help="timed rounds over the grid")
    ap.add_argument("--out", default=str(ROOT / "conf/hardware/cpu_measured.yaml"))
    ap.add_argument("--report", default=str(ROOT / "results/calibration/cpu_measured.json"))
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    model_config = get_preset(args.model)
    grid = default_grid()
    t0 = time.perf_counter()
    measurements = measure(model_config, grid, repeats=args.repeats)
    elapsed_s = time.perf_counter() - t0
    result = fit(measurements)
    when = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    summary = (
        f"R2 {result.r2:.3f}, median |rel err| {result.median_abs_rel_error:.3f}, "
        f"max |rel err| {result.max_abs_rel_error:.3f} over {len(grid)} grid points"
    )
    description = (
        f"this CPU ({platform.processor() or platform.machine()}, {args.threads} torch thread(s)) "
        f"running model {args.model} with the torch attention backend; {summary}"
    )
    hw = hardware_config(model_config, result, description)
    rows = report_rows(measurements, result)
    header = [
        f"Fitted cost model of this CPU, produced by `python scripts/calibrate_cpu.py --model {args.model} "
        f"--threads {args.threads} --repeats {args.repeats}` on {when}.",
        f"It timed RealExecutor.execute (model {args.model}, fp32, torch attention, block sizes 16 and 1) "
        f"on {len(grid)} step shapes in thread CPU time (immune to other processes' load), median of "
        f"{args.repeats} interleaved rounds,",
        "and fitted FITTED_TERMS by non-negative least squares on relative error "
        f"({elapsed_s:.0f} s of measurement). Fit: {summary}.",
        f"Full per-point report: {Path(args.report).relative_to(ROOT) if Path(args.report).is_relative_to(ROOT) else args.report}. "
        "Memory-bandwidth and cache contention from other processes still perturb CPU time a little.",
    ]
    residual_lines = [
        f"{r['phase']:7s} {r['num_new_tokens']:5d} {r['context_len']:5d} {r['batch_size']:3d} B{r['block_size']:<2d}: "
        f"{1e3 * r['measured_s']:8.2f} {1e3 * r['predicted_s']:8.2f} {r['rel_error']:+.3f}"
        for r in rows
    ]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(preset_yaml(hw, header, residual_lines))
    report = {
        "produced": when,
        "model": args.model,
        "threads": args.threads,
        "repeats": args.repeats,
        "measure_s": elapsed_s,
        "hardware": asdict(hw),
        "r2": result.r2,
        "median_abs_rel_error": result.median_abs_rel_error,
        "max_abs_rel_error": result.max_abs_rel_error,
        "points": rows,
    }
    Path(args.report).parent.mkdir(parents=True, exist_ok=True)
    Path(args.report).write_text(json.dumps(report, indent=1))
    print(f"wrote {args.out} and {args.report}: {summary} ({elapsed_s:.0f} s)")


if __name__ == "__main__":
    main()
