"""BR0.2 `scenario.load`: the workload as the Benchmark Report describes one. The family's own
shared-prefix structure becomes `LoadPrefix` where the family has one (system_prompt's groups,
fewshot's tasks, multiturn's shared system prompt); the measured lengths, turns, arrival process
and rate come from the run's request table and load config. Everything else of the workload stays
in `native.config` verbatim."""

from __future__ import annotations

import pandas as pd

from harness.export.run_view import RunView
from harness.export.stats import sequence_length
from harness.results.identity import fingerprint

# Families whose tokens come from data (a dataset, a prompt file); the rest draw random ids (a
# trace's hash ids are expanded to random tokens too).
SAMPLED_FAMILIES = frozenset({"dataset", "prompts"})


def _fixed(value: object) -> dict[str, object]:
    return {"distribution": "fixed", "value": int(value)}  # type: ignore[call-overload]


def load_prefix(workload: dict) -> dict[str, object] | None:
    """`LoadPrefix` for the families whose parameters name a shared prefix; None otherwise (the
    measured sharing is under results.observability.prefix_cache instead)."""
    family = workload.get("family")
    if family == "system_prompt":
        return {
            "prefix_len": _fixed(workload["system_prompt_len"]),
            "num_groups": int(workload["num_groups"]),
            "num_users_per_group": int(workload["prompts_per_group"]),
            "num_prefixes": 1,
        }
    if family == "multiturn" and int(workload.get("system_prompt_len") or 0) > 0:
        return {  # every user shares one system prompt; each user's history is its own
            "prefix_len": _fixed(workload["system_prompt_len"]),
            "num_groups": 1,
            "num_users_per_group": int(workload["num_users"]),
            "num_prefixes": 1,
        }
    if family == "fewshot":
        shots = int(workload["k_shots"]) * int(workload["shot_len"])
        return {
            "prefix_len": _fixed(int(workload.get("instruction_len") or 0) + shots),
            "num_groups": int(workload["num_tasks"]),
            "num_users_per_group": int(workload["questions_per_task"]),
            "num_prefixes": 1,
        }
    return None


def multi_turn(requests: pd.DataFrame) -> dict[str, object] | None:
    """`MultiTurn` when the run's requests form sessions of more than one turn."""
    if (
        "session_id" not in requests
        or "turn" not in requests
        or requests["session_id"].isna().all()
    ):
        return None
    turns = requests.dropna(subset=["session_id"]).groupby("session_id")["turn"].max() + 1
    if int(turns.max()) < 2:
        return None
    return {"enabled": True, "max_turns": sequence_length(turns.tolist())}


def arrivals(load: dict) -> dict[str, object]:
    """rate_qps and concurrency: load.mode=poisson (gamma gaps of any burstiness) names its rate;
    a burst or a trace replay has none; a concurrency cap is the schema's concurrency."""
    out: dict[str, object] = {}
    rate = load.get("rate")
    if load.get("mode") == "poisson" and rate:
        out["rate_qps"] = float(rate)
    if load.get("max_concurrency"):
        out["concurrency"] = int(load["max_concurrency"])
    return out


def scenario_load(run: RunView, tool_version: str) -> dict[str, object]:
    workload, load, requests = run.group("workload"), run.group("load"), run.requests
    client = run.manifest.get("client") if run.kind == "client" else None
    standardized: dict[str, object] = {
        "tool": client.get("name") if isinstance(client, dict) else "prefixbench",
        "tool_version": client.get("version") if isinstance(client, dict) else tool_version,
        "source": "sampled" if workload.get("family") in SAMPLED_FAMILIES else "random",
        "input_seq_len": sequence_length(requests["prompt_tokens"]) or _fixed(0),
        "output_seq_len": sequence_length(run.column("output_tokens")),
        "prefix": load_prefix(workload),
        "multi_turn": multi_turn(requests),
        **arrivals(load),
    }
    return {
        "metadata": {
            "cfg_id": fingerprint(workload, data=False),
            "description": f"prefixbench workload {workload.get('name')} "
            f"(family {workload.get('family')}), load mode {run.summary.get('load_mode')}",
        },
        "standardized": {k: v for k, v in standardized.items() if v is not None},
        "native": {
            "args": {"load": load, "seed": run.config.get("seed")},
            "config": workload,
        },
    }
