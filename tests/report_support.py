"""Synthetic run directories for the report and notebook tests (no engine, milliseconds to write).

Each run is written through harness.results.run_dir.RunDir exactly as the runner lays it out: summary.json
with the fields the report reads, manifest.json with the resolved config, requests.parquet.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from harness.results.run_dir import RunDir, write_failed_summary

GRANULARITY = {"apc": 16, "radix": 1}


def write_run(
    root: Path,
    name: str,
    *,
    engine: str = "apc",
    workload: str = "unique",
    seed: int = 0,
    cache: bool = True,
    policy: str = "fcfs",
    capacity: int = 4096,
    throughput: float = 1000.0,
    ttfts_ms: tuple[float, ...] = (10.0, 20.0, 30.0),
    hit_rate: float = 0.0,
    ideal: float = 0.0,
    belady: float = 0.0,
    bookkeeping_ms: float = 5.0,
    duration_s: float = 1.0,
    executor: str = "real",
    hardware: str | None = None,
    slowdown: float = 1.0,
    completed: int | None = None,
    rate: float | None = None,
    extra: dict | None = None,
    summary_extra: dict | None = None,
) -> Path:
    """One run directory; `extra` ({"workload": {"max_requests": 8}}, say) merges into the config,
    `summary_extra` into summary.json (a live server's fields, say)."""
    g = GRANULARITY[engine]
    config: dict[str, Any] = {
        "workload": {"name": workload},
        "engine": {
            "cache": engine,
            "prefix_caching": cache,
            "policy": policy,
            "block_size": g,
            "kv_capacity_tokens": capacity,
        },
        "model": {"name": "tiny"},
        "executor": executor,
        "hardware": None if hardware is None else {"name": hardware, "kind": "roofline"},
        "load": {"mode": "auto" if rate is None else "poisson", "slowdown": slowdown, "rate": rate},
        "seed": seed,
        "label": None,
    }
    for group, values in (extra or {}).items():
        config[group] = {**(config.get(group) or {}), **values}
    summary = {
        "status": "ok",
        "workload": workload,
        "backend": engine,
        "seed": seed,
        "cache_enabled": cache,
        "kv_capacity_tokens": capacity,
        "block_size_or_page_size": g,
        "model_id": "tiny",
        "completed": completed or len(ttfts_ms),
        "duration": duration_s,
        "total_token_throughput": throughput,
        "request_throughput": throughput / 100,
        "output_throughput": throughput / 10,
        "mean_ttft_ms": sum(ttfts_ms) / len(ttfts_ms),
        "median_ttft_ms": sorted(ttfts_ms)[len(ttfts_ms) // 2],
        "p99_ttft_ms": max(ttfts_ms),
        "mean_tpot_ms": 2.0,
        "hit_rate": hit_rate,
        "ideal_hit_rate": ideal,
        "theoretical_hit_rate_capped": belady,
        "belady_hit_rate": belady,
        "cache_bookkeeping_ms": bookkeeping_ms,
        "evictions": 0,
        "policy_profile": {"schedule_policy": policy},
        **(summary_extra or {}),
    }
    requests = pd.DataFrame(
        {
            "request_id": [f"r{i}" for i in range(len(ttfts_ms))],
            "workload": workload,
            "engine": engine,
            "prompt_tokens": 32,
            "cached_tokens": int(32 * hit_rate),
            "ttft_ms": list(ttfts_ms),
        }
    )
    run = RunDir(root / name)
    run.write_requests(requests)
    run.write_manifest({"seed": seed, "config": config})
    run.write_summary(summary)
    return run.path


def write_server_run(
    root: Path,
    name: str,
    nonce: str,
    port: int,
    *,
    flavour: str = "vllm",
    block: int = 32,
    capacity: int = 1048544,
    preset: str | None = None,
    workload: str = "multiturn",
    hit_rate: float = 0.5,
) -> Path:
    """A live server's run as harness/live_server/record.py writes it: served as
    `llama-rand-smollm2-<nonce>` (the launchers' name), its twin `engine=`, the server's own
    block or page size and KV capacity in summary.json; `preset` is `server.model_preset`."""
    twin = "radix" if flavour == "sglang" else "apc"
    server = {"flavour": flavour, "url": f"http://127.0.0.1:{port}", "expect_nonce": nonce}
    if preset is not None:
        server["model_preset"] = preset
    return write_run(
        root,
        name,
        engine=twin,
        workload=workload,
        hit_rate=hit_rate,
        ideal=0.6,
        belady=0.55,
        extra={"server": server, "load": {"mode": "auto", "max_concurrency": None}},
        summary_extra={
            "backend": f"{flavour}-server",
            "model_id": f"llama-rand-smollm2-{nonce}",
            "server_flavour": flavour,
            "server_version": "0.5.23" if flavour == "sglang" else "0.32.0",
            "server_url": f"http://127.0.0.1:{port}",
            "block_size_or_page_size": block,
            "kv_capacity_tokens": capacity,
            "load_mode": "burst",
            "predicted_hit_rate": hit_rate,
            "twin_matches": 48,
            "twin_requests": 48,
        },
    )


def write_failed(root: Path, name: str, engine: str = "apc", workload: str = "unique") -> Path:
    """A job that failed before measuring: only a failed summary and Hydra's resolved config."""
    path = root / name
    (path / ".hydra").mkdir(parents=True)
    (path / ".hydra" / "config.yaml").write_text(
        f"workload:\n  name: {workload}\nengine:\n  cache: {engine}\n  block_size: {GRANULARITY[engine]}\n"
    )
    write_failed_summary(path, "engine.kv_capacity_tokens too small")
    return path


# The overhead arm's paired ratios (on/off) the tests check against; the first pair is vLLM PR #2762
# (8.55 req/s with APC on, 8.71 off, docs/benchmarking.md §6).
APC_PAIRS = ((855.0, 871.0), (990.0, 1000.0), (1010.0, 1000.0), (980.0, 1000.0), (1000.0, 1000.0))
RADIX_PAIRS = (
    (995.0, 1000.0),
    (1005.0, 1000.0),
    (1000.0, 1000.0),
    (990.0, 1000.0),
    (1000.0, 1000.0),
)


def write_results_tree(root: Path) -> Path:
    """A small tree holding every figure's inputs: overhead pairs, a capacity sweep, a failure."""
    for seed, ((apc_on, apc_off), (rx_on, rx_off)) in enumerate(zip(APC_PAIRS, RADIX_PAIRS)):
        write_run(root, f"ov/{seed}-apc", engine="apc", seed=seed, throughput=apc_on)
        write_run(
            root, f"ov/{seed}-apc_off", engine="apc", seed=seed, cache=False, throughput=apc_off
        )
        write_run(root, f"ov/{seed}-radix", engine="radix", seed=seed, throughput=rx_on)
        write_run(
            root, f"ov/{seed}-radix_off", engine="radix", seed=seed, cache=False, throughput=rx_off
        )
    for capacity, hit in ((256, 0.2), (1024, 0.6), (4096, 0.7)):
        for engine, policy in (("apc", "fcfs"), ("radix", "fcfs"), ("radix", "lpm")):
            write_run(
                root,
                f"cap/{capacity}-{engine}-{policy}",
                engine=engine,
                policy=policy,
                workload="system_prompt",
                capacity=capacity,
                hit_rate=hit,
                ideal=0.75,
                belady=hit + 0.05,
                ttfts_ms=(5.0, 8.0, 40.0),
            )
    write_failed(root, "cap/bad-apc", engine="apc", workload="system_prompt")
    return root


# Simulated runs: a whole-trace capacity sweep on one preset, and 0%-hit unique runs on two presets
# (bookkeeping on / off in ms, virtual duration in s) whose shares the tests compute by hand.
TRACE_HW = "h100_llama3_70b_fp8"
TRACE_POINTS = {  # capacity -> engine -> (hit rate, TTFT ms: p50 via the middle value, p99 = max)
    447488: {"apc": (0.05, (1e3, 8e3, 9e4)), "radix": (0.06, (9e2, 7e3, 8e4))},
    1791488: {"apc": (0.08, (8e2, 5e3, 6e4)), "radix": (0.09, (7e2, 4e3, 5e4))},
    7167488: {"apc": (0.26, (5e2, 2e3, 3e4)), "radix": (0.27, (4e2, 1e3, 2e4))},
}
UNIQUE_SIM = {  # (hardware, engine) -> per seed (bookkeeping on ms, bookkeeping off ms, duration s)
    ("h100_llama3_8b_bf16", "apc"): ((30.0, 5.0, 2.5), (34.0, 6.0, 2.5)),
    ("h100_llama3_8b_bf16", "radix"): ((40.0, 4.0, 2.5), (44.0, 4.0, 2.5)),
    ("h200_llama3_70b_fp8", "apc"): ((30.0, 5.0, 10.0), (34.0, 6.0, 10.0)),
    ("h200_llama3_70b_fp8", "radix"): ((40.0, 4.0, 10.0), (44.0, 4.0, 10.0)),
}


def write_sim_tree(root: Path) -> Path:
    """A trace capacity sweep on TRACE_HW (slowdown 8) and UNIQUE_SIM's on/off runs."""
    for capacity, engines in TRACE_POINTS.items():
        for engine, (hit, ttfts) in engines.items():
            write_run(
                root,
                f"trace/{capacity}-{engine}",
                engine=engine,
                workload="mooncake_conversation",
                capacity=capacity,
                hit_rate=hit,
                ttfts_ms=ttfts,
                executor="simulated",
                hardware=TRACE_HW,
                slowdown=8.0,
                completed=12031,
            )
    for (hardware, engine), seeds in UNIQUE_SIM.items():
        for seed, (on_ms, off_ms, duration_s) in enumerate(seeds):
            for cache, ms in ((True, on_ms), (False, off_ms)):
                write_run(
                    root,
                    f"ov_sim/{hardware}-{engine}-{cache}-{seed}",
                    engine=engine,
                    seed=seed,
                    cache=cache,
                    bookkeeping_ms=ms,
                    duration_s=duration_s,
                    executor="simulated",
                    hardware=hardware,
                )
    return root
