"""The user's traffic and deployment as the advice reads them: the base configuration, the
requests it generates, whether they carry arrival times, and the two KV capacities.

Defaults: the simulated executor at an H100 preset (Llama-3.1-8B bf16) with vLLM-like batch
limits, the KV capacity its memory holds after the weights; any override the user gives wins.
Bad input (no prompts, one prompt, a capacity below the largest request) raises BadInput.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.advise.grid import round_up
from harness.claims.arms import GPU_BUDGETS
from harness.config.errors import BadInput
from harness.config.schema import RunConfig
from harness.config.tokenspace import token_space_for
from harness.run.compose import compose
from harness.run.pipeline import workload_of
from workloads.request import Request

DEFAULT_HARDWARE = "h100_llama3_8b_bf16"
# Chosen by the grid per cell: a user's value would be overridden silently, so it is refused.
GRID_KEYS = (
    "engine",
    "engine.cache",
    "engine.scheduler",
    "engine.block_size",
    "engine.policy",
    "load.mode",
    "load.rate",
    "seed",
)


@dataclass(frozen=True)
class Traffic:
    """What the grid is designed from."""

    base: tuple[str, ...]  # overrides every cell starts from (the user's, after the defaults)
    cfg: RunConfig
    num_requests: int
    has_times: bool  # arrival_s in the file (or a trace's timestamps)
    largest_request: int  # prompt + output tokens of the largest request
    working_set: int  # prompt + output tokens of all requests, in whole pages of 32
    capacity: int  # the user's KV capacity (or the preset's)
    server_base: tuple[str, ...] = ()  # the user's overrides a live server's runs take

    @property
    def capacity_fits(self) -> bool:
        return self.capacity >= self.working_set


def _key(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+~")


def base_overrides(user: list[str]) -> tuple[str, ...]:
    """The defaults the user did not set, then the user's overrides."""
    keys = {_key(o) for o in user}
    refused = sorted(keys & set(GRID_KEYS))
    if refused:
        raise BadInput(
            f"{refused[0]} is chosen by the advice grid for each run; "
            "leave it out (allowed: workload, hardware, executor, model, engine.kv_capacity_tokens, ...)"
        )
    real = any(o.startswith("executor=") and o.split("=", 1)[1] == "real" for o in user)
    defaults: list[str] = []
    if not real:
        defaults += [
            o for o in ("executor=simulated", f"hardware={DEFAULT_HARDWARE}") if _key(o) not in keys
        ]
        defaults += [o for o in GPU_BUDGETS if _key(o) not in keys]
    return (*defaults, *user)


def read_traffic(given: list[str]) -> Traffic:
    # `server.*` overrides (server.tokenizer, server.block_size, ...) are for --server's runs only
    user = [o for o in given if not _key(o).startswith("server.")]
    base = base_overrides(user)
    # page 1 here: any whole capacity passes; the grid rounds it to its pages below
    cfg = compose([*base, "engine.block_size=1"], job_name="advise").cfg
    requests = workload_of(cfg, token_space_for(cfg.model))
    num = sum(r.n for r in requests)
    if num < 2:
        raise BadInput(
            f"workload {cfg.workload.name}: {num} prompt; the advice compares how prompts reuse "
            "each other's KV, so it needs at least 2"
        )
    largest = max(_tokens(r) for r in requests)
    capacity = _capacity(cfg, {_key(o) for o in user})
    if capacity < largest:
        raise BadInput(
            f"engine.kv_capacity_tokens={capacity} is smaller than the largest request "
            f"({largest} prompt + output tokens); allowed: at least {round_up(largest)}"
        )
    return Traffic(
        base=tuple(o for o in base if _key(o) != "engine.kv_capacity_tokens"),  # set per cell
        cfg=cfg,
        num_requests=num,
        has_times=any(r.arrival_s > 0 for r in requests),
        largest_request=largest,
        working_set=round_up(sum(r.n * _tokens(r) for r in requests)),
        capacity=capacity,
        # a live server has its own hardware, capacity and limits: only the traffic and model
        server_base=tuple(
            o for o in given if _key(o).split(".")[0] in ("workload", "model", "server")
        ),
    )


def _tokens(r: Request) -> int:
    return len(r.prompt_ids) + r.output_len


def _capacity(cfg: RunConfig, user_keys: set[str]) -> int:
    """The user's capacity, else what the preset's memory holds, in whole pages of 32 (every
    page size of the grid must divide it: engines/config.py refuses a partial page)."""
    if "engine.kv_capacity_tokens" in user_keys or cfg.hardware is None:
        return int(cfg.engine.kv_capacity_tokens) // 32 * 32
    return cfg.hardware.kv_capacity_tokens() // 32 * 32
