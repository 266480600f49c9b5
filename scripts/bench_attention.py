"""Micro-benchmark of the paged-attention backends: prefill (512, 2048 tokens) and decode (batch 1
and 16 at KV length 2048), median of --runs timed calls after warm-up, as a table and as JSON.

GPU: triton and torch paged vs torch SDPA on dense tensors; decode also reports the KV bytes read
per second as a fraction of the device's measured copy bandwidth. CPU: the torch path (and dense
SDPA) with --threads threads (1 by default, so figures are comparable across machines).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engines.attention.metadata import AttentionMetadata  # noqa: E402
from engines.attention.torch_paged import GatherScratch, paged_attention_torch  # noqa: E402
from engines.attention.triton_paged import HAS_TRITON, paged_attention_triton  # noqa: E402


@dataclass(frozen=True)
class HeadConfig:
    num_heads: int
    num_kv_heads: int
    head_dim: int
    dtype: str


GPU_HEADS = HeadConfig(32, 8, 128, "bfloat16")  # Llama-3-8B-like
CPU_HEADS = HeadConfig(9, 3, 64, "float32")  # SmolLM2-135M, what the CPU engine runs


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
)


@dataclass(frozen=True)
class Row:
    scenario: str
    backend: str
    median_ms: float
    tokens_per_s: float
    vs_dense: float | None  # dense SDPA time / this backend's time (>1: faster than dense)
    kv_read_gb_per_s: float | None  # decode only: K and V bytes read per second
    copy_bw_fraction: float | None  # decode only: of the measured device copy bandwidth


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


def copy_bandwidth_gb_per_s(device: torch.device, runs: int) -> float:
    """Read + write bytes per second of one large device-to-device copy."""
    num_bytes = (1 << 30) if device.type == "cuda" else (256 << 20)
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


def run(args: argparse.Namespace) -> dict:
    device = torch.device(
        args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    )
    if device.type == "cpu":
        torch.set_num_threads(args.threads)
    heads = GPU_HEADS if device.type == "cuda" else CPU_HEADS
    if args.dtype:
        heads = HeadConfig(heads.num_heads, heads.num_kv_heads, heads.head_dim, args.dtype)
    scratch = GatherScratch()  # as TorchPagedBackend keeps one across layers and steps
    paged: dict[str, Callable[..., Any]] = {
        "torch": partial(paged_attention_torch, scratch=scratch)
    }
    if device.type == "cuda" and HAS_TRITON:  # interpreted Triton on CPU is for tests only
        paged = {"triton": paged_attention_triton, **paged}
    copy_bw = copy_bandwidth_gb_per_s(device, args.runs)
    element_size = torch.empty((), dtype=getattr(torch, heads.dtype)).element_size()
    rows: list[Row] = []
    for sc in SCENARIOS:
        q, k_cache, v_cache, meta = build_inputs(sc, heads, args.block_size, device, args.seed)
        scale = heads.head_dim**-0.5
        fns = {name: partial(f, q, k_cache, v_cache, meta, scale) for name, f in paged.items()}
        fns["sdpa-dense"] = dense_sdpa(sc, q, k_cache, v_cache)
        times = {name: time_ms(fn, device, args.runs) for name, fn in fns.items()}
        decode = max(sc.query_lens) == 1
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
                )
            )
        del q, k_cache, v_cache, meta
    return {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "threads": torch.get_num_threads() if device.type == "cpu" else None,
        "heads": asdict(heads),
        "block_size": args.block_size,
        "runs": args.runs,
        "copy_bandwidth_gb_per_s": round(copy_bw, 2),
        "torch": torch.__version__,
        "rows": [asdict(r) for r in rows],
    }


def format_table(result: dict) -> str:
    head = f"{'scenario':<20}{'backend':<12}{'ms':>10}{'tok/s':>14}{'vs dense':>10}{'KV GB/s':>10}{'of copy':>9}"
    lines = [
        f"device={result['device']} heads={result['heads']} block={result['block_size']} "
        f"copy={result['copy_bandwidth_gb_per_s']} GB/s",
        head,
    ]
    fmt = lambda x, spec: "-" if x is None else format(x, spec)
    for r in result["rows"]:
        lines.append(
            f"{r['scenario']:<20}{r['backend']:<12}{r['median_ms']:>10.3f}{r['tokens_per_s']:>14,.0f}"
            f"{fmt(r['vs_dense'], '.2f'):>10}{fmt(r['kv_read_gb_per_s'], '.1f'):>10}"
            f"{fmt(r['copy_bw_fraction'], '.0%'):>9}"
        )
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
    args = parser.parse_args(argv)
    if args.runs < 5:
        parser.error("--runs must be >= 5")
    result = run(args)
    print(format_table(result))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
