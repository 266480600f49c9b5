"""Round robin's worker order learned, not assumed: parsed from vllm-router's start line, learned
slot by slot from sglang-router's decisions, guesses told apart from learned predictions."""

from __future__ import annotations

import itertools

from harness.fleet.policies import FleetView, Routed
from harness.routers.learned import LearnedRoundRobin, order_from_log

URLS = ["http://127.0.0.1:35391", "http://127.0.0.1:40001", "http://127.0.0.1:45105"]
LINE = (
    "\x1b[2m2026-12-06 05:22:46\x1b[0m INFO vllm_router_rs::server: src/server.rs:1192: "
    'Router ready | workers: ["http://127.0.0.1:45105", "http://127.0.0.1:35391", '
    '"http://127.0.0.1:40001"]'
)


def test_the_order_comes_from_vllm_routers_start_line():
    assert order_from_log(f"starting\n{LINE}\nmore", URLS) == [2, 0, 1]
    assert order_from_log("no such line", URLS) is None
    assert order_from_log(LINE, URLS[:2]) is None  # other workers than ours: not trusted


def _run(twin: LearnedRoundRobin, router: list[int]) -> list[tuple[int, bool]]:
    """(predicted, learned) per decision of a router picking `router` in turn."""
    out = []
    for actual in router:
        certain = twin.certain
        out.append((twin.choose(Routed("r", "p"), FleetView([0] * twin.n)), certain))
        twin.learn(actual)
    return out


def test_a_known_order_predicts_every_decision_from_any_first_pick():
    for order in itertools.permutations(range(3)):
        for start in range(3):
            router = [order[(start + k) % 3] for k in range(9)]
            twin = LearnedRoundRobin(3, list(order))
            twin.learn(router[0])  # the warm-up: where in its cycle the router starts
            got = _run(twin, router[1:])
            assert all(learned for _, learned in got)
            assert [p for p, _ in got] == router[1:]


def test_an_unknown_order_is_learned_from_the_decisions_with_one_guess_at_3_workers():
    for order in itertools.permutations(range(3)):
        router = [order[k % 3] for k in range(12)]
        twin = LearnedRoundRobin(3)
        twin.learn(router[0])  # the warm-up
        got = _run(twin, router[1:])
        guesses = [(p, a) for (p, learned), a in zip(got, router[1:]) if not learned]
        assert len(guesses) == 1  # the second slot; the third follows from the other two
        assert all(p == a for (p, learned), a in zip(got, router[1:]) if learned)
        assert twin.facts() == {"worker_order": list(order), "order_source": "decisions"}
