"""BR0.2 `results`: aggregate latency and throughput with the schema's percentiles (from the
per-request table), sessions, and the prefix cache. The schema's own cache field
(`cache_hit_rate` of a component's resource metrics) takes the run's token hit rate; what it has
no field for (the ideal and capped bounds, granularity loss, evictions, the twin's agreement, a
fleet's per-replica split) goes under `results.observability.prefix_cache`, the extra key the
schema's observability section allows."""

from __future__ import annotations

from harness.export.br02_stack import ENGINE_LABEL
from harness.export.run_view import RunView
from harness.export.stats import statistics, total

# Summary fields copied as they are into prefix_cache (absent ones are left out).
CACHE_FIELDS = (
    "hit_rate",
    "prompt_tokens_cached",
    "total_input_tokens",
    "ideal_hit_rate",
    "ideal_hit_rate_token",
    "theoretical_hit_rate_capped",
    "belady_hit_rate",
    "theoretical_hit_rate_by_granularity",
    "bounds_skipped",
    "evictions",
    "evicted_tokens",
    "recomputed_tokens",
    "num_preemptions",
    "engine_hits",
    "engine_queries",
)
TWIN_FIELDS = (
    "predicted_hit_rate",
    "twin_requests",
    "twin_matches",
    "twin_predicted_tokens",
    "twin_mean_abs_diff_tokens",
    "twin_matches_counter",
    "twin_compared_with",
    "twin_kv_events_identical",
    "twin_timeline",
    "server_hits_delta",
    "server_queries_delta",
    "reported_cached_tokens_sum",
    "counters_agree",
)
FLEET_FIELDS = (
    "fleet_router",
    "fleet_replicas",
    "fleet_hit_rate",
    "fleet_load_imbalance",
    "fleet_token_imbalance",
    "fleet_per_replica",
)


def _dropped_none(obj: dict) -> dict:
    return {k: v for k, v in obj.items() if v is not None}


def aggregate(run: RunView) -> dict[str, object]:
    s, r, col = run.summary, run.requests, run.column
    outputs = col("output_tokens")
    ntpot = col("e2el_ms") / outputs.where(outputs > 0)
    itl = {name: s.get(f"{name}_itl_ms") for name in ("mean", "p50", "p90", "p95", "p99", "max")}
    itl_stats = None
    if itl["mean"] is not None:  # per-token gaps are not stored per request: the summary's
        itl_stats = _dropped_none({"units": "ms/token", "stddev": s.get("std_itl_ms"), **itl})
    return {
        "requests": _dropped_none(
            {
                "total": len(r),
                "failures": int(s.get("failed") or 0),
                "input_length": statistics(r["prompt_tokens"], "count"),
                "output_length": statistics(outputs, "count"),
            }
        ),
        "latency": _dropped_none(
            {
                "time_to_first_token": statistics(col("ttft_ms"), "ms"),
                "normalized_time_per_output_token": statistics(ntpot, "ms/token"),
                "time_per_output_token": statistics(col("tpot_ms"), "ms/token"),
                "inter_token_latency": itl_stats,
                "request_latency": statistics(col("e2el_ms"), "ms"),
            }
        ),
        "throughput": _dropped_none(
            {
                "input_token_rate": total(s.get("input_throughput"), "tokens/s"),
                "output_token_rate": total(s.get("output_throughput"), "tokens/s"),
                "total_token_rate": total(s.get("total_token_throughput"), "tokens/s"),
                "request_rate": total(s.get("request_throughput"), "queries/s"),
            }
        ),
    }


def sessions(run: RunView) -> dict[str, object] | None:
    requests = run.requests.assign(output_tokens=run.column("output_tokens"))
    if "session_id" not in requests or requests["session_id"].isna().all():
        return None
    grouped = requests.dropna(subset=["session_id"]).groupby("session_id")
    per_session = grouped.size()
    return {
        "sessions": _dropped_none(
            {
                "total": len(per_session),
                "total_events": int(per_session.sum()),
                "events_per_session": statistics(per_session.tolist(), "count"),
                "input_tokens_per_session": statistics(grouped["prompt_tokens"].sum(), "count"),
                "output_tokens_per_session": statistics(grouped["output_tokens"].sum(), "count"),
            }
        )
    }


def granularity_loss(summary: dict, block: object) -> float | None:
    """Token-granularity ideal minus the ideal at the engine's block size: what caching whole
    blocks only costs on this workload (0 for radix at page size 1)."""
    by_g = summary.get("theoretical_hit_rate_by_granularity") or {}
    fine, coarse = by_g.get("1"), by_g.get(str(block))
    return None if fine is None or coarse is None else float(fine) - float(coarse)


def prefix_cache(run: RunView) -> dict[str, object]:
    s = run.summary
    out: dict[str, object] = {k: s[k] for k in CACHE_FIELDS if k in s}
    out["cached_tokens_sum"] = int(run.requests["cached_tokens"].sum())
    block = s.get("block_size_or_page_size") or run.group("engine").get("block_size")
    out["granularity_loss"] = granularity_loss(s, block)
    out["by_tier"] = {k: v for k, v in s.items() if "tier" in k}
    if run.kind == "server":
        out["twin"] = {k: s[k] for k in TWIN_FIELDS if k in s}
    if run.kind == "fleet":
        out["fleet"] = {k: s[k] for k in FLEET_FIELDS if k in s}
    return out


def observability(run: RunView) -> dict[str, object]:
    s = run.summary
    engine = _dropped_none(
        {
            "cache_hit_rate": total(s.get("hit_rate"), "fraction"),
            "preemptions": total(s.get("num_preemptions"), "count"),
        }
    )
    components: list[dict[str, object]] = [{"component_label": ENGINE_LABEL, "aggregate": engine}]
    for replica in s.get("fleet_per_replica") or []:
        hit = total(replica.get("hit_rate"), "fraction")
        components.append(
            {
                "component_label": ENGINE_LABEL,
                "replica_id": str(replica.get("replica")),
                "aggregate": {"cache_hit_rate": hit} if hit else {},
            }
        )
    return {"components": components, "prefix_cache": prefix_cache(run)}


def results(run: RunView) -> dict[str, object]:
    return _dropped_none(
        {
            "request_performance": {"aggregate": aggregate(run)},
            "session_performance": sessions(run),
            "observability": observability(run),
        }
    )
