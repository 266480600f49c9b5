"""Micro-benchmark of the paged-attention backends: prefill (512, 2048 tokens) and decode (batch 1,
16 and 64 at 2048 keys, batch 16 at 8192), median of --runs timed calls after warm-up, as a table,
a summary and JSON.

GPU: the unified Triton kernel, the decode kernel (triton-decode) and the torch path against torch
SDPA on dense tensors. Decode reports the K/V bytes read per second as a fraction of the device's
measured copy bandwidth (the goal: >= 0.6 at batch >= 16, >= 2048 keys); prefill reports time
against dense SDPA (goal >= 0.8x). --sweep also times other launch configurations of both kernels
(tiles, pipeline stages, splits) on one decode and one prefill point, so one GPU run gives the data
to tune the defaults. CPU: the torch path and dense SDPA with --threads threads (1 by default).
--dry-run: tiny shapes on CPU with the Triton kernels under the interpreter (every code path of a
GPU run, in seconds; the figures mean nothing).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any

if "--dry-run" in sys.argv:  # the interpreter is read when triton_paged is imported
    os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engines.attention.metadata import AttentionMetadata  # noqa: E402
from engines.attention.torch_paged import GatherScratch, paged_attention_torch  # noqa: E402
from engines.attention.triton_decode import (  # noqa: E402
    DecodeConfig,
    decode_attention_triton,
    decode_config,
)
from engines.attention.triton_paged import (  # noqa: E402
    HAS_TRITON,
    INTERPRET,
    LaunchConfig,
    launch_config,
    paged_attention_triton,
)


@dataclass(frozen=True)
class HeadConfig:
    num_heads: int
    num_kv_heads: int
    head_dim: int
    dtype: str


GPU_HEADS = HeadConfig(32, 8, 128, "bfloat16")  # Llama-3-8B-like
CPU_HEADS = HeadConfig(9, 3, 64, "float32")  # SmolLM2-135M, what the CPU engine runs
DRY_HEADS = HeadConfig(8, 2, 16, "float32")  # --dry-run: interpreter-sized


@dataclass(frozen=True)
class Scenario:
    name: str
    context_lens: tuple[int, ...]
    query_lens: tuple[int, ...]

    @property
    def num_new_tokens(self) -> int:
        return sum(self.query_lens)

    @property
    def num_kv_tokens(self) -> int:
        return sum(self.context_lens) + sum(self.query_lens)


SCENARIOS = (
    Scenario("prefill-512", (0,), (512,)),
    Scenario("prefill-2048", (0,), (2048,)),
    Scenario("decode-b1-kv2048", (2047,), (1,)),
    Scenario("decode-b16-kv2048", (2047,) * 16, (1,) * 16),
    Scenario("decode-b64-kv2048", (2047,) * 64, (1,) * 64),
    Scenario("decode-b16-kv8192", (8191,) * 16, (1,) * 16),
)
DRY_SCENARIOS = (
    Scenario("prefill-40", (0,), (40,)),
    Scenario("decode-b3-kv80", (79,) * 3, (1,) * 3),
)
SWEEP_DECODE = "decode-b16-kv2048"  # the goal's point
SWEEP_PREFILL = "prefill-2048"


@dataclass(frozen=True)
class Row:
    scenario: str
    backend: str
    median_ms: float
    tokens_per_s: float
    vs_dense: float | None  # dense SDPA time / this backend's time (>1: faster than dense)
    kv_read_gb_per_s: float | None  # decode only: K and V bytes read per second
    copy_bw_fraction: float | None  # decode only: of the measured device copy bandwidth
    max_err_vs_torch: float | None  # largest |difference| from the torch paged path's output


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_ms(fn: Callable[[], object], device: torch.device, runs: int, warmup: int = 2) -> float:
    for _ in range(warmup):
        fn()
    sync(device)
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        sync(device)
        samples.append((time.perf_counter() - start) * 1e3)
    return statistics.median(samples)


def copy_bandwidth_gb_per_s(device: torch.device, runs: int, num_bytes: int) -> float:
    """Read + write bytes per second of one large device-to-device copy."""
    src = torch.empty(num_bytes, dtype=torch.uint8, device=device).fill_(1)
    dst = torch.empty_like(src)
    ms = time_ms(lambda: dst.copy_(src), device, runs)
    return 2 * num_bytes / (ms * 1e-3) / 1e9


def build_inputs(sc: Scenario, heads: HeadConfig, block_size: int, device: torch.device, seed: int):
    gen = torch.Generator().manual_seed(seed)
    dtype = getattr(torch, heads.dtype)
    seq_lens = [c + n for c, n in zip(sc.context_lens, sc.query_lens)]
    pages = [-(-n // block_size) for n in seq_lens]
    ids = (torch.randperm(sum(pages), generator=gen) + 1).tolist()  # fragmented, as after churn
    tables = [ids[sum(pages[:s]) : sum(pages[: s + 1])] for s in range(len(pages))]
    meta = AttentionMetadata.build(
        list(sc.context_lens), list(sc.query_lens), tables, block_size, device
    )
    cache_dims = (sum(pages) + 1, block_size, heads.num_kv_heads, heads.head_dim)
    k_cache = torch.randn(cache_dims, generator=gen).to(device=device, dtype=dtype)
    v_cache = torch.randn(cache_dims, generator=gen).to(device=device, dtype=dtype)
    q = torch.randn(sc.num_new_tokens, heads.num_heads, heads.head_dim, generator=gen)
    return q.to(device=device, dtype=dtype), k_cache, v_cache, meta


def dense_sdpa(sc: Scenario, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor):
    """SDPA on contiguous per-batch K/V (no paging): the speed of light for the same math."""
    num_seqs, seq_len = len(sc.query_lens), sc.context_lens[0] + sc.query_lens[0]
    flat_k = k_cache.view(-1, *k_cache.shape[2:])
    k = (
        flat_k[: num_seqs * seq_len]
        .view(num_seqs, seq_len, *k_cache.shape[2:])
        .transpose(1, 2)
        .contiguous()
    )
    v = v_cache.view(-1, *v_cache.shape[2:])[: num_seqs * seq_len]
    v = v.view(num_seqs, seq_len, *v_cache.shape[2:]).transpose(1, 2).contiguous()
    qd = q.view(num_seqs, sc.query_lens[0], *q.shape[1:]).transpose(1, 2).contiguous()
    causal = sc.query_lens[0] > 1
    return lambda: F.scaled_dot_product_attention(qd, k, v, is_causal=causal, enable_gqa=True)


def sweep_configs(q: torch.Tensor, num_kv_heads: int, meta: AttentionMetadata, decode: bool):
    """Named launch configurations around the default one (the sweep's candidates)."""
    if decode:
        base = decode_config(q, num_kv_heads, meta)
        splits = sorted({base.num_splits, 2 * base.num_splits, max(1, base.num_splits // 2)})
        return {
            f"triton-decode[t{t},st{st},x{x}]": DecodeConfig(t, x, 4, st)
            for t in (32, 64, 128)
            for st in (2, 3, 4)
            for x in splits
        }
    base_p = launch_config(q, num_kv_heads, meta)
    qpk = q.shape[1] // num_kv_heads
    shapes = [(128, 64, 8, 3), (128, 128, 8, 3), (64, 64, 4, 3), (128, 32, 4, 2), (256, 64, 8, 3)]
    shapes += [(128, 64, 4, 4), (64, 128, 4, 2)]
    return {
        f"triton[m{m},t{t},w{w},st{st}]": LaunchConfig(m, m // qpk, t, base_p.num_segments, w, st)
        for m, t, w, st in shapes
    }


def backends_for(
    sc: Scenario, device: torch.device, scratch: GatherScratch
) -> dict[str, Callable[..., Any]]:
    fns: dict[str, Callable[..., Any]] = {}
    if HAS_TRITON and (device.type == "cuda" or INTERPRET):
        fns["triton"] = paged_attention_triton  # the unified kernel, decode included
        if max(sc.query_lens) == 1:
            fns["triton-decode"] = decode_attention_triton
    fns["torch"] = partial(paged_attention_torch, scratch=scratch)
    return fns


def run(args: argparse.Namespace) -> dict:
    if args.dry_run:
        args.device = "cpu"
    device = torch.device(
        args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    )
    if device.type == "cpu":
        torch.set_num_threads(args.threads)
    heads = DRY_HEADS if args.dry_run else (GPU_HEADS if device.type == "cuda" else CPU_HEADS)
    if args.dtype:
        heads = HeadConfig(heads.num_heads, heads.num_kv_heads, heads.head_dim, args.dtype)
    scenarios = DRY_SCENARIOS if args.dry_run else SCENARIOS
    scratch = GatherScratch()  # as TorchPagedBackend keeps one across layers and steps
    copy_bytes = (
        (1 << 30) if device.type == "cuda" else ((16 << 20) if args.dry_run else (256 << 20))
    )
    copy_bw = copy_bandwidth_gb_per_s(device, args.runs, copy_bytes)
    element_size = torch.empty((), dtype=getattr(torch, heads.dtype)).element_size()
    sweep_at = (
        {scenarios[-1].name, scenarios[0].name} if args.dry_run else {SWEEP_DECODE, SWEEP_PREFILL}
    )
    rows: list[Row] = []
    for sc in scenarios:
        q, k_cache, v_cache, meta = build_inputs(sc, heads, args.block_size, device, args.seed)
        scale = heads.head_dim**-0.5
        decode = max(sc.query_lens) == 1
        fns = {
            name: partial(f, q, k_cache, v_cache, meta, scale)
            for name, f in backends_for(sc, device, scratch).items()
        }
        if args.sweep and sc.name in sweep_at and "triton" in fns:
            kernel = decode_attention_triton if decode else paged_attention_triton
            for name, cfg in sweep_configs(q, heads.num_kv_heads, meta, decode).items():
                fns[name] = partial(kernel, q, k_cache, v_cache, meta, scale, config=cfg)
        fns["sdpa-dense"] = dense_sdpa(sc, q, k_cache, v_cache)
        if args.dry_run:  # two candidates of each sweep exercise the path
            fns = {k: v for i, (k, v) in enumerate(fns.items()) if "[" not in k or i < 5}
        truth = fns["torch"]()
        times, errors = {}, {}
        for name, fn in fns.items():
            try:
                if name != "sdpa-dense":  # dense SDPA's layout differs; it is the speed reference
                    errors[name] = round((fn().float() - truth.float()).abs().max().item(), 5)
                times[name] = time_ms(fn, device, args.runs, warmup=1 if args.dry_run else 2)
            except Exception as exc:  # a swept configuration that does not compile (resources)
                if "[" not in name:
                    raise
                print(
                    f"skip {sc.name} {name}: {type(exc).__name__}: {str(exc)[:120]}",
                    file=sys.stderr,
                )
        kv_bytes = 2 * sc.num_kv_tokens * heads.num_kv_heads * heads.head_dim * element_size
        for name, ms in times.items():
            read_bw = kv_bytes / (ms * 1e-3) / 1e9 if decode else None
            rows.append(
                Row(
                    scenario=sc.name,
                    backend=name,
                    median_ms=round(ms, 4),
                    tokens_per_s=round(sc.num_new_tokens / (ms * 1e-3), 1),
                    vs_dense=round(times["sdpa-dense"] / ms, 3),
                    kv_read_gb_per_s=None if read_bw is None else round(read_bw, 2),
                    copy_bw_fraction=None if read_bw is None else round(read_bw / copy_bw, 3),
                    max_err_vs_torch=errors.get(name),
                )
            )
        del q, k_cache, v_cache, meta
    return {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "dry_run": args.dry_run,
        "interpreter": INTERPRET,
        "threads": torch.get_num_threads() if device.type == "cpu" else None,
        "heads": asdict(heads),
        "block_size": args.block_size,
        "runs": args.runs,
        "copy_bandwidth_gb_per_s": round(copy_bw, 2),
        "torch": torch.__version__,
        "rows": [asdict(r) for r in rows],
        "summary": summarize(rows),
    }


def summarize(rows: list[Row]) -> dict[str, Any]:
    """Per scenario, the default kernels' figures and the best swept one: for decode the fraction
    of copy bandwidth, for prefill the speed against dense SDPA."""
    out: dict[str, Any] = {}
    for sc in dict.fromkeys(r.scenario for r in rows):
        mine = [r for r in rows if r.scenario == sc and r.backend.startswith("triton")]
        if not mine:
            continue
        decode = mine[0].copy_bw_fraction is not None
        metric = "copy_bw_fraction" if decode else "vs_dense"
        best = max(mine, key=lambda r: getattr(r, metric))
        out[sc] = {
            "metric": metric,
            **{r.backend: getattr(r, metric) for r in mine if "[" not in r.backend},
            "best": best.backend,
            "best_value": getattr(best, metric),
        }
    return out


def format_table(result: dict) -> str:
    head = f"{'scenario':<20}{'backend':<30}{'ms':>10}{'tok/s':>14}{'vs dense':>10}{'KV GB/s':>10}{'of copy':>9}{'err':>9}"
    lines = [
        f"device={result['device']} heads={result['heads']} block={result['block_size']} "
        f"copy={result['copy_bandwidth_gb_per_s']} GB/s"
        + (" (dry run: tiny shapes, Triton interpreted)" if result["dry_run"] else ""),
        head,
    ]
    fmt = lambda x, spec: "-" if x is None else format(x, spec)
    for r in result["rows"]:
        lines.append(
            f"{r['scenario']:<20}{r['backend']:<30}{r['median_ms']:>10.3f}{r['tokens_per_s']:>14,.0f}"
            f"{fmt(r['vs_dense'], '.2f'):>10}{fmt(r['kv_read_gb_per_s'], '.1f'):>10}"
            f"{fmt(r['copy_bw_fraction'], '.0%'):>9}{fmt(r['max_err_vs_torch'], '.0e'):>9}"
        )
    lines.append("summary (decode: fraction of copy bandwidth; prefill: x dense SDPA):")
    for sc, entry in result["summary"].items():
        figures = ", ".join(
            f"{k} {v}" for k, v in entry.items() if k not in ("metric", "best", "best_value")
        )
        lines.append(f"  {sc}: {figures}; best {entry['best']} {entry['best_value']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto", help="auto | cpu | cuda")
    parser.add_argument(
        "--threads", type=int, default=1, help="CPU threads (torch.set_num_threads)"
    )
    parser.add_argument("--runs", type=int, default=7, help="timed calls per point (median; >= 5)")
    parser.add_argument("--block-size", type=int, default=16)
    parser.add_argument("--dtype", default=None, help="override the head config's dtype")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None, help="also write the result here")
    parser.add_argument("--sweep", action="store_true", help="also time other launch configs")
    parser.add_argument(
        "--dry-run", action="store_true", help="tiny shapes on CPU, Triton under the interpreter"
    )
    args = parser.parse_args(argv)
    if args.dry_run and args.runs == parser.get_default("runs"):
        args.runs = 2
    if args.runs < 5 and not args.dry_run:
        parser.error("--runs must be >= 5")
    result = run(args)
    print(format_table(result))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
