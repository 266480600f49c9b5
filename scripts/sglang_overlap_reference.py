"""SGLang 0.5.23's own Scheduler driven in-process on CPU, forward scripted (runs in .venv-sglang).

Upstream's `Scheduler` is built as its server builds it (tiny model with dummy weights, radix
cache, its policy, adder, batch formation and result processing) and runs its own event loop
(`event_loop_overlap`, or `event_loop_normal` with overlap off). Only the model runner's forward
(a zero logits row per request) and sampling (the request's scripted token at its position) are
replaced, and requests reach upstream's receiver at scripted loop iterations.

    .venv-sglang/bin/python scripts/sglang_overlap_reference.py < cases.json > results.json

Input: {"overlap", "chunk", "kv_tokens", "max_running", "page_size", "cases": [{"name",
"requests": [{"rid", "prompt", "output" (scripted tokens; their count is max_new_tokens, 0 for a
prefill-only request), "iteration" (received by that iteration) or "after" (a rid: received by
the first iteration after that request's finish was processed)}]}]}. Output: per case, each
request's cached tokens, output and retractions, and each launched batch (iteration, kind, rows).
Between cases the loop idles and the cache is flushed, as upstream's scripted runtime resets.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from array import array
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / ".models" / "llama-rand-smollm2"
FILLER = 7  # the token of a row whose sample upstream throws away (a chunk, a finished request)
MAX_ITERATIONS = 20000


class CaseDone(Exception):
    """Every request of the case finished and the loop idled: leave the event loop."""


def server_args(config: dict):
    from sglang.srt.server_args import ServerArgs

    return ServerArgs(
        model_path=str(MODEL),
        device="cpu",
        attention_backend="torch_native",
        sampling_backend="pytorch",
        grammar_backend="none",
        disable_cuda_graph=True,
        skip_tokenizer_init=True,
        skip_server_warmup=True,
        load_format="dummy",
        page_size=config.get("page_size", 1),
        max_total_tokens=config["kv_tokens"],
        chunked_prefill_size=config["chunk"],
        max_prefill_tokens=config.get("max_prefill_tokens", 16384),
        max_running_requests=config["max_running"],
        schedule_policy=config.get("policy", "fcfs"),
        disable_overlap_schedule=not config["overlap"],
        random_seed=0,
    )


class Script:
    """One case's arrivals and tokens, and what upstream's loop did with them."""

    def __init__(self, requests: list[dict]) -> None:
        self.specs = requests
        self.outputs = {s["rid"]: s["output"] for s in requests}
        self.prompt_lens = {s["rid"]: len(s["prompt"]) for s in requests}
        self.iteration = 0
        self.sent: set[str] = set()
        self.reqs: dict = {}  # rid -> upstream Req
        self.steps: list[dict] = []
        self.idle_receives = 0  # consecutive receives after an iteration that launched nothing

    def due(self) -> list[dict]:
        out = []
        for spec in self.specs:
            if spec["rid"] in self.sent:
                continue
            parent = spec.get("after")
            if parent is None:
                ready = spec["iteration"] <= self.iteration
            else:
                req = self.reqs.get(parent)
                ready = req is not None and req.finished()
            if ready:
                out.append(spec)
        return out

    def token(self, rid: str, seq_len: int) -> int:
        """The token a row samples: the script's entry at its output position (a row of seq_len
        tokens samples output index seq_len - prompt_len, a re-prefill after retraction too)."""
        k = seq_len - self.prompt_lens[rid]
        script = self.outputs[rid]
        return script[k] if 0 <= k < len(script) else FILLER


def tokenized(spec: dict):
    from sglang.srt.managers.io_struct import TokenizedGenerateReqInput
    from sglang.srt.sampling.sampling_params import SamplingParams

    # eos not ignored, as the twin's default (its budget then uses the new-token ratio); no
    # scripted token is an end-of-sequence id
    params = SamplingParams(max_new_tokens=len(spec["output"]), ignore_eos=False)
    params.normalize(None)  # the tokenizer manager's step (no stop strings here)
    return TokenizedGenerateReqInput(
        rid=spec["rid"],
        input_text=None,
        input_ids=array("q", spec["prompt"]),
        input_embeds=None,
        mm_inputs=None,
        token_type_ids=None,
        sampling_params=params,
        return_logprob=False,
        logprob_start_len=-1,
        top_logprobs_num=0,
        token_ids_logprob=None,
        stream=False,
    )


def build(config: dict):
    """Upstream's Scheduler with the model runner's forward and sampling scripted."""
    import torch
    from sglang.srt.layers.logits_processor import LogitsProcessorOutput
    from sglang.srt.managers.scheduler import Scheduler
    from sglang.srt.model_executor.model_runner import ModelRunner, ModelRunnerOutput
    from sglang.srt.runtime_context import SpawnRanks, publish
    from sglang.srt.server_args import PortArgs

    chosen: list[int] = []

    def forward(self, forward_batch, *args, **kwargs):
        logits = torch.zeros(len(forward_batch.seq_lens_cpu), self.model_config.vocab_size)
        return ModelRunnerOutput(LogitsProcessorOutput(next_token_logits=logits), False)

    def sample(self, logits_output, forward_batch):
        return torch.tensor(chosen, dtype=torch.int64)

    ModelRunner.forward = forward
    ModelRunner.sample = sample
    args = server_args(config)
    args.resolve_once()
    args.check_server_args()
    publish(args, role="scheduler", ranks=SpawnRanks(world_rank=0, dp_rank=None, gpu_id=0))
    return Scheduler(args, PortArgs.init_new(args)), chosen


def run_case(scheduler, chosen: list[int], requests: list[dict]) -> dict:
    script = Script(requests)

    def receive(local_reqs=None):
        if script.iteration > MAX_ITERATIONS:
            raise RuntimeError("the loop did not finish the case's requests")
        note_waiting()
        due = script.due()
        script.idle_receives = script.idle_receives + 1 if scheduler.last_batch is None else 0
        finished = all(r.finished() for r in script.reqs.values())
        everything_sent = not due and len(script.sent) == len(script.specs)
        if everything_sent and finished and script.idle_receives >= 2:  # on_idle ran last
            raise CaseDone
        script.iteration += 1
        script.sent.update(spec["rid"] for spec in due)
        return list(local_reqs or []) + [tokenized(spec) for spec in due]

    def note_waiting():
        for req in scheduler.waiting_queue:
            script.reqs.setdefault(req.rid, req)

    def run_batch(batch, *a, **k):
        for req in batch.reqs:  # admitted in the iteration that received them
            script.reqs.setdefault(req.rid, req)
        chosen[:] = [
            script.token(req.rid, n) for req, n in zip(batch.reqs, batch.seq_lens_cpu.tolist())
        ]
        extend = batch.forward_mode.is_extend()
        rows = [[r.rid, r.prefix_len, r.extend_len] if extend else [r.rid, 1] for r in batch.reqs]
        kind = "prefill" if extend else "decode"
        script.steps.append({"iteration": script.iteration - 1, "kind": kind, "rows": rows})
        return upstream_run_batch(batch, *a, **k)

    # The receiver is a frozen object: its class takes the script's arrivals.
    type(scheduler.request_receiver).recv_requests = lambda self, local_reqs=None: receive(
        local_reqs
    )
    upstream_run_batch = type(scheduler).run_batch.__get__(scheduler)
    scheduler.run_batch = run_batch
    with contextlib.suppress(CaseDone):
        scheduler.run_event_loop()  # upstream picks event_loop_overlap or event_loop_normal
    result = {
        "iterations": script.iteration,
        "requests": {
            rid: {
                "cached_tokens": req.cached_tokens,
                "output": list(req.output_ids),
                "retractions": req.retraction_count,
            }
            for rid, req in script.reqs.items()
        },
        "steps": script.steps,
    }
    if not scheduler.flush_cache():
        raise RuntimeError("the scheduler was not idle after the case")
    return result


def main() -> int:
    config = json.load(sys.stdin)
    scheduler, chosen = build(config)
    out = {
        "overlap": scheduler.enable_overlap,
        "cases": {c["name"]: run_case(scheduler, chosen, c["requests"]) for c in config["cases"]},
    }
    json.dump(out, sys.stdout)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("SGLANG_USE_CPU_ENGINE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    sys.exit(main())
