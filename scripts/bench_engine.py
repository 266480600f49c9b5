"""Engine-level performance goals of issue [4/8], measured side by side in one process.

1. The shared-system-prompt workload (16 groups x 8 prompts, system 1024, question 64, output 32)
   on model `s` (1 torch thread): wall time per engine (goal < 2 min each).
2. TTFT with a cache hit against TTFT cold: one request at a time, a cold 1088-token prompt, then
   the same system prompt with a new question (hit fraction h); goal
   TTFT(hit) / TTFT(cold) <= (1 - h) + 0.1. Medians of repeats, both engines.

Prints a table and the JSON (`--json PATH` writes it too).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engines.batch import run_batch
from engines.build import build_engine  # noqa: E402
from engines.cache import designs  # noqa: E402
from engines.config import EngineConfig  # noqa: E402
from engines.model.presets import get_preset  # noqa: E402
from engines.request import GenerationRequest  # noqa: E402
from workloads.base import TokenSpace, generate  # noqa: E402
from workloads.system_prompt import SystemPromptParams  # noqa: E402

# each design at its preset's granularity
PRESETS: dict[str, dict[str, Any]] = {
    d.name: dict(cache=d.name, block_size=d.block_size) for d in designs()
}


def make_engine(cache: str, model: str):
    cfg = EngineConfig(
        **PRESETS[cache], kv_capacity_tokens=1 << 16, max_num_batched_tokens=2048, backend="torch"
    )
    return build_engine(cfg, get_preset(model), device="cpu")


def to_engine_requests(requests) -> list[GenerationRequest]:
    return [
        GenerationRequest(r.request_id, tuple(r.prompt_ids), r.output_len, tuple(r.output_ids), 0.0)
        for r in requests
    ]


def workload_run(cache: str, model: str, quick: bool) -> dict:
    params = SystemPromptParams(
        name="system_prompt",
        family="system_prompt",
        num_groups=4 if quick else 16,
        prompts_per_group=8,
        system_prompt_len=1024,
        question_len=64,
        output_len=32,
    )
    space = TokenSpace(vocab_size=get_preset(model).vocab_size, first_ordinary_id=1)
    reqs = to_engine_requests(generate(params, 0, space))
    engine = make_engine(cache, model)
    t0 = time.perf_counter()
    records = run_batch(engine, reqs)
    wall_s = time.perf_counter() - t0
    prompt = sum(r.prompt_tokens for r in records)
    cached = sum(r.cached_tokens for r in records)
    return {
        "case": "shared_prompt_workload",
        "engine": cache,
        "requests": len(records),
        "wall_s": wall_s,
        "hit_rate": cached / prompt,
        "goal_wall_s": 120.0,
        "ok": wall_s < 120.0,
    }


def ttft_ratio(cache: str, model: str, repeats: int) -> dict:
    gen = torch.Generator().manual_seed(0)
    vocab = get_preset(model).vocab_size
    cold, hot, h = [], [], 0.0
    for rep in range(repeats):
        engine = make_engine(cache, model)
        system = torch.randint(1, vocab, (1024,), generator=gen).tolist()
        q1, q2 = (torch.randint(1, vocab, (64,), generator=gen).tolist() for _ in range(2))
        first = GenerationRequest(f"cold{rep}", tuple(system + q1), 1, (1,))
        second = GenerationRequest(f"hit{rep}", tuple(system + q2), 1, (1,))
        (rec_cold,) = run_batch(engine, [first])
        (rec_hot,) = run_batch(engine, [second])
        cold.append(rec_cold.first_token_s - rec_cold.arrival_s)
        hot.append(rec_hot.first_token_s - rec_hot.arrival_s)
        h = rec_hot.cached_tokens / rec_hot.prompt_tokens
    ratio = statistics.median(hot) / statistics.median(cold)
    goal = (1 - h) + 0.1
    return {
        "case": "ttft_hit_over_cold",
        "engine": cache,
        "hit_fraction": h,
        "ttft_cold_ms": 1e3 * statistics.median(cold),
        "ttft_hit_ms": 1e3 * statistics.median(hot),
        "ratio": ratio,
        "goal_ratio": goal,
        "ok": ratio <= goal,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="s")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--quick", action="store_true", help="4 groups instead of 16")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    rows = []
    for cache in PRESETS:
        rows.append(ttft_ratio(cache, args.model, args.repeats))
        rows.append(workload_run(cache, args.model, args.quick))
    for r in rows:
        print(
            "  ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in r.items())
        )
    text = json.dumps(rows, indent=2)
    if args.json:
        args.json.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
