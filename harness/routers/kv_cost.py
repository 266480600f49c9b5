"""vllm-router's kv_aware rule (0.1.17) as the routing twin predicts it: each worker's cost is the
work it would have queued, the prompt's tokens it would prefill (the prompt minus the leading
blocks its KV events say it holds) plus the new tokens of its requests still waiting for their
first token, multiplied by one plus its requests in flight (sent and not answered, decoding ones
included); the cheapest worker wins, a tie the first in the router's own worker order (its start
log). Read from the router's debug log, decision by decision (docs/fleet.md §5, *kv_aware's load
term*): 0.1.17's source is not public; its symbols name a multiplicative scorer and per-worker
counters of prefill requests, their prefill tokens and decoding requests.
"""

from __future__ import annotations

from collections.abc import Sequence

from harness.fleet.policies import FleetView, Routed


def worker_cost(new_tokens: int, pending_tokens: int, in_flight: int) -> int:
    """One worker's cost for a request: its prefill work queued, scaled by its requests in
    flight (a decoding request weighs as much as one still in prefill)."""
    return (new_tokens + pending_tokens) * (1 + in_flight)


class VllmKvAware:
    """The twin of vllm-router's kv_aware: `view.cached` is each worker's cached prefix of the
    request (harness/routers/kv_index.py), `view.loads` its requests in flight. A wave's picks
    leave their new tokens pending on their workers until `begin_wave`: a wave is sent at once,
    so none of its requests has its first token back while the rest are routed (the router
    stops counting a request's prefill tokens at its first token, its request at its answer)."""

    def __init__(self, num_workers: int, order: Sequence[int] | None = None) -> None:
        self.n = num_workers
        self.order = list(order) if order is not None else list(range(num_workers))
        self.pending = [0] * num_workers  # new tokens of this wave's requests, per worker

    def new_tokens(self, req: Routed, view: FleetView) -> list[int]:
        """Per worker, the prompt's tokens past the leading blocks it holds."""
        cached = view.cached if view.cached is not None else [0] * self.n
        return [len(req.prompt) - cached[i] for i in range(self.n)]

    def costs(self, req: Routed, view: FleetView) -> list[int]:
        """Each worker's cost for `req` in tokens."""
        new = self.new_tokens(req, view)
        return [worker_cost(new[i], self.pending[i], view.loads[i]) for i in range(self.n)]

    def choose(self, req: Routed, view: FleetView) -> int:
        cost = self.costs(req, view)
        rank = {w: k for k, w in enumerate(self.order)}
        # a tie goes by the router's order alone, even to the more loaded worker (measured)
        pick = min(range(self.n), key=lambda i: (cost[i], rank.get(i, i)))
        self.pending[pick] += self.new_tokens(req, view)[pick]
        return pick

    def begin_wave(self) -> None:
        """The previous wave is answered: nothing of it is pending."""
        self.pending = [0] * self.n

    def reset(self) -> None:
        self.begin_wave()

    def facts(self) -> dict[str, object]:
        return {"worker_order": list(self.order), "load_rule": "(new + pending) x (1 + in flight)"}
