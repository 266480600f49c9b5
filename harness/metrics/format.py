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
    tiers = ("prompt_tokens_cached_host", "prompt_tokens_cached_storage")
    if any(summary.get(k) for k in tiers):  # a host tier supplied some (docs/tiers.md)
        lines.append(_line("Device tier hit rate (%):", _percent(summary.get("device_hit_rate"))))
        lines.append(_line("Host tier hit rate (%):", _percent(summary.get("host_hit_rate"))))
        if summary.get("prompt_tokens_cached_storage"):  # a storage tier behind it
            lines.append(
                _line("Storage tier hit rate (%):", _percent(summary.get("storage_hit_rate")))
            )
        belady = summary.get("belady_hit_rate_device_host")
        if belady is not None:  # one cache of both tiers' tokens (docs/tiers.md §8)
            lines.append(_line("Belady, device + host (%):", _percent(belady)))
        link = summary.get("host_link")
        if isinstance(link, dict) and link.get("bandwidth_bytes_per_s"):  # priced (§7)
            lines.append(_line("Host loads (GB):", round(link["load_bytes"] / 1e9, 2)))
            lines.append(_line("Host load stall (s):", round(link["load_stall_s"], 3)))
    lines.append(_line("Cache bookkeeping (ms):", summary.get("cache_bookkeeping_ms")))
    if "server_flavour" in summary:  # a live server: its counters and the twin's, apart
        lines += _server_lines(summary)
    else:
        lines.append(_line("Evictions:", summary.get("evictions")))
        lines.append(_line("Preemptions:", summary.get("num_preemptions")))
        lines.append(_line("Recomputed tokens:", summary.get("recomputed_tokens")))
    lines += fleet_lines(summary)
    lines.append("=" * 50)
    return "\n".join(lines)


# summary["twin_timeline"] -> how the twin placed the requests, and why that timeline
TIMELINES = {
    "step_locked": "step-locked (the server published its KV events)",
    "one_at_a_time": "one at a time (each request sent once the last returned)",
    "predicted": "predicted (no KV events: {kv_events})",
}


def _server_lines(summary: Mapping[str, object]) -> list[str]:
    """The server's own preemption counter beside the twin's, the twin's evictions (a server
    does not report its own), what the twin predicted and how much of it was exact."""
    if summary.get("twin_timeline") is None:
        return [_line("Preemptions (server delta):", summary.get("server_preemptions_delta"))]
    server, twin = summary.get("server_preemptions_delta"), summary.get("twin_preemptions")
    timeline = TIMELINES.get(str(summary["twin_timeline"]), str(summary["twin_timeline"]))
    return [
        _line("Preemptions (server delta / twin):", f"{_or_na(server)} / {_or_na(twin)}"),
        _line("Evictions (twin):", summary.get("twin_evictions")),
        f"{'Twin (built-in engine stepped beside it)':-^50}",
        _twin_prediction(summary),
        _line("Timeline:", timeline.format(kv_events=summary.get("kv_events") or "n/a")),
    ]


def _twin_prediction(summary: Mapping[str, object]) -> str:
    """`predicted 14,720 of 14,720 cached tokens; 48/48 requests exact; KV steps 41/41`."""
    parts = [
        f"predicted {_count(summary.get('twin_predicted_tokens'))} of "
        f"{_count(summary.get('reported_cached_tokens_sum'))} cached tokens"
    ]
    if summary.get("twin_compared_with") == "counter_delta":
        agree = summary.get("twin_matches_counter")
        parts.append("n > 1: against the counter only, " + ("equal" if agree else "not equal"))
    else:
        parts.append(
            f"{_or_na(summary.get('twin_matches'))}/{_or_na(summary.get('twin_requests'))} "
            "requests exact"
        )
    if summary.get("twin_tier_requests") is not None:  # a host tier (docs/tiers.md §4.2)
        parts.append(
            f"host tier {_count(summary.get('twin_predicted_host_tokens'))} of "
            f"{_count(summary.get('twin_served_host_tokens'))} tokens, "
            f"{_or_na(summary.get('twin_tier_matches'))}/{summary['twin_tier_requests']} "
            "requests exact per tier"
        )
    if summary.get("twin_kv_server_steps") is not None:
        parts.append(
            f"KV steps {_or_na(summary.get('twin_kv_steps_equal'))}/"
            f"{summary['twin_kv_server_steps']}"
        )
    return "; ".join(parts)


def _count(value: object) -> str:
    return f"{value:,}" if isinstance(value, int) else "n/a"


def _or_na(value: object) -> str:
    return "n/a" if value is None else str(value)


def fleet_lines(summary: Mapping[str, object]) -> list[str]:
    """A fleet run's routing: the router, the bound, the imbalance, and per replica its requests,
    hit rate and load (its share of the prompt tokens sent); none for a single engine."""
    per = summary.get("fleet_per_replica")
    if not isinstance(per, list) or not per:
        return []
    lines = [f"{'Fleet':-^50}"]
    real = summary.get("fleet_real")  # a real router (harness/routers/target.py)
    router = f"{real} {summary.get('fleet_router')}" if real else summary.get("fleet_router")
    lines.append(_line("Router:", f"{router} ({len(per)} replicas)"))
    twin = summary.get("fleet_twin")
    if isinstance(twin, Mapping):
        said = f"{twin.get('predicted')}/{twin.get('scored')}"
        lines.append(_line("Twin predicted (decisions):", said))
        lines.append(_line("Router's first pick (unscored):", f"w{twin.get('first_pick')}"))
    lines.append(_line("Fleet hit rate (%):", _percent(summary.get("fleet_hit_rate"))))
    lines.append(_line("Bound, any router (%):", _percent(summary.get("fleet_bound_hit_rate"))))
    lines.append(_line("Imbalance (max/mean requests):", summary.get("fleet_load_imbalance")))
    lines.append(_line("Imbalance (max/mean tokens):", summary.get("fleet_token_imbalance")))
    sent = sum(int(p.get("prompt_tokens", 0)) for p in per) or 1
    lines += _share_rows("replica", per, sent)
    by_design = summary.get("fleet_per_design")  # a mixed fleet (fleet.designs)
    if isinstance(by_design, list) and by_design:
        lines += _share_rows("design", by_design, sent)
    return lines


def _share_rows(key: str, rows: list, sent: int) -> list[str]:
    """A header and one line per row: its name (`key`), requests, hit rate and load (its share
    of the prompt tokens sent); a replica of a mixed fleet names its design after them."""
    out = [f"{key:>7} {'requests':>9} {'hit rate (%)':>13} {'load (%)':>9}"]
    for p in rows:
        hit = _percent(p.get("hit_rate"))
        design = f" {p['design']}" if key == "replica" and "design" in p else ""
        out.append(
            f"{p.get(key):>7} {p.get('requests'):>9} "
            f"{'n/a' if hit is None else f'{hit:.2f}':>13} "
            f"{100.0 * int(p.get('prompt_tokens', 0)) / sent:>9.2f}{design}"
        )
    return out


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


def counted(n: int, noun: str) -> str:
    """'1 seed', '3 seeds': a count with its noun in the right number (regular plurals only)."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"
