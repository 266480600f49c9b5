"""The printed summary block: vLLM's `Serving Benchmark Result` layout plus the prefix-cache
figures, with `(virtual)` units on a simulated run's clock."""

from __future__ import annotations

from collections.abc import Mapping

_ROWS: tuple[tuple[str, str], ...] = (  # (label, summary key), as vLLM prints them
    ("Successful requests:", "completed"),
    ("Failed requests:", "failed"),
    ("Benchmark duration (s):", "duration"),
    ("Total input tokens:", "total_input_tokens"),
    ("Total generated tokens:", "total_output_tokens"),
    ("Request throughput (req/s):", "request_throughput"),
    ("Request goodput (req/s):", "request_goodput"),
    ("Output token throughput (tok/s):", "output_throughput"),
    ("Peak output token throughput (tok/s):", "max_output_tokens_per_s"),
    ("Peak concurrent requests:", "max_concurrent_requests"),
    ("Peak overlapping requests (exact):", "max_overlapping_requests"),
    ("Total Token throughput (tok/s):", "total_token_throughput"),
)
# summary["clock"]: what `duration` and every latency are measured on.
CLOCKS = {"wall": "wall clock", "virtual": "virtual clock (simulated executor)"}


def format_summary(summary: Mapping[str, object]) -> str:
    """A vLLM-style printed block, plus the prefix-cache figures; absent values print as n/a."""
    virtual = summary.get("clock") == "virtual"
    title = (
        " Serving Benchmark Result (virtual clock) " if virtual else " Serving Benchmark Result "
    )
    lines = [f"{title:=^50}"]
    if virtual:  # a simulated run's seconds are the cost model's, not the time it took
        lines.append(_line("Clock:", f"virtual, hardware {summary.get('hardware') or 'n/a'}"))
    # Goodput is printed only when SLOs were given, as vLLM does.
    lines += [
        _line(_virtual(label) if virtual else label, summary.get(key))
        for label, key in _ROWS
        if key != "request_goodput" or summary.get(key) is not None
    ]
    if summary.get("failed"):  # a partial share of failures is part of the result, said here
        share = summary.get("failed_share")
        lines.insert(4 if virtual else 3, _line("Failed share (%):", _percent(share)))
    sections = (
        ("Time to First Token", "TTFT", "ttft_ms"),
        ("Time per Output Token (excl. 1st token)", "TPOT", "tpot_ms"),
        ("Inter-token Latency", "ITL", "itl_ms"),
        ("End-to-end Latency", "E2EL", "e2el_ms"),
    )
    for heading, short, key in sections:
        lines.append(f"{heading + (' (virtual)' if virtual else ''):-^50}")
        unit = "(ms, virtual):" if virtual else "(ms):"
        for stat, label in (("mean", "Mean"), ("median", "Median"), ("p99", "P99")):
            lines.append(_line(f"{label} {short} {unit}", summary.get(f"{stat}_{key}")))
    lines.append(f"{'Prefix Cache':-^50}")
    lines.append(_line("Prefix cache hit rate (%):", _percent(summary.get("hit_rate"))))
    lines.append(_line("Ideal hit rate (%):", _percent(summary.get("ideal_hit_rate"))))
    # At the engine's own block/page size above; at page 1 here, the same for every engine.
    lines.append(
        _line("Ideal hit rate, page 1 (%):", _percent(summary.get("ideal_hit_rate_token")))
    )
    lines.append(_line("Cached prompt tokens:", summary.get("prompt_tokens_cached")))
    lines.append(_line("Cache bookkeeping (ms):", summary.get("cache_bookkeeping_ms")))
    lines.append(_line("Evictions:", summary.get("evictions")))
    lines.append(_line("Preemptions:", summary.get("num_preemptions")))
    lines.append(_line("Recomputed tokens:", summary.get("recomputed_tokens")))
    lines += fleet_lines(summary)
    lines.append("=" * 50)
    return "\n".join(lines)


def fleet_lines(summary: Mapping[str, object]) -> list[str]:
    """A fleet run's routing: the router, the bound, the imbalance, and per replica its requests,
    hit rate and load (its share of the prompt tokens sent); none for a single engine."""
    per = summary.get("fleet_per_replica")
    if not isinstance(per, list) or not per:
        return []
    lines = [f"{'Fleet':-^50}"]
    lines.append(_line("Router:", f"{summary.get('fleet_router')} ({len(per)} replicas)"))
    lines.append(_line("Fleet hit rate (%):", _percent(summary.get("fleet_hit_rate"))))
    lines.append(_line("Bound, any router (%):", _percent(summary.get("fleet_bound_hit_rate"))))
    lines.append(_line("Imbalance (max/mean requests):", summary.get("fleet_load_imbalance")))
    lines.append(_line("Imbalance (max/mean tokens):", summary.get("fleet_token_imbalance")))
    sent = sum(int(p.get("prompt_tokens", 0)) for p in per) or 1
    lines.append(f"{'replica':>7} {'requests':>9} {'hit rate (%)':>13} {'load (%)':>9}")
    for p in per:
        hit = _percent(p.get("hit_rate"))
        lines.append(
            f"{p.get('replica'):>7} {p.get('requests'):>9} "
            f"{'n/a' if hit is None else f'{hit:.2f}':>13} "
            f"{100.0 * int(p.get('prompt_tokens', 0)) / sent:>9.2f}"
        )
    return lines


def _virtual(label: str) -> str:
    """`Benchmark duration (s, virtual):`: units of time on a simulated run's clock."""
    for unit in ("(s)", "(req/s)", "(tok/s)"):
        if unit in label:
            return label.replace(unit, f"{unit[:-1]}, virtual)")
    return label


def _percent(fraction: object) -> float | None:
    return 100.0 * fraction if isinstance(fraction, (int, float)) else None


def _line(label: str, value: object) -> str:
    if value is None:
        text = "n/a"
    elif isinstance(value, float):
        text = f"{value:.2f}"
    else:
        text = str(value)
    return f"{label:<40} {text:<10}".rstrip()
