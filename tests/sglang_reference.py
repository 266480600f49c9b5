"""Streams stated in loop iterations, run on prefixbench's SGLang scheduler and on SGLang's own.

A case is a list of request specs (rid, prompt, scripted output, and either the iteration that
receives it or the request whose finish releases it). `run_prefixbench` drives the twin iteration
by iteration as upstream's loop receives (tests/stepwise.py); `run_upstream` hands the same specs
to scripts/sglang_overlap_reference.py in .venv-sglang. Both return per request (cached tokens,
output, retractions) and per step (iteration, kind, [rid, new tokens] rows).
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass

import numpy as np

from engines.engine import Engine
from engines.request import CompletionRequest, GenerationRequest
from tests.harness_util import ROOT
from tests.stepwise import step_engine

VENV_PYTHON = ROOT / ".venv-sglang" / "bin" / "python"
SCRIPT = ROOT / "scripts" / "sglang_overlap_reference.py"


@dataclass(frozen=True)
class Config:
    chunk: int = 1024
    kv_tokens: int = 65536
    max_running: int = 64
    page_size: int = 1


def _ids(rng: np.random.Generator, n: int) -> list[int]:
    return rng.integers(100, 30000, n).tolist()


def _arrivals(rng: np.random.Generator, n: int, poisson: bool) -> list[int]:
    """The receiving iteration of n independent requests: one burst, or Poisson at 0.5 a step."""
    if not poisson:
        return [0] * n
    return np.floor(np.cumsum(rng.exponential(2.0, n))).astype(int).tolist()


def _spec(rid, prompt, output, iteration=None, after=None) -> dict:
    spec = {"rid": rid, "prompt": prompt, "output": output}
    return {**spec, "after": after} if after is not None else {**spec, "iteration": iteration}


def system_prompt(seed: int, poisson: bool) -> list[dict]:
    rng = np.random.default_rng(seed)
    systems = [_ids(rng, 300) for _ in range(3)]
    at = _arrivals(rng, 24, poisson)
    return [
        _spec(f"s{i:02d}", systems[i % 3] + _ids(rng, 40), _ids(rng, 8), at[i]) for i in range(24)
    ]


def multiturn(seed: int, poisson: bool) -> list[dict]:
    """Six conversations of three turns; a turn is sent when the previous one finished, its
    prompt the previous prompt, its reply and a new user message."""
    rng = np.random.default_rng(seed)
    at = _arrivals(rng, 6, poisson)
    out = []
    for c in range(6):
        prompt, parent = _ids(rng, 200), None
        for t in range(3):
            reply = _ids(rng, 12)
            out.append(_spec(f"c{c}t{t}", prompt, reply, at[c], parent))
            parent, prompt = f"c{c}t{t}", prompt + reply + _ids(rng, 30)
    return out


def agent(seed: int, poisson: bool) -> list[dict]:
    """Four agents sharing a 400-token system prompt, four calls each; a call's prompt is the
    last one, its reply and a tool result."""
    rng = np.random.default_rng(seed)
    system = _ids(rng, 400)
    at = _arrivals(rng, 4, poisson)
    out = []
    for a in range(4):
        prompt, parent = system + _ids(rng, 50), None
        for k in range(4):
            reply = _ids(rng, 16)
            out.append(_spec(f"a{a}k{k}", prompt, reply, at[a], parent))
            parent, prompt = f"a{a}k{k}", prompt + reply + _ids(rng, 60)
    return out


def parallel(seed: int, poisson: bool, n: int = 4) -> list[dict]:
    """Six prompts with n samples each, as SGLang's tokenizer manager sends them: the prompt
    once with max_new_tokens=0, then the n samples when that one finished."""
    rng = np.random.default_rng(seed)
    system = _ids(rng, 200)
    at = _arrivals(rng, 6, poisson)
    out = []
    for p in range(6):
        prompt = system + _ids(rng, 50)
        out.append(_spec(f"prefix_p{p}", prompt, [], at[p]))
        out += [_spec(f"{i}_p{p}", prompt, _ids(rng, 8), after=f"prefix_p{p}") for i in range(n)]
    return out


STREAMS = {"system_prompt": system_prompt, "multiturn": multiturn, "agent": agent}
STREAMS["parallel_n4"] = parallel


def pressure(seed: int, poisson: bool) -> list[dict]:
    """24 requests on three system prompts (20 to 200 tokens) with outputs of 1 to 99 tokens:
    in 512 KV tokens the decode memory check fails and requests are retracted."""
    rng = np.random.default_rng(seed)
    systems = [_ids(rng, int(rng.integers(20, 200))) for _ in range(3)]
    at = _arrivals(rng, 24, poisson)
    return [
        _spec(
            f"q{i:02d}",
            systems[int(rng.integers(0, 3))] + _ids(rng, 40),
            _ids(rng, int(rng.integers(1, 100))),
            at[i],
        )
        for i in range(24)
    ]


def issue_cases() -> dict[str, list[dict]]:
    """The hand-made cases of tests/unit/test_sglang_overlap.py at chunk 8,192: a 512-token
    prefix, 32 prompts of it and a 64-token suffix whose first token differs per request."""
    rng = np.random.default_rng(51)
    prefix = rng.integers(100, 1000, 512).tolist()
    out = list(range(900, 904))
    shared = [prefix + [1 + i] + rng.integers(100, 1000, 63).tolist() for i in range(32)]
    return {
        "twin_one_iteration_later": [_spec("a", prefix, out, 0), _spec("b", prefix, out, 1)],
        "burst_of_32": [_spec(f"r{i:02d}", p, out, 0) for i, p in enumerate(shared)],
        "one_per_iteration_32": [_spec(f"r{i:02d}", p, out, i) for i, p in enumerate(shared)],
    }


def run_upstream(config: Config, overlap: bool, cases: dict[str, list[dict]]) -> dict:
    """Every case on one upstream Scheduler (flushed between cases)."""
    payload = {
        "overlap": overlap,
        "chunk": config.chunk,
        "kv_tokens": config.kv_tokens,
        "max_running": config.max_running,
        "page_size": config.page_size,
        "cases": [{"name": name, "requests": reqs} for name, reqs in cases.items()],
    }
    done = subprocess.run(
        ["env", "-u", "VIRTUAL_ENV", str(VENV_PYTHON), str(SCRIPT)],
        input=json.dumps(payload), capture_output=True, text=True, timeout=900, cwd=ROOT,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"the SGLang driver failed:\n{done.stderr[-3000:]}")
    got = json.loads(done.stdout)
    if got["overlap"] != overlap:
        raise RuntimeError(f"SGLang ran with overlap={got['overlap']}, asked {overlap}")
    return got["cases"]


def run_prefixbench(config: Config, overlap: bool, specs: list[dict]) -> dict:
    """The twin (`engine.scheduler=sglang`, radix) on the same arrivals, iteration by iteration.

    Requests received by iteration i join when step i - 1 started; one released by a finish joins
    when the step reporting it ended, as the n samples of a prompt the engine's own front stage
    holds. Under overlap a formation that launches nothing is followed at once by the next one
    inside `Engine.step` (upstream's loop spins): each formation is an iteration (counted at the
    scheduler's `schedule`), so the requests due by the next iteration are handed over with the
    late ones, received after the step in flight started (kept out of one formation either way)."""
    engine = step_engine(
        cache="radix",
        block_size=config.page_size,
        kv_capacity_tokens=config.kv_tokens,
        max_num_seqs=config.max_running,
        max_num_batched_tokens=config.chunk,
        overlap=overlap,
        decode_runs=False,
    )
    stream = _Stream(specs)
    formations = _count_formations(engine)
    steps: list[dict] = []
    i, launched, started = 0, False, engine.clock.now()
    while not stream.all_sent() or engine.has_work:
        stream.send(engine, i, started)  # received when the step in flight started
        if overlap and launched:  # the next iteration's arrivals, late for this formation
            stream.send(engine, i + 1, engine.clock.now())
        if not engine.has_work:
            engine.idle()
            launched, i, started = False, i + 1, engine.clock.now()
            continue
        before = len(engine.loop.step_log or [])
        started, formed = engine.clock.now(), formations[0]
        out = engine.step()
        spun = formations[0] - formed - 1  # 1 when a formation launched nothing, then the next
        for rec in (engine.loop.step_log or [])[before:]:
            rows = [[rid, n] for rid, n in rec.scheduled]
            steps.append({"iteration": i + spun, "kind": rec.kind, "rows": rows})
        for record in out.finished:
            stream.release(engine, record.request_id, out.end_s)
        launched, i = out.progressed, i + 1 + spun
    engine.idle()
    records = list(engine.records) + list(engine.frontend_records)
    return {
        "requests": {
            r.request_id: {
                "cached_tokens": r.cached_tokens,
                "output": list(r.output_ids),
                "retractions": r.num_preemptions,
            }
            for r in records
        },
        "steps": steps,
    }


class _Stream:
    """A case's specs on the twin's side: timed ones by iteration (an n-sample prompt through
    the engine's front stage), the others released by their parent's finish."""

    def __init__(self, specs: list[dict]) -> None:
        heads = {
            s["rid"].removeprefix("prefix_"): s for s in specs if s["rid"].startswith("prefix_")
        }
        self.samples: dict[str, list[dict]] = {pid: [] for pid in heads}
        self.dependents: dict[str, list[dict]] = {}
        self.timed: list[tuple[int, GenerationRequest | CompletionRequest]] = []
        for s in specs:
            parent = s.get("after")
            if parent is not None and parent.startswith("prefix_"):
                self.samples[parent.removeprefix("prefix_")].append(s)
            elif parent is not None:
                self.dependents.setdefault(parent, []).append(s)
            elif not s["rid"].startswith("prefix_"):
                self.timed.append((s["iteration"], _request(s)))
        for pid, head in heads.items():
            outs = tuple(tuple(s["output"]) for s in self.samples[pid])
            req = CompletionRequest(pid, tuple(head["prompt"]), len(outs[0]), len(outs), outs)
            self.timed.append((head["iteration"], req))
        self.sent: set[int] = set()

    def all_sent(self) -> bool:
        return len(self.sent) == len(self.timed)

    def send(self, engine: Engine, i: int, at_s: float) -> None:
        """Hand over the timed requests due by iteration i."""
        for k, (due, req) in enumerate(self.timed):
            if due <= i and k not in self.sent:
                self.sent.add(k)
                if isinstance(req, CompletionRequest):
                    engine.submit(req, at_s)
                else:
                    engine.add_request(req, at_s)

    def release(self, engine: Engine, rid: str, at_s: float) -> None:
        """`rid` finished: hand over the requests that waited for it."""
        for s in self.dependents.get(rid, []):
            engine.add_request(_request(s), at_s)


def _count_formations(engine: Engine) -> list[int]:
    """A counter of the scheduler's formations (`schedule` calls), passed through unchanged."""
    scheduler = engine.loop.scheduler
    schedule = scheduler.schedule
    count = [0]

    def counted(*args, **kwargs):
        count[0] += 1
        return schedule(*args, **kwargs)

    scheduler.schedule = counted  # type: ignore[method-assign]
    return count


def _request(spec: dict) -> GenerationRequest:
    out = tuple(spec["output"])
    return GenerationRequest(spec["rid"], tuple(spec["prompt"]), len(out), out)


def upstream_rows(steps: list[dict]) -> list[dict]:
    """Upstream's batches as the twin logs them: [rid, new tokens] rows."""
    return [
        {
            "iteration": s["iteration"],
            "kind": s["kind"],
            "rows": [[row[0], row[2] if s["kind"] == "prefill" else 1] for row in s["rows"]],
        }
        for s in steps
    ]
