"""vllm-router's kv_aware rule (0.1.17) as the routing twin predicts it: each worker's cost is the
prompt's tokens it would have to prefill (the prompt minus the leading blocks its KV events say it
holds), plus the new tokens of the requests already sent to it and not answered, plus a fixed
charge per such request; the cheapest worker wins, then the less loaded, then the first in the
router's own worker order (its start log). docs/fleet.md §5 says how it was read and fitted.
"""

from __future__ import annotations

from collections.abc import Sequence

from harness.fleet.policies import FleetView, Routed

# Tokens of work one request in flight adds to its worker's cost: fitted on vllm-router 0.1.17's
# decisions in bursts over built-in workers (24 to 34 fit a burst of 8; docs/fleet.md §5)
IN_FLIGHT_TOKENS = 32


class VllmKvAware:
    """The twin of vllm-router's kv_aware: `view.cached` is each worker's cached prefix of the
    request (harness/routers/kv_index.py), `view.loads` its requests in flight. A wave's picks
    leave their new tokens pending on their workers until `begin_wave` (the router learns a
    prefill is done only when it is answered)."""

    def __init__(
        self,
        num_workers: int,
        order: Sequence[int] | None = None,
        in_flight_tokens: int = IN_FLIGHT_TOKENS,
    ) -> None:
        self.n = num_workers
        self.order = list(order) if order is not None else list(range(num_workers))
        self.in_flight_tokens = in_flight_tokens
        self.pending = [0] * num_workers  # new tokens of this wave's requests, per worker

    def new_tokens(self, req: Routed, view: FleetView) -> list[int]:
        """Per worker, the prompt's tokens past the leading blocks it holds."""
        cached = view.cached if view.cached is not None else [0] * self.n
        return [len(req.prompt) - cached[i] for i in range(self.n)]

    def costs(self, req: Routed, view: FleetView) -> list[int]:
        """Each worker's cost for `req` in tokens."""
        new = self.new_tokens(req, view)
        charge = self.in_flight_tokens
        return [new[i] + self.pending[i] + charge * view.loads[i] for i in range(self.n)]

    def choose(self, req: Routed, view: FleetView) -> int:
        cost = self.costs(req, view)
        rank = {w: k for k, w in enumerate(self.order)}
        pick = min(range(self.n), key=lambda i: (cost[i], view.loads[i], rank.get(i, i)))
        self.pending[pick] += self.new_tokens(req, view)[pick]
        return pick

    def begin_wave(self) -> None:
        """The previous wave is answered: nothing of it is pending."""
        self.pending = [0] * self.n

    def reset(self) -> None:
        self.begin_wave()

    def facts(self) -> dict[str, object]:
        return {
            "worker_order": list(self.order),
            "in_flight_tokens": self.in_flight_tokens,
        }
