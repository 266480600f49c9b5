"""The per-request table's columns and their dtypes: one row per finished child request, the
schema of rows.jsonl and requests.parquet. They sit on the results floor, which reads and writes
those files; harness/metrics/table.py fills the rows (docs/benchmarking.md §8).
"""

from __future__ import annotations

import pandas as pd

_STR = pd.StringDtype()  # nullable (pd.NA), and round-trips through parquet on pandas 2 and 3
_INT = "int64"
_FLOAT = "float64"

COLUMNS: dict[str, object] = {
    "request_id": _STR,
    "parent_id": _STR,
    "request_index": _INT,
    "sample_index": _INT,
    "session_id": _STR,
    "turn": _INT,
    "salt": _STR,
    "workload": _STR,
    "workload_version": _INT,
    "engine": _STR,
    "policy": _STR,
    "block_size": _INT,
    "seed": _INT,
    "run_id": _STR,
    "prompt_tokens": _INT,
    "cached_tokens": _INT,
    "host_cached_tokens": _INT,  # of cached_tokens, from a host tier (0 without one)
    "host_load_bytes": _INT,  # KV bytes loaded host -> device for it (0 without a tier)
    "host_store_bytes": _INT,  # its KV bytes stored device -> host until it finished
    "host_load_ms": _FLOAT,  # its loads' time on the host link, queueing included
    "storage_cached_tokens": _INT,  # of cached_tokens, from a storage tier (not the host's)
    "output_tokens": _INT,
    "recomputed_tokens": _INT,
    "num_preemptions": _INT,
    "shared_prefix_len": _INT,
    "arrival_s": _FLOAT,
    "scheduled_s": _FLOAT,
    "first_token_s": _FLOAT,
    "finish_s": _FLOAT,
    "queue_delay_ms": _FLOAT,
    "ttft_ms": _FLOAT,
    "tpot_ms": _FLOAT,
    "e2el_ms": _FLOAT,
}

# Columns that legitimately differ between two runs of the same config and seed. (Under wall-clock
# arrivals the batching, and so cached/recomputed tokens and preemptions, can differ too.)
TIMING_COLUMNS: tuple[str, ...] = (
    "arrival_s",
    "scheduled_s",
    "first_token_s",
    "finish_s",
    "queue_delay_ms",
    "ttft_ms",
    "tpot_ms",
    "e2el_ms",
)
