"""Tidy tables for the report: one row per run with its arm, and the per-arm summary and overhead.

`tidy_runs` adds the columns every figure groups by (workload, engine, arm, capacity, ...), taken
from the resolved config first and from summary.json otherwise, so a failed run that never wrote a
summary body still lands in the right row of summary.csv. Arms follow docs/benchmarking.md §1:

    <design>[-<scheduler>][-off][-<policy>][-<granule><size>]  (or the run's label)

e.g. `apc-off`, `radix-lpm`, `radix-p16`, `apc-b32`: the design (engines/cache/__init__.py
`DESIGNS`), the scheduler when it is not the design's upstream one, then what differs from the
design's preset (caching off, a policy other than fcfs, another block or page size).
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from engines.cache import designs
from engines.config import UPSTREAM_SCHEDULER
from harness.report.stats import mean_ci, ratio_ci

# each design's preset granularity (its upstream default) and what one granule is called
DEFAULT_GRANULARITY = {d.name: d.block_size for d in designs()}
UNITS = {d.name: d.unit for d in designs()}

# Columns of summary.csv, averaged over the ok runs of a group.
MEAN_COLUMNS = (
    "median_ttft_ms",
    "p99_ttft_ms",
    "mean_ttft_ms",
    "mean_tpot_ms",
    "request_throughput",
    "output_throughput",
    "total_token_throughput",
    "hit_rate",
    "ideal_hit_rate",
    "theoretical_hit_rate_capped",
    "belady_hit_rate",
    "cache_bookkeeping_ms",
    "bookkeeping_share",
    "evictions",
    "duration",
)
# summary.csv has one row per configuration: runs are grouped by the fingerprint of their resolved
# config (harness.results.identity) and the platform, never across configurations (a load sweep gives one
# row per rate). The other columns describe the group; `varies` names the config keys that differ
# between the configurations of one sweep, whose values get columns of their own.
KEY_COLUMNS = ("fingerprint", "model", "executor", "hardware")
# the scheduler level of a run with engine.overlap on: `sglang-overlap`
OVERLAP = "-overlap"
GROUP_COLUMNS = (
    "workload",
    "arm",
    "engine",
    "cache_enabled",
    "policy",
    "granularity",
    "kv_capacity_tokens",
    "model",
    "executor",
    "hardware",
)
# Varying config keys that summary.csv already shows in a column of its own (GROUP_COLUMNS).
SHOWN_KEYS = (
    "engine.cache",
    "engine.prefix_caching",
    "engine.policy",
    "engine.block_size",
    "engine.kv_capacity_tokens",
    "workload.name",
    "executor",
)
# Config keys never listed as varying: the seed varies inside a group; the rest are shown as arm.
NOT_VARYING = (
    "config.seed",
    "config.label",
    "config.save_tokens",
    "config.overwrite",
    # where a server listened and its launcher's nonce: not what was measured (server_identity)
    "config.server.url",
    "config.server.expect_nonce",
)
# the "-<nonce>" a launcher appends to the served model name (8 hex digits, launch.py)
_NONCE = re.compile(r"-[0-9a-f]{8}$")
# Pairs of the overhead arm: same everything but cache_enabled, matched on seed.
PAIR_COLUMNS = (
    "workload",
    "engine",
    "policy",
    "granularity",
    "kv_capacity_tokens",
    "model",
    "executor",
)
OVERHEAD_METRICS = ("total_token_throughput", "mean_ttft_ms", "p99_ttft_ms", "mean_tpot_ms")


def _coalesce(runs: pd.DataFrame, *names: str) -> pd.Series:
    """First non-null value over the named columns (absent columns are skipped)."""
    out = pd.Series([None] * len(runs), index=runs.index, dtype=object)
    for name in names:
        if name in runs.columns:
            out = out.where(out.notna(), runs[name].astype(object))
    return out


def tidy_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """`runs` from load_runs plus the grouping columns, `ok` and `bookkeeping_share`."""
    if runs.empty:
        return runs.assign(
            **{
                c: pd.Series(dtype=object)
                for c in (*GROUP_COLUMNS, "ok", "fingerprint", "varies", "series")
            }
        )
    df = runs.copy()
    df["workload"] = _coalesce(df, "workload", "config.workload.name").fillna("unknown")
    df["engine"] = _coalesce(df, "config.engine.cache", "backend").fillna("unknown")
    if "server_flavour" in df:  # a live server is its own arm ("vllm-server"); engine is its twin
        served = df["server_flavour"].notna()
        df.loc[served, "engine"] = df.loc[served, "server_flavour"].astype(str) + "-server"
    if "config.fleet.workers" in df:  # a real router's vLLM workers: vLLM's arm, not the twin's
        df.loc[df["config.fleet.workers"] == "vllm", "engine"] = "vllm-server"
    upstream = df["engine"].map(UPSTREAM_SCHEDULER)
    df["scheduler"] = _coalesce(df, "config.engine.scheduler", "policy_profile.scheduler").fillna(
        upstream
    )
    # SGLang's overlap loop is a level of the scheduler axis of its own (`sglang-overlap`). The
    # knob is on by default for every engine but only SGLang's scheduler reads it.
    overlap = _coalesce(df, "config.engine.overlap", "policy_profile.overlap").fillna(False)
    overlap = overlap.astype(bool) & (df["scheduler"] == "sglang")
    df["scheduler"] = df["scheduler"].where(~overlap, df["scheduler"].astype(str) + OVERLAP)
    df["cache_enabled"] = (
        _coalesce(df, "config.engine.prefix_caching", "cache_enabled").fillna(True).astype(bool)
    )
    df["policy"] = _coalesce(df, "config.engine.policy", "policy_profile.schedule_policy").fillna(
        "fcfs"
    )
    df["granularity"] = pd.to_numeric(
        _coalesce(df, "config.engine.block_size", "block_size_or_page_size")
    )
    df["kv_capacity_tokens"] = pd.to_numeric(
        _coalesce(df, "kv_capacity_tokens", "config.engine.kv_capacity_tokens")
    )
    df["model"] = _coalesce(df, "config.model.name", "model_id").fillna("unknown")
    if "server_flavour" in df:  # a live server's own identity, not its twin's or its address
        served = df["server_flavour"].notna()
        df.loc[served, "model"] = _served_model(df[served])
        df.loc[served, "granularity"] = pd.to_numeric(df.loc[served, "block_size_or_page_size"])
        df["server"] = (
            df["server_flavour"].astype(str) + " " + _coalesce(df, "server_version").astype(str)
        ).where(served)
    df["executor"] = _coalesce(df, "config.executor", "executor").fillna("real")
    df["seed"] = pd.to_numeric(_coalesce(df, "seed", "config.seed"))
    df["hardware"] = _coalesce(df, "config.hardware.name")
    df["sweep"] = df["run_dir"].map(lambda d: str(d).rpartition("/")[0]) if "run_dir" in df else ""
    labels = _coalesce(df, "config.label", "label")
    df["arm"] = [
        lab if isinstance(lab, str) and lab else _arm(r)
        for lab, (_, r) in zip(labels, df.iterrows())
    ]
    df["status"] = _coalesce(df, "status").fillna("unknown")
    df["ok"] = df["status"] == "ok"
    duration_ms = pd.to_numeric(_coalesce(df, "duration"), errors="coerce") * 1e3
    bookkeeping = pd.to_numeric(_coalesce(df, "cache_bookkeeping_ms"), errors="coerce")
    df["per_step_bookkeeping"] = _per_step_bookkeeping(df)
    df["bookkeeping_share"] = (bookkeeping / duration_ms.where(duration_ms > 0)).where(
        df["per_step_bookkeeping"]
    )
    df["fingerprint"] = _coalesce(df, "fingerprint").fillna("unknown")
    df["varies"] = _varying_keys(df)
    df["series"] = _series(df)
    return df


def _served_model(served: pd.DataFrame) -> pd.Series:
    """The platform model of a server run: the preset its served model was made from
    (`server.model_preset`, e.g. smollm2-rand), which built-in runs of `model=smollm2-rand` are on
    too; else the served name without the launcher's nonce (`llama-rand-smollm2-50914c48` ->
    `llama-rand-smollm2`). Either way two starts of one server are one platform."""
    nonces = _coalesce(served, "config.server.expect_nonce")
    presets = _coalesce(served, "config.server.model_preset")
    return pd.Series(
        [
            preset
            if isinstance(preset, str) and preset
            else name.removesuffix(f"-{nonce}")
            if isinstance(nonce, str) and nonce
            else _NONCE.sub("", name)
            for name, nonce, preset in zip(served["model_id"].astype(str), nonces, presets)
        ],
        index=served.index,
        dtype=object,
    )


def _per_step_bookkeeping(df: pd.DataFrame) -> pd.Series:
    """False for simulated runs whose decode stretches ran as macro-steps: their bookkeeping is a
    bulk replay, not the per-step work an engine does (docs/design.md §5). Runs recorded before
    `engine.decode_runs` existed stepped one by one."""
    runs_on = _coalesce(df, "config.engine.decode_runs").fillna(False).astype(bool)
    host_charged = _coalesce(df, "config.hardware.charge_host_time").fillna(False).astype(bool)
    return ~((df["executor"] == "simulated") & runs_on & ~host_charged)


def _varying_keys(df: pd.DataFrame) -> pd.Series:
    """Per run, the config keys whose values differ between the configurations of its sweep."""
    config = [c for c in df.columns if c.startswith("config.") and c not in NOT_VARYING]
    out = pd.Series("", index=df.index, dtype=object)
    for _, group in df.groupby("sweep", dropna=False, sort=False):
        keys = [c for c in config if group[c].dropna().astype(str).nunique() > 1]
        out[group.index] = ", ".join(k.removeprefix("config.") for k in keys)
    return out


# Varying keys a series name need not repeat: the arm names the cache, scheduler, caching, policy
# and granularity; the x axis the workload; the figure the platform; capacity and load sweeps
# have figures of their own.
IN_ARM_OR_AXIS = (
    "engine.cache",
    "engine.scheduler",
    "engine.prefix_caching",
    "engine.policy",
    "engine.block_size",
    "engine.kv_capacity_tokens",
    "workload.name",
    "executor",
)
# and the groups the platform or a server arm's label says: a server run's `server.*` (its
# flavour, block size, capacity) is in its legend entry, and blank on a built-in run beside it
NOT_IN_SERIES = (*IN_ARM_OR_AXIS, "hardware.", "model.", "server.")


def _series(df: pd.DataFrame) -> pd.Series:
    """The arm, plus the values of the config keys that differ between runs of one workload in
    one sweep and that the arm does not already say: `apc load.rate=8`, `apc
    workload.max_requests=200`. One series is one configuration within a figure, so a bar or a
    line never averages runs of two configurations."""
    config = [c for c in df.columns if c.startswith("config.") and c not in NOT_VARYING]
    out = pd.Series("", index=df.index, dtype=object)
    for _, group in df.groupby(["sweep", "workload"], dropna=False, sort=False):
        keys = [
            c.removeprefix("config.")
            for c in config
            if group[c].dropna().map(str).nunique() > 1  # a failed run's missing keys: no value
            and not c.removeprefix("config.").startswith(NOT_IN_SERIES)
        ]
        for i, row in group.iterrows():
            out[i] = " ".join(
                [str(row["arm"]), *(f"{k}={_plain(row.get(f'config.{k}'))}" for k in keys)]
            )
    return out


def _plain(value: object) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _arm(row: pd.Series) -> str:
    if str(row["engine"]).endswith("-server"):
        return str(row["engine"])  # the server ships its own design; `engine=` names only its twin
    parts = [str(row["engine"])]
    scheduler = row["scheduler"]
    overlap = isinstance(scheduler, str) and scheduler.endswith(OVERLAP)
    if overlap:
        scheduler = scheduler.removesuffix(OVERLAP)
    if scheduler not in (None, UPSTREAM_SCHEDULER.get(row["engine"])):
        parts.append(str(scheduler))  # a cross arm: apc-sglang, radix-vllm
    if overlap:
        parts.append("overlap")  # radix-overlap, apc-sglang-overlap
    if not row["cache_enabled"]:
        parts.append("off")
    if row["policy"] != "fcfs":
        parts.append(str(row["policy"]))
    g = row["granularity"]
    if pd.notna(g) and DEFAULT_GRANULARITY.get(row["engine"]) not in (None, int(g)):
        parts.append(unit(row["engine"])[0] + str(int(g)))  # b16, p16
    return "-".join(parts)


def unit(engine: object) -> str:
    """What one KV granule of `engine` is called: its design's unit (`block` when not a design)."""
    return UNITS.get(str(engine), "block")


