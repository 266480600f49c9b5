"""Whether a scheduler design could ever admit a request, checked before the run starts.

The KV pool must hold a request's prompt and output (Engine.check_fits); a design may want more
free tokens than that to admit it at all (SGLang's prefill adder keeps one page and one token of
headroom). A request past that need would wait forever and fail mid-run; it is refused up front
as a CapacityError instead, the same class of bad input under every scheduler.
"""

from __future__ import annotations

from engines.errors import BadInput


def admission_problem(
    admission: object, request_id: str, prompt_len: int, max_new_tokens: int, capacity: int
) -> None:
    """Raise BadInput when `admission` (a scheduler) can never admit the request into `capacity`
    KV tokens."""
    need_of = getattr(admission, "lone_admission_need", None)  # designs without headroom lack it
    if need_of is None:
        return
    need = need_of(prompt_len, max_new_tokens)
    if need > capacity:
        raise BadInput(
            f"request {request_id} needs {prompt_len + max_new_tokens} KV tokens (prompt "
            f"{prompt_len} + output {max_new_tokens}) and the SGLang scheduler admits it only "
            f"with {need} free, but engine.kv_capacity_tokens is {capacity}"
        )
