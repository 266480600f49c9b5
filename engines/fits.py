"""Whether a scheduler design could ever admit a request, checked before the run starts.

The KV pool must hold a request's prompt and output (Engine.check_fits); a design may want more
free tokens than that to admit it at all (SGLang's prefill adder keeps one page and one token of
headroom). A request past that need would wait forever and fail mid-run; it is refused up front
as a CapacityError instead, the same class of bad input under every scheduler.
"""

from __future__ import annotations

from engines.errors import BadInput
from engines.request import GenerationRequest


def admission_problem(admission: object, req: GenerationRequest, capacity: int) -> None:
    """Raise BadInput when `admission` (a scheduler) can never admit `req` into `capacity` tokens."""
    need_of = getattr(admission, "lone_admission_need", None)  # designs without headroom lack it
    if need_of is None:
        return
    prompt_len = len(req.prompt_ids)
    need = need_of(prompt_len, req.max_new_tokens)
    if need > capacity:
        raise BadInput(
            f"request {req.request_id} needs {prompt_len + req.max_new_tokens} KV tokens (prompt "
            f"{prompt_len} + output {req.max_new_tokens}) and the SGLang scheduler admits it only "
            f"with {need} free, but engine.kv_capacity_tokens is {capacity}"
        )
