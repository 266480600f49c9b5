"""Host cost of the real executor per decode step, and end-to-end TPOT at page 1 vs page 16.

`steps` (default): for each cache (apc, radix), page (1, 16), batch and context, fill an engine
with `batch` distinct requests of `context` prompt tokens and time the decode steps that follow:
scheduling and cache work (the engine's step minus the executor), the executor's host arrays and
block-table journal drain, and the launch preparation (packing, the one copy, table scatter,
metadata). The model forward is left out (`HostOnlyExecutor`), so what is timed is exactly the
host path a GPU run pays per step; the block-table gather (device work, a memcpy on CPU) is timed
apart. Times are the thread's CPU time (a shared machine's other load does not count), medians
over the timed steps. Goal: <= 1 ms at batch 128 x 2,048 keys, page 1 within 1.2x
of page 16.

`e2e`: the issue-33 run on this CPU, `python -m harness` with model=tiny on system_prompt
16 x 8 (2,048 + 128 tokens, 32 out), kv 262,144, 256 seqs, 8,192 budget, for apc and radix at
page 1 and 16, in interleaved rounds; prints median TPOT and page-1/page-16 ratios. `--root`
runs another checkout (a before/after comparison).
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engines.cache import designs  # noqa: E402
from engines.config import EngineConfig  # noqa: E402
from engines.engine import Engine  # noqa: E402
from engines.frontend import FRONTENDS  # noqa: E402
from engines.kv_pool import KVPool  # noqa: E402
from engines.loop import StepLoop  # noqa: E402
from engines.model.presets import get_preset  # noqa: E402
from engines.model.weights import build_model  # noqa: E402
from engines.real_executor import RealExecutor  # noqa: E402
from engines.request import GenerationRequest  # noqa: E402
from engines.sched.base import StepBudget, build_scheduler  # noqa: E402
from engines.step_inputs import StepArrays, StepTensors, attention_metadata  # noqa: E402
from harness.config.footprint import (  # noqa: E402
    BOOKKEEPING_BYTES_PER_BLOCK,
    BYTES_PER_PROMPT_TOKEN,
    GIB,
    LIMIT_ENV,
    memory_limit_bytes,
)

# every registered design at its upstream page first, then the other of 1 and 16
PAGES = {d.name: (d.block_size, 16 if d.block_size == 1 else 1) for d in designs()}


class HostOnlyExecutor(RealExecutor):
    """The real executor without the model: packs, copies, scatters the table and builds the
    metadata, then returns no hidden states (scripted decoding needs no logits)."""

    launch_ns: int = 0
    prepare_ns: int = 0
    gather_ns: int = 0  # device work: the step's block-table columns (CPU: a memcpy)

    def prepare(self, items: Any) -> tuple[StepArrays, list[int]]:
        t0 = time.thread_time_ns()
        out = super().prepare(items)
        self.prepare_ns += time.thread_time_ns() - t0
        return out

    def forward(self, step: StepArrays) -> tuple[torch.Tensor, torch.Tensor]:
        t0 = time.thread_time_ns()
        dev = StepTensors.unpack(self.packer.pack(step.parts()))
        self.tables.apply(dev.table_index, dev.table_ids)
        n = step.num_seqs
        max_seq_len = int(step.lens[:n].max())
        # The host side of the metadata: the same launches with one table column (what the
        # host pays does not depend on the width; the gather's bytes are device work).
        attention_metadata(
            dev,
            self.tables.table,
            self.cache.block_size,
            1,
            tuple(step.query_lens.tolist()),
            tuple(step.lens[n : 2 * n].tolist()),
            max_seq_len,
        )
        t1 = time.thread_time_ns()
        num_blocks = -(-max_seq_len // self.cache.block_size)
        self.tables.table[:, :num_blocks].index_select(0, dev.seq_rows)
        t2 = time.thread_time_ns()
        self.launch_ns += t1 - t0
        self.gather_ns += t2 - t1
        return torch.empty(0), dev.logits_index


def host_engine(cache: str, page: int, batch: int, context: int, steps: int) -> Engine:
    per_seq = -(-(context + steps + 8 + batch * context // 8192) // page) * page
    capacity = batch * per_seq + 4096  # headroom: SGLang admits against a reserve
    capacity = -(-capacity // page) * page
    config = EngineConfig(
        cache=cache,
        block_size=page,
        kv_capacity_tokens=capacity,
        max_num_seqs=max(batch, 1),
        max_num_batched_tokens=8192,
    )
    config.validate()
    scheduler = build_scheduler(config)
    loop = StepLoop(scheduler, StepBudget(config.max_num_seqs, config.max_num_batched_tokens))
    mc = get_preset("tiny")
    model = build_model(mc, "cpu")
    pool = KVPool(mc.num_layers, 2, page, mc.num_kv_heads, mc.head_dim, mc.torch_dtype, "cpu")
    executor = HostOnlyExecutor(
        model,
        pool,
        None,  # type: ignore[arg-type]  # never called: no forward
        scheduler.cache,
        loop_clock(),
        torch.device("cpu"),
        max_num_seqs=batch,
        max_model_len=context + steps + 8 + batch * context // 8192,
    )
    return Engine(loop, executor, FRONTENDS.get(config.scheduler_design))


def loop_clock() -> Any:
    from engines.clock import WallClock

    return WallClock()


def time_decode(
    cache: str, page: int, batch: int, context: int, steps: int, seed: int
) -> dict[str, Any]:
    # Set-up (engine, prefill, the first decode step) untimed, with the collector paused and
    # what it made frozen afterwards, as the harness runs (harness/run/pipeline.py collector_paused).
    gc.collect()
    gc.disable()
    engine = host_engine(cache, page, batch, context, steps)
    rng = np.random.default_rng(seed)
    # Early finishers of the prefill decode while the rest prefill: room for all of it.
    num_out = steps + 4 + -(-batch * context // 8192)
    for i in range(batch):
        prompt = tuple(rng.integers(1, 1000, context).tolist())
        script = tuple(rng.integers(1, 1000, num_out).tolist())
        engine.add_request(
            GenerationRequest(f"r{i}", prompt, num_out, scripted_output_ids=script), 0.0
        )
    executor = engine.executor
    assert isinstance(executor, HostOnlyExecutor)
    while any(s.num_output_tokens < 2 for s in engine.loop.running) or engine.loop.waiting:
        engine.step()
    gc.freeze()
    gc.enable()
    totals, prepares, launches, gathers = [], [], [], []
    for _ in range(steps - 2):
        executor.prepare_ns = executor.launch_ns = executor.gather_ns = 0
        t0 = time.thread_time_ns()
        out = engine.step()
        totals.append(time.thread_time_ns() - t0 - executor.gather_ns)
        prepares.append(executor.prepare_ns)
        launches.append(executor.launch_ns)
        gathers.append(executor.gather_ns)
        assert out.num_steps == 1 and len(out.tokens) == batch, "a decode step of the whole batch"
    gc.unfreeze()
    del engine, executor
    gc.collect()
    ms = 1e-6
    total = statistics.median(totals) * ms
    prepare = statistics.median(prepares) * ms
    launch = statistics.median(launches) * ms
    return {
        "cache": cache,
        "page": page,
        "batch": batch,
        "context": context,
        "step_ms": round(total, 4),  # host work only (the gather is left out)
        "sched_cache_ms": round(total - prepare - launch, 4),
        "prepare_ms": round(prepare, 4),
        "launch_ms": round(launch, 4),
        "gather_ms": round(statistics.median(gathers) * ms, 4),
    }


def run_steps(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The grid `--repeats` times over; per point the repeat with the least host time (other
    load on a shared machine only ever adds time, even to CPU time: caches, memory bandwidth)."""
    best: dict[tuple[str, int, int, int], dict[str, Any]] = {}
    for _ in range(args.repeats):
        for context in args.contexts:
            for batch in args.batches:
                for cache, pages in PAGES.items():
                    for page in pages:
                        row = time_decode(cache, page, batch, context, args.steps, args.seed)
                        print(json.dumps(row), flush=True)
                        key = (cache, page, batch, context)
                        if key not in best or row["step_ms"] < best[key]["step_ms"]:
                            best[key] = row
    return list(best.values())