def summary_table(tidy: pd.DataFrame) -> pd.DataFrame:
    """One row per configuration (KEY_COLUMNS): what it is, the values of the keys that vary in
    its sweep, run counts (all, ok, incomplete, other) and means over the ok runs."""
    counts = ["n_runs", "n_ok", "n_incomplete", "n_not_ok"]
    if tidy.empty:
        return pd.DataFrame(
            columns=[*GROUP_COLUMNS, "fingerprint", "varies", *counts, *MEAN_COLUMNS]
        )
    varying = sorted(
        {
            k
            for v in tidy["varies"]
            for k in str(v).split(", ")
            if k and k not in SHOWN_KEYS and not k.startswith(("hardware.", "model."))
        }
    )
    rows = []
    # A run without a fingerprint (no config recorded) is its own row: nothing says it matches.
    unknown = tidy["fingerprint"].isna() | (tidy["fingerprint"] == "unknown")
    alone = "unknown:" + tidy.index.astype(str)
    keys = [tidy["fingerprint"].where(~unknown, alone), *(tidy[c] for c in KEY_COLUMNS[1:])]
    for _, group in tidy.groupby(keys, dropna=False, sort=False):
        ok = group[group["ok"]]
        first = group.iloc[0]
        row = {c: first[c] for c in (*GROUP_COLUMNS, "fingerprint", "varies")}
        row.update({k: first.get(f"config.{k}") for k in varying})
        incomplete = int((group["status"] == "incomplete").sum())
        row.update(
            n_runs=len(group),
            n_ok=len(ok),
            n_incomplete=incomplete,
            n_not_ok=len(group) - len(ok) - incomplete,
        )
        for col in MEAN_COLUMNS:
            values = (
                pd.to_numeric(ok[col], errors="coerce") if col in ok else pd.Series(dtype=float)
            )
            row[col] = values.mean() if values.notna().any() else np.nan
        rows.append(row)
    table = pd.DataFrame(rows)
    order = ["workload", "arm", *varying]
    numeric = lambda s: pd.to_numeric(s, errors="coerce") if s.name in varying else s.astype(str)  # noqa: E731
    return table.sort_values(order, key=numeric, kind="stable").reset_index(drop=True)


