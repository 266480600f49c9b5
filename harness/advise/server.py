"""`--server URL`: the user's live server driven with the same traffic beside the grid.

Per arrival pattern of the grid, one run against the server through the pipeline's live-server
target (harness/live_server): a burst, Poisson at the same fractions of the burst throughput the
*server* reached (its speed, not the simulated preset's), or the traffic's own times. Its measured
hit rate (cached tokens the server reported) is set beside the designs', with its twin's
agreement: how many requests' cached tokens the built-in cache of the server's design predicted
exactly (docs/servers.md).
"""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass
from pathlib import Path

from harness.advise.grid import Pattern
from harness.advise.traffic import Traffic
from harness.claims import keys
from harness.run.compose import compose, start, write_manifest
from harness.run.pipeline import run
from harness.run.targets import target_for

FLAVOURS = ("vllm", "sglang", "openai")  # conf/server/*.yaml


@dataclass(frozen=True)
class ServerRun:
    pattern: str
    rate: float | None  # req/s of a Poisson pattern, at the server's own burst throughput
    hit_rate: float
    twin_engine: str | None
    twin_matches: int | None
    twin_requests: int | None
    run_dir: str

    def text(self) -> str:
        twin = (
            f"its twin (built-in {self.twin_engine}) predicted {self.twin_matches} of "
            f"{self.twin_requests} requests' cached tokens exactly"
            if self.twin_requests
            else "no twin comparison"
        )
        return f"measured hit rate {self.hit_rate:.1%}; {twin}"


def run_server(
    traffic: Traffic, out: Path, pats: tuple[Pattern, ...], url: str, flavour: str
) -> list[ServerRun]:
    """One run per pattern against the server (seed 0), the burst first."""
    found: list[ServerRun] = []
    burst_rate: float | None = None
    for pattern in pats:
        rate = (
            None
            if pattern.fraction is None or burst_rate is None
            else pattern.fraction * burst_rate
        )
        load = (
            ("load.mode=poisson", f"load.rate={rate:.6g}")
            if rate
            else (f"load.mode={pattern.mode}",)
        )
        overrides = [
            *traffic.server_base,
            f"server={flavour}",
            f"server.url={url}",
            *load,
            "seed=0",
        ]
        composed = compose(overrides, job_name="advise")
        files, rows = start(out / "server" / pattern.name, overwrite=False)
        write_manifest(files, composed)
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            summary = run(composed.cfg, files, rows, target_for(composed.cfg)).summary
        if summary.get("status") != "ok":
            raise RuntimeError(f"server run {pattern.name}: {summary.get('error')}")
        if pattern.mode == "burst":
            burst_rate = keys.value(summary, "request_throughput")
        found.append(
            ServerRun(
                pattern=pattern.name,
                rate=rate,
                hit_rate=keys.value(summary, keys.HIT_RATE),
                twin_engine=_design(summary.get("twin_engine")),
                twin_matches=summary.get("twin_matches"),
                twin_requests=summary.get("twin_requests"),
                run_dir=str(files.path),
            )
        )
    return found


def _design(engine: object) -> str | None:
    """The twin's cache design from its engine settings (a dict in the summary)."""
    return str(engine.get("cache")) if isinstance(engine, dict) else None