def steps_table(rows: list[dict[str, Any]]) -> str:
    """Markdown: ms per decode step by (batch, context), page 1 / page 16 per cache."""
    key = {(r["cache"], r["page"], r["batch"], r["context"]): r for r in rows}
    head = ["batch", "context"]
    for cache, pages in PAGES.items():
        head += [f"{cache} p{page}" for page in pages] + [f"{cache} p1/p16"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---:|" * len(head)]
    for batch, context in sorted({(r["batch"], r["context"]) for r in rows}):
        cells = [str(batch), str(context)]
        for cache, pages in PAGES.items():
            ms = {page: key[(cache, page, batch, context)]["step_ms"] for page in pages}
            cells += [f"{ms[page]:.3f}" for page in pages] + [f"{ms[1] / ms[16]:.2f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------ e2e

E2E_OVERRIDES = (
    "model=tiny",
    "workload=system_prompt",
    "workload.num_groups=16",
    "workload.prompts_per_group=8",
    "workload.system_prompt_len=2048",
    "workload.question_len=128",
    "workload.output_len=32",
    "engine.kv_capacity_tokens=262144",
    "engine.max_num_seqs=256",
    "engine.max_num_batched_tokens=8192",
    "threads=1",
)


def e2e_once(root: Path, cache: str, page: int, out_dir: Path) -> dict[str, Any]:
    run_dir = out_dir / f"{cache}-p{page}-{time.monotonic_ns()}"
    cmd = [
        sys.executable,
        "-m",
        "harness",
        *E2E_OVERRIDES,
        f"engine={cache}",
        f"engine.block_size={page}",
        f"hydra.run.dir={run_dir}",
    ]
    env = {"PYTHONPATH": str(root), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    import os

    subprocess.run(cmd, cwd=root, env={**os.environ, **env}, check=True, capture_output=True)
    summary = json.loads((run_dir / "summary.json").read_text())
    return {
        "cache": cache,
        "page": page,
        "mean_tpot_ms": summary["mean_tpot_ms"],
        "mean_ttft_ms": summary["mean_ttft_ms"],
        "duration_s": summary["duration"],
    }


def run_e2e(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Rounds of the four arms (and of the same arms on `--baseline`'s checkout, alternating),
    ABBA within a round, so machine load hits both pages, and both checkouts, alike."""
    trees = [("this", Path(args.root).resolve() if args.root else ROOT)]
    if args.baseline:
        trees.append(("baseline", Path(args.baseline).resolve()))
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench_host_") as tmp:
        for round_index in range(args.rounds):
            arms = [(t, c, p) for t in trees for c, pages in PAGES.items() for p in pages]
            if round_index % 2:
                arms.reverse()
            for (tree, root), cache, page in arms:
                row = e2e_once(root, cache, page, Path(tmp))
                row.update(round=round_index, tree=tree)
                rows.append(row)
                print(json.dumps(row), flush=True)
    return rows


def e2e_table(rows: list[dict[str, Any]]) -> str:
    """Medians per arm, and the median of the page-1/page-16 TPOT ratios paired per round."""

    def pick(tree: str, cache: str, page: int) -> list[dict[str, Any]]:
        return [r for r in rows if (r["tree"], r["cache"], r["page"]) == (tree, cache, page)]

    lines = [
        "| checkout | cache | TPOT p16 (ms) | TPOT p1 (ms) | p1/p16 (paired) | "
        "duration p16 (s) | duration p1 (s) |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for tree in sorted({r["tree"] for r in rows}, reverse=True):
        for cache in PAGES:
            p16, p1 = pick(tree, cache, 16), pick(tree, cache, 1)
            by_round = {r["round"]: r["mean_tpot_ms"] for r in p16}
            ratios = [
                r["mean_tpot_ms"] / by_round[r["round"]] for r in p1 if r["round"] in by_round
            ]
            t16 = statistics.median(r["mean_tpot_ms"] for r in p16)
            t1 = statistics.median(r["mean_tpot_ms"] for r in p1)
            d16 = statistics.median(r["duration_s"] for r in p16)
            d1 = statistics.median(r["duration_s"] for r in p1)
            lines.append(
                f"| {tree} | {cache} | {t16:.1f} | {t1:.1f} | {statistics.median(ratios):.2f} | "
                f"{d16:.2f} | {d1:.2f} |"
            )
    return "\n".join(lines)


MAX_BATCH = 4096
MAX_CONTEXT = 2**20
# Per prompt token at page 1: the prompt held as Python ints, engine sequences, and one block or
# page record per token (harness/config/footprint.py's figures).
BYTES_PER_TOKEN = BYTES_PER_PROMPT_TOKEN + BOOKKEEPING_BYTES_PER_BLOCK


def check_args(args: argparse.Namespace) -> str | None:
    """The first bad argument as one line, or None; nothing has run yet."""
    context_max = MAX_CONTEXT  # the forward never runs: the model's own context does not bound it
    for name, values, top in (
        ("--batches", args.batches, MAX_BATCH),
        ("--contexts", args.contexts, context_max),
    ):
        bad = [v for v in values if not 1 <= v <= top]
        if bad:
            return f"{name}: {bad[0]} is out of range 1-{top:,}"
    if args.steps < 3:
        return f"--steps must be at least 3 (the first 2 are untimed), got {args.steps}"
    for name, value in (("--repeats", args.repeats), ("--rounds", args.rounds)):
        if value < 1:
            return f"{name} must be at least 1, got {value}"
    for name in ("root", "baseline"):
        tree = getattr(args, name)
        if tree is not None and not (Path(tree) / "harness" / "__main__.py").is_file():
            return f"--{name} {tree}: not a prefixbench checkout (no harness/__main__.py)"
    if args.json is not None and not Path(args.json).resolve().parent.is_dir():
        return f"--json {args.json}: its folder does not exist"
    if args.mode == "steps":
        need = max(args.batches) * max(args.contexts) * BYTES_PER_TOKEN
        free = memory_limit_bytes()
        if free is not None and need > free:
            return (
                f"--batches/--contexts: the largest point ({max(args.batches)} x "
                f"{max(args.contexts)} tokens) needs an estimated {need / GIB:.1f} GiB but "
                f"{free / GIB:.1f} GiB are available ({LIMIT_ENV} sets the limit)"
            )
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("mode", nargs="?", choices=("steps", "e2e"), default="steps")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 16, 64, 128, 256])
    parser.add_argument("--contexts", type=int, nargs="+", default=[512, 2048, 8192])
    parser.add_argument("--steps", type=int, default=12, help="decode steps per point (2 untimed)")
    parser.add_argument("--repeats", type=int, default=1, help="steps: grid repeats (min kept)")
    parser.add_argument("--rounds", type=int, default=3, help="e2e: rounds of the four arms")
    parser.add_argument("--root", help="e2e: the checkout to run (default: this one)")
    parser.add_argument("--baseline", help="e2e: a second checkout, run side by side")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="also write the rows here")
    args = parser.parse_args(argv)
    problem = check_args(args)
    if problem is not None:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    if args.mode == "steps":
        rows = run_steps(args)
        print(steps_table(rows))
    else:
        rows = run_e2e(args)
        print(e2e_table(rows))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