def overhead_pairs(tidy: pd.DataFrame) -> pd.DataFrame:
    """Matched (cache on, cache off) runs of one configuration and seed, the on run at 0% hit.

    One row per pair: the pair columns, sweep (parent folder), seed, and `<metric>_on`,
    `<metric>_off`, `<metric>_ratio`. Pairs of several sweeps of one configuration pool.
    """
    need = {"seed", "sweep", "hit_rate", *OVERHEAD_METRICS}
    if tidy.empty or not need <= set(tidy.columns):
        return pd.DataFrame()
    # Simulated throughput is virtual time, blind to bookkeeping (unless a preset charges host
    # time): their 0%-hit cost is projected_overhead_table's, not a throughput ratio.
    ok = tidy[tidy["ok"] & (tidy["executor"] != "simulated")]
    keys = [*PAIR_COLUMNS, "sweep", "seed"]  # a pair never spans two sweeps (suite runs)
    on = ok[ok["cache_enabled"] & (pd.to_numeric(ok["hit_rate"], errors="coerce") == 0)]
    off = ok[~ok["cache_enabled"]]
    cols = keys + list(OVERHEAD_METRICS)
    # Repeats of one seed would multiply pairs; keep the first run of each (key, seed).
    on = on[cols].drop_duplicates(keys)
    off = off[cols].drop_duplicates(keys)
    pairs = on.merge(off, on=keys, suffixes=("_on", "_off"))
    for metric in OVERHEAD_METRICS:
        pairs[f"{metric}_ratio"] = pairs[f"{metric}_on"] / pairs[f"{metric}_off"]
    return pairs


