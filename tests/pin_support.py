"""Per-request pins: run a few small workloads in-process and reduce each run to what fidelity means.

A pin is, per request, the cached tokens, preemptions, recomputed tokens and a digest of the output
ids, plus the run's eviction counters and step count. tests/data/pins.json holds the pins recorded
before the scheduler and cache became separate axes; `tests/unit/test_pins.py` recomputes and compares.
Regenerate (only when a behaviour change is intended and explained):

    PYTHONPATH=$PWD python -m tests.pin_support > tests/data/pins.json
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from hydra import compose, initialize_config_dir

from engines.build import build_engine
from harness.client.arrivals import with_arrivals
from harness.client.inprocess import drive
from harness.client.programs import runs_as_program
from harness.config.schema import RunConfig, to_schema
from harness.config.tokenspace import token_space_for
from workloads.base import generate

CONF = Path(__file__).resolve().parents[1] / "conf"
PINS = Path(__file__).resolve().parent / "data" / "pins.json"
SIM = ("executor=simulated", "hardware=h100_llama3_8b_bf16")
# The pins recorded before the overlap loop existed are SGLang's non-overlap loop; radix's preset
# now runs the overlap loop (SGLang's GPU default), so those cases name the plain loop, and the
# `radix-overlap-*` cases pin the default.
PLAIN = "engine.overlap=false"


@dataclass(frozen=True)
class Case:
    overrides: tuple[str, ...]  # Hydra overrides on top of model=tiny, load.mode=burst


def loop_of(engine: str) -> tuple[str, ...]:
    """The preset, under SGLang's non-overlap loop where its scheduler is SGLang's."""
    return (f"engine={engine}",) if engine == "apc" else (f"engine={engine}", PLAIN)


def _cases() -> dict[str, Case]:
    cases: dict[str, Case] = {}
    for engine in ("apc", "radix"):
        e = loop_of(engine)
        cases[f"{engine}-multiturn-sim"] = Case((*e, "workload=multiturn", *SIM))
        cases[f"{engine}-fewshot-burst-sim"] = Case((*e, "workload=fewshot", *SIM))
        cases[f"{engine}-parallel-sim"] = Case((*e, "workload=parallel", *SIM))
        cases[f"{engine}-system_prompt-real-greedy"] = Case(
            (
                *e,
                "workload=system_prompt",
                "decode=greedy",
                "workload.num_groups=2",
                "workload.prompts_per_group=3",
                "workload.system_prompt_len=48",
                "workload.question_len=8",
                "workload.output_len=4",
            )
        )
        # Tight KV: vLLM preempts, SGLang retracts; the same traffic exercises both paths.
        cases[f"{engine}-fewshot-tight-sim"] = Case(
            (*e, "workload=fewshot", "engine.kv_capacity_tokens=1024", *SIM)
        )
        cases[f"{engine}-multiturn-tight-real"] = Case(
            (*e, "workload=multiturn", "engine.kv_capacity_tokens=1024", "workload.num_users=6")
        )
    for engine in ("apc", "radix"):
        cases[f"{engine}-system_prompt-retract-sim"] = Case(
            (
                *loop_of(engine),
                "workload=system_prompt",
                "workload.num_groups=2",
                "workload.system_prompt_len=128",
                "workload.question_len=16",
                "workload.output_len=96",
                "engine.kv_capacity_tokens=768",
                *SIM,
            )
        )
        cases[f"{engine}-unique-retract-sim"] = Case(
            (
                *loop_of(engine),
                "workload=unique",
                "workload.num_prompts=16",
                "workload.prompt_len=48",
                "workload.output_len=96",
                "engine.kv_capacity_tokens=512",
                *SIM,
            )
        )
    cases["apc-lpm-system_prompt-sim"] = Case(
        ("engine=apc", "engine.policy=lpm", "workload=system_prompt", *SIM)
    )
    cases["radix-lpm-system_prompt-sim"] = Case(
        ("engine=radix", PLAIN, "engine.policy=lpm", "workload=system_prompt", *SIM)
    )
    cases["radix-p16-multiturn-sim"] = Case(
        ("engine=radix", PLAIN, "engine.block_size=16", "workload=multiturn", *SIM)
    )
    cases["apc-sync-multiturn-sim"] = Case(
        ("engine=apc", "engine.async_scheduling=false", "workload=multiturn", *SIM)
    )
    # The default: SGLang's overlap loop, under both caches its scheduler drives (recorded from
    # the loop that equals SGLang 0.5.23's own event_loop_overlap, docs/scheduler_x_cache.md).
    for engine in ("radix", "apc_sglang"):
        e = (f"engine={engine}",)
        cases[f"{engine}-overlap-multiturn-sim"] = Case((*e, "workload=multiturn", *SIM))
        cases[f"{engine}-overlap-fewshot-burst-sim"] = Case((*e, "workload=fewshot", *SIM))
        cases[f"{engine}-overlap-parallel-sim"] = Case((*e, "workload=parallel", *SIM))
        cases[f"{engine}-overlap-fewshot-tight-sim"] = Case(
            (*e, "workload=fewshot", "engine.kv_capacity_tokens=1024", *SIM)
        )
        cases[f"{engine}-overlap-multiturn-tight-real"] = Case(
            (*e, "workload=multiturn", "engine.kv_capacity_tokens=1024", "workload.num_users=6")
        )
    return cases


CASES = _cases()


def compose_run(overrides: tuple[str, ...]):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="config", overrides=["model=tiny", "load.mode=burst", *overrides])
    return to_schema(cfg, RunConfig)


def run_overrides(overrides: tuple[str, ...]) -> tuple[dict, list]:
    """(run-level counters, records) of one in-process run without warm-up."""
    cfg = compose_run(overrides)
    space = token_space_for(cfg.model)
    reqs = with_arrivals(generate(cfg.workload, cfg.seed, space), cfg.load, cfg.seed)
    engine = build_engine(
        cfg.engine, cfg.model, executor=cfg.executor, device="cpu", hardware=cfg.hardware
    )
    records = drive(
        engine,
        reqs,
        scripted=cfg.decode == "scripted",
        program_batch=runs_as_program(cfg.workload.name),
    )
    stats = engine.cache.stats()
    run = {
        "evictions": stats.num_evictions,
        "evicted_tokens": stats.evicted_tokens,
        "hits": stats.hits,
        "queries": stats.queries,
        "num_steps": engine.loop.num_steps,
    }
    return run, records


def digest(ids) -> str:
    return hashlib.sha1(json.dumps(list(ids)).encode()).hexdigest()[:12]


def pin_of(overrides: tuple[str, ...]) -> dict:
    run, records = run_overrides(overrides)
    per_request = {
        r.request_id: [
            r.cached_tokens,
            r.num_preemptions,
            r.recomputed_tokens,
            digest(r.output_ids),
        ]
        for r in sorted(records, key=lambda r: r.request_id)
    }
    return {"run": run, "requests": per_request}


def main() -> None:
    pins = {name: pin_of(case.overrides) for name, case in CASES.items()}
    print(json.dumps(pins, indent=1, sort_keys=True))


if __name__ == "__main__":
    main()
