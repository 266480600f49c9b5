"""The seam between the one run pipeline and what it measures: a `Target`.

A target is connected once per run (`Target.connect` gives a `Session`); the pipeline
(harness/run/pipeline.py) then hands the session the workload's requests, its warm-up requests,
the measured window and the recording, in that order and nowhere else. Each part is the target's
own (building an engine or discovering a server, driving it in process or over HTTP, the facts
it adds); the stages, their order, the warm-up policy and the files are the pipeline's.
The targets are registered in one place, harness/run/targets.py.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

import numpy as np
import pandas as pd

from harness.config.schema import RunConfig
from harness.metrics.summary import RunContext
from harness.results.run_dir import RunDir
from workloads.request import Request
from workloads.tokens import TokenSpace

D = TypeVar("D")  # what the target delivers per finished request (a record, a reply)


@dataclass(frozen=True)
class Recorded:
    """What a target's measured window comes to: the request table and the figures the pipeline
    summarizes, and the facts the target adds to summary.json and manifest.json."""

    table: pd.DataFrame  # every row, as requests.parquet holds it
    summarized: pd.DataFrame  # the rows the figures are computed from (the successful ones)
    itls_ms: Mapping[str, Sequence[float] | np.ndarray]  # request_id -> gaps between tokens
    duration_s: float
    num_failed: int
    token_rows: Callable[[], list[dict]]  # tokens.jsonl, made only when save_tokens is set
    status: str  # ok | failed: the target's own check (a cache leak, replies that never came)
    error: str | None
    # summary.json: `figures` right after the common head, `clock` after wall_s, `comparison`
    # after the warm-up facts (the order both targets' summaries have always had).
    figures: dict[str, object] = field(default_factory=dict)
    clock: dict[str, object] = field(default_factory=dict)
    comparison: dict[str, object] = field(default_factory=dict)
    manifest: dict[str, object] = field(default_factory=dict)  # merged into manifest.json


class Session(Protocol[D]):
    """One connected target for one run."""

    space: TokenSpace  # the ids the workload's prompts are drawn from
    backend: str  # the summary's `backend` and the rows' `engine`
    model_id: str
    block_size: int  # the rows' `block_size`

    def admit(self, requests: list[Request]) -> None:
        """Everything that needs the requests before warm-up (an engine checks they fit)."""

    def warm_up(self, requests: list[Request]) -> None:
        """Run unrelated requests (the pipeline's warm-up policy made them)."""

    def flush(self, warmup: list[Request]) -> dict[str, object]:
        """Empty the prefix cache for the measured window; the facts of it (`cache_flushed`)."""

    def drive(self, requests: list[Request], deliver: Callable[[D], None]) -> None:
        """The measured window: send `requests`, deliver each finished one as it finishes."""

    def rows(self, item: D, index_of: Mapping[str, int], context: dict[str, object]) -> list[dict]:
        """The rows file's rows of one delivered request (`index_of`: its position in the
        workload's order)."""

    def record(
        self, cfg: RunConfig, requests: list[Request], items: list[D], context: RunContext
    ) -> Recorded:
        """The table, figures and facts of the measured window (`items` in delivery order)."""

    def write_files(self, out: RunDir) -> None:
        """Files only this target has (the engine's step log)."""

    def close(self) -> None:
        """Release what `connect` took (a connection, an event loop)."""


class Target(Protocol[D]):
    """How to connect one kind of target (registered in harness/run/targets.py)."""

    def connect(self, cfg: RunConfig) -> Session[D]:
        """Build or reach the target; bad input (an unreachable server) fails here, first."""