def overhead_table(pairs: pd.DataFrame) -> pd.DataFrame:
    """Per configuration and metric: n pairs, the geometric mean on/off ratio and its 95%
    t-interval on the log scale (harness.report.stats.ratio_ci)."""
    if pairs.empty:
        return pd.DataFrame(
            columns=[*PAIR_COLUMNS, "metric", "n_pairs", "ratio", "ci_low", "ci_high"]
        )
    rows = []
    for key, group in pairs.groupby(list(PAIR_COLUMNS), dropna=False, sort=True):
        for metric in OVERHEAD_METRICS:
            ratios = group[f"{metric}_ratio"].dropna()
            ratios = ratios[np.isfinite(ratios)]
            if ratios.empty:
                continue
            ci = ratio_ci(ratios.tolist())
            rows.append(
                {
                    **dict(zip(PAIR_COLUMNS, key)),
                    "metric": metric,
                    "n_pairs": ci.n,
                    "ratio": ci.mean,
                    "ci_low": ci.low,
                    "ci_high": ci.high,
                }
            )
    return pd.DataFrame(rows)


# vLLM V1 alpha blog (docs/benchmarking.md §6): "less than 1% throughput decrease at a 0% hit rate".
VLLM_OVERHEAD_CLAIM = 0.01
PROJECTED_KEYS = ("hardware", "engine", "policy", "granularity", "kv_capacity_tokens", "model")


