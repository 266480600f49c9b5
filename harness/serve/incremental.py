"""A stand-in for [1/7]'s incremental engine interface, until it lands on main (then deleted).

`IncrementalEngine` wraps today's `Engine` and offers the names of INTERFACE.md: `submit`
(vLLM's n-fan-out, "{i}_{id}" children), `step` -> `StepOutput`, `abort_request`, `has_work`,
`clock`, `cache`, `loop`. It drives the engine's own step loop, admission and executor exactly as
`Engine.run` does per step; aborting drops a request between steps and frees its KV.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from engines.engine import Engine, _sequence
from engines.records import RequestRecord
from engines.request import GenerationRequest
from engines.sequence import SeqStatus, Sequence


@dataclass(frozen=True)
class CompletionRequest:
    request_id: str
    prompt_ids: tuple[int, ...]
    max_new_tokens: int
    n: int = 1
    scripted_output_ids: tuple[tuple[int, ...], ...] | None = None
    salt: str | None = None
    lora_id: str | None = None
    priority: int = 0


@dataclass(frozen=True)
class StepOutput:
    end_s: float
    progressed: bool
    tokens: dict[str, list[int]]
    finished: list[RequestRecord]
    finished_parents: list[str]
    step_index: int
    scheduled: list[tuple[str, int]]


@dataclass
class _Child:
    req: GenerationRequest
    seq: Sequence
    arrival_s: float
    scheduled_s: float | None = None
    token_times_s: list[float] = field(default_factory=list)


class IncrementalEngine:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.loop = engine.loop
        self.cache = engine.cache
        self._children: dict[str, _Child] = {}
        self._parents: dict[str, list[str]] = {}

    @property
    def clock(self):
        return self.engine.clock

    @property
    def has_work(self) -> bool:
        return self.loop.has_work

    def submit(self, req: CompletionRequest, arrival_s: float) -> list[str]:
        children = [
            GenerationRequest(
                request_id=req.request_id if req.n == 1 else f"{i}_{req.request_id}",
                prompt_ids=req.prompt_ids,
                max_new_tokens=req.max_new_tokens,
                scripted_output_ids=None
                if req.scripted_output_ids is None
                else req.scripted_output_ids[i],
                arrival_s=arrival_s,
                parent_id=req.request_id,
                sample_index=i,
                salt=req.salt,
                lora_id=req.lora_id,
                priority=req.priority,
            )
            for i in range(req.n)
        ]
        self.engine.check_fits(children)
        for child in children:
            self.add_request(child, arrival_s)
        return [c.request_id for c in children]

    def add_request(self, req: GenerationRequest, arrival_s: float) -> None:
        seq = _sequence(req)
        self._children[req.request_id] = _Child(req, seq, arrival_s)
        self._parents.setdefault(req.parent_id or req.request_id, []).append(req.request_id)
        self.loop.add(seq)

    def step(self, next_release_s: float = math.inf) -> StepOutput:
        clock = self.engine.clock
        start = clock.now()
        plan = self.loop.schedule()
        index = self.loop.num_steps
        if not plan.scheduled:
            return StepOutput(clock.now(), False, {}, [], [], index, [])
        tokens = self.engine.executor.execute(plan)
        end = clock.now()
        scheduled = [(it.seq.seq_id, it.num_new_tokens) for it in plan.scheduled]
        for it in plan.scheduled:
            child = self._children[it.seq.seq_id]
            if child.scheduled_s is None:
                child.scheduled_s = start
        for rid in tokens:
            self._children[rid].token_times_s.append(end)
        finished = self.loop.complete(plan, tokens)
        records = [self._finish(seq) for seq in finished]
        parents = [r.parent_id for r in records if r.parent_id not in self._parents]
        emitted = {rid: [tok] for rid, tok in tokens.items()}
        return StepOutput(end, True, emitted, records, parents, index, scheduled)

    def _finish(self, seq: Sequence) -> RequestRecord:
        child = self._children.pop(seq.seq_id)
        parent = child.req.parent_id or child.req.request_id
        self._drop_from_parent(parent, seq.seq_id)
        times = child.token_times_s
        return RequestRecord(
            request_id=seq.seq_id,
            parent_id=parent,
            sample_index=child.req.sample_index,
            prompt_tokens=seq.num_prompt_tokens,
            cached_tokens=seq.num_cached_tokens or 0,
            output_tokens=seq.num_output_tokens,
            recomputed_tokens=seq.num_recomputed_tokens,
            num_preemptions=seq.num_preemptions,
            arrival_s=child.arrival_s,
            scheduled_s=child.scheduled_s if child.scheduled_s is not None else child.arrival_s,
            first_token_s=times[0],
            finish_s=times[-1],
            token_times_s=times,
            output_ids=tuple(seq.token_ids[seq.num_prompt_tokens :]),
        )

    def _drop_from_parent(self, parent: str, child_id: str) -> None:
        ids = self._parents.get(parent, [])
        if child_id in ids:
            ids.remove(child_id)
        if not ids:
            self._parents.pop(parent, None)

    def abort_request(self, request_id: str) -> bool:
        """Drop a child, or every child of a parent id, wherever it is; free its KV."""
        ids = list(self._parents.get(request_id, [])) or (
            [request_id] if request_id in self._children else []
        )
        for rid in ids:
            self._abort_child(self._children.pop(rid))
        return bool(ids)

    def _abort_child(self, child: _Child) -> None:
        seq, loop, admission = child.seq, self.loop, self.loop.admission
        self._drop_from_parent(child.req.parent_id or child.req.request_id, seq.seq_id)
        if seq in loop.waiting:
            loop.waiting.remove(seq)
        loop.running[:] = [s for s in loop.running if s is not seq]
        self.cache.release(seq, finished=False)
        seq.status = SeqStatus.FINISHED  # SGLang's batch drops finished requests
        if getattr(admission, "chunked", None) is seq:
            admission.chunked = None  # type: ignore[attr-defined]  # SGLang's chunked request
        batch = getattr(admission, "batch", None)
        if isinstance(batch, list) and seq in batch:
            batch.remove(seq)
        for name in ("_known_tokens", "_computed_at_preemption"):
            getattr(admission, name, {}).pop(seq.seq_id, None)
