"""The fleet's bound (workloads/bounds.py ceiling_hit_tokens): an order-free ceiling that no
router, scheduler order or capacity can beat, on hand-made streams where arrival order is not
the best order, where a reply or an n > 1 prompt is computed outside the counted prefills."""

from __future__ import annotations

from workloads.bounds import ceiling_hit_rate, ideal_hit_rate
from workloads.request import Request

P = list(range(100, 116))  # one 16-token block
Q = list(range(200, 216))


def _req(rid: str, prompt: list[int], **kw) -> Request:
    return Request(request_id=rid, prompt_ids=tuple(prompt), output_ids=(1, 2, 3), **kw)


def test_the_ceiling_allows_an_engine_to_prefill_a_later_arrival_first():
    # arrival order: P+Q then P. The ideal in that order hits nothing (P alone may hit only
    # within its first 15 tokens); an engine that prefills P first lets P+Q hit 16 tokens.
    reqs = [_req("a", P + Q), _req("b", P)]
    assert ideal_hit_rate(reqs, [16]).bounds[16].hit_tokens == 0
    assert ceiling_hit_rate(reqs, 16) == 16 / 48


def test_every_distinct_hittable_block_is_computed_once():
    # 3 prompts sharing P: the first computes P, the other two hit it; unique tails never hit
    reqs = [_req(f"r{i}", P + [300 + i] * 17) for i in range(3)]
    assert ceiling_hit_rate(reqs, 16) == 2 * 16 / (3 * 33)
    assert ceiling_hit_rate(reqs, 16) == ideal_hit_rate(reqs, [16]).by_granularity[16]


def test_a_chained_reply_and_an_n_gt_1_prompt_are_free():
    # a follow-up turn naming its parent's reply hits the reply's blocks, computed by decoding
    reply = tuple(range(500, 533))
    first = Request(request_id="t0", prompt_ids=tuple(P), output_ids=reply, session_id="s")
    follow = _req("t1", P + list(reply[:-1]) + Q, after="t0", session_id="s")
    hits = ceiling_hit_rate([first, follow], 16) * (16 + 16 + 32 + 16)
    assert hits == 16 + 32  # P (computed by t0, its last block) and the two reply blocks
    # n > 1: SGLang may prefill the shared prompt once outside the counted samples, so every
    # sample may hit it (the arrival-order ideal counts a miss for the first)
    sampled = [_req("n", P + Q, n=4)]
    assert ceiling_hit_rate(sampled, 16) == 4 * 16 / (4 * 32)
    assert ideal_hit_rate(sampled, [16]).bounds[16].hit_tokens == 3 * 16