def projected_overhead_table(tidy: pd.DataFrame, workload: str = "unique") -> pd.DataFrame:
    """Per hardware preset and engine: the 0%-hit cache bookkeeping as a share of the run duration.

    Simulated runs only: bookkeeping is wall time measured on this CPU, `duration` the preset's
    virtual seconds, so the share projects the cost beside that GPU. Where the cache-off run of the
    same sweep and seed exists, its bookkeeping (the scheduler's calls that stay without caching)
    is subtracted: `overhead_share` = (on - off) / duration; else it is the gross on / duration.
    """
    columns = [
        *PROJECTED_KEYS,
        "n_runs",
        "n_off_pairs",
        "duration_s",
        "bookkeeping_ms",
        "bookkeeping_off_ms",
        "gross_share",
        "overhead_share",
        "ci_low",
        "ci_high",
        "claim_share",
    ]
    need = {"hardware", "executor", "duration", "cache_bookkeeping_ms", "ok"}
    if tidy.empty or not need <= set(tidy.columns):
        return pd.DataFrame(columns=columns)
    runs = tidy[
        tidy["ok"]
        & (tidy["executor"] == "simulated")
        & tidy["per_step_bookkeeping"]
        & tidy["hardware"].notna()
        & (tidy["workload"] == workload)
    ].copy()
    runs["duration_ms"] = pd.to_numeric(runs["duration"], errors="coerce") * 1e3
    runs["bookkeeping_ms"] = pd.to_numeric(runs["cache_bookkeeping_ms"], errors="coerce")
    keys = [*PROJECTED_KEYS, "sweep", "seed"]
    on = runs[runs["cache_enabled"] & (runs["duration_ms"] > 0)].drop_duplicates(keys)
    off = runs[~runs["cache_enabled"]].drop_duplicates(keys)[[*keys, "bookkeeping_ms"]]
    pairs = on.merge(off, on=keys, how="left", suffixes=("", "_off"))
    pairs["gross"] = pairs["bookkeeping_ms"] / pairs["duration_ms"]
    pairs["net"] = (pairs["bookkeeping_ms"] - pairs["bookkeeping_ms_off"].fillna(0)) / pairs[
        "duration_ms"
    ]
    rows = []
    for key, group in pairs.groupby(list(PROJECTED_KEYS), dropna=False, sort=True):
        shares = group["net"].dropna()
        if shares.empty:
            continue
        ci = mean_ci(shares.tolist())
        rows.append(
            {
                **dict(zip(PROJECTED_KEYS, key)),
                "n_runs": len(group),
                "n_off_pairs": int(group["bookkeeping_ms_off"].notna().sum()),
                "duration_s": group["duration_ms"].mean() / 1e3,
                "bookkeeping_ms": group["bookkeeping_ms"].mean(),
                "bookkeeping_off_ms": group["bookkeeping_ms_off"].mean(),
                "gross_share": group["gross"].mean(),
                "overhead_share": ci.mean,
                "ci_low": ci.low,
                "ci_high": ci.high,
                "claim_share": VLLM_OVERHEAD_CLAIM,
            }
        )
    return pd.DataFrame(rows, columns=columns)
