"""In-process replay of a Mooncake trace prefix with the trace_h100 suite's settings.

The run pipeline's prepare and measure (harness/run/pipeline.py: generate, arrivals, warm-up, flush,
measured run) without writing files, returning what the fidelity pin compares: per-request outcomes and
the cache's eviction counters.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from hydra import compose, initialize_config_dir

from harness.config.schema import CONF_DIR, RunConfig, to_schema
from harness.run.engine_target import ENGINE, engine_of
from harness.run.pipeline import measure, prepare

ROOT = Path(__file__).resolve().parents[1]

# conf/suite/trace_h100.yaml, minus the sweep.
TRACE_H100 = (
    "workload=mooncake_conversation",
    "hardware=h100_llama3_70b_fp8",
    "executor=simulated",
    "model.max_position_embeddings=131072",
    "load.slowdown=8.0",
    "engine.max_num_batched_tokens=8192",
    "engine.max_num_seqs=256",
)


def trace_config(engine: str, kv_capacity_tokens: int, max_requests: int | None, *extra: str):
    overrides = [
        *TRACE_H100,
        f"engine={engine}",
        f"engine.kv_capacity_tokens={kv_capacity_tokens}",
        f"workload.max_requests={'null' if max_requests is None else max_requests}",
        *extra,
    ]
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return to_schema(compose("config", overrides=overrides), RunConfig)


def replay(cfg) -> dict:
    """Per-request outcomes and cache counters of one replay, as plain JSON-able values."""
    prepared = prepare(cfg, ENGINE)
    measured = measure(cfg, prepared)
    assert measured.status == "ok", measured.error
    engine = engine_of(prepared)
    records = engine.records
    stats = engine.cache.stats()
    return {
        "requests": {
            r.request_id: [
                r.cached_tokens,
                r.num_preemptions,
                r.recomputed_tokens,
                r.scheduled_s,
                r.first_token_s,
                r.finish_s,
                _digest(r.token_times_s),
            ]
            for r in records
        },
        "stats": asdict(stats),
    }


def _digest(times: Sequence[float]) -> str:
    """Every simulated token time, bit for bit, in a short string."""
    return hashlib.sha1(struct.pack(f"{len(times)}d", *times)).hexdigest()[:16]


# The pinned cases: both designs at a KV capacity the prefix overflows (evictions, preemptions),
# at the suite's 8x slowdown and at the trace's own rate (more requests running at once).
PIN_REQUESTS = 300
PIN_KV_TOKENS = 131072
# radix under SGLang's non-overlap loop, as the trace_h100 suite's arm runs it and as recorded;
# radix_overlap: the preset's default, SGLang's overlap loop.
LOOPS = {
    "apc": ("apc", ()),
    "radix": ("radix", ("engine.overlap=false",)),
    "radix_overlap": ("radix", ()),
}
PIN_CASES = {
    f"{name}-slowdown{slowdown}": (name, f"load.slowdown={slowdown}.0")
    for name in LOOPS
    for slowdown in (8, 1)
}
PIN_PATH = ROOT / "tests/data/trace_prefix_pin.json"


def replay_case(name: str, *extra: str) -> dict:
    arm, slowdown = PIN_CASES[name]
    engine, loop = LOOPS[arm]
    return replay(trace_config(engine, PIN_KV_TOKENS, PIN_REQUESTS, slowdown, *loop, *extra))


if __name__ == "__main__":  # python -m tests.trace_replay: re-record the pin (only on purpose)
    import json

    PIN_PATH.write_text(json.dumps({name: replay_case(name) for name in PIN_CASES}, indent=0))
    print(f"wrote {PIN_PATH}")
