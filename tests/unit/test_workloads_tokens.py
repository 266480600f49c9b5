"""Token streams, the token space and the reserved warm-up stream."""

from __future__ import annotations

import numpy as np
import pytest

from workloads.tokens import (
    TokenSpace,
    distinct_heads,
    stream_key,
    stream_keys,
    token_block,
    token_ids,
    warmup_requests,
)

SPACE = TokenSpace(vocab_size=1000, first_ordinary_id=5)


def test_identical_keys_identical_tokens_distinct_keys_distinct():
    a = token_ids(SPACE, (0, "doc", 3), 64)
    assert np.array_equal(a, token_ids(SPACE, (0, "doc", 3), 64))
    assert not np.array_equal(a, token_ids(SPACE, (0, "doc", 4), 64))
    assert not np.array_equal(a, token_ids(SPACE, (1, "doc", 3), 64))
    assert not np.array_equal(a, token_ids(SPACE, (0, "question", 3), 64))
    # a longer draw of one stream extends the shorter one
    assert np.array_equal(token_ids(SPACE, (0, "doc", 3), 100)[:64], a)


def test_tokens_stay_in_the_workload_range():
    ids = token_ids(SPACE, (7, "x"), 20000)
    assert ids.min() >= SPACE.first_workload_id == 6 and ids.max() < SPACE.vocab_size
    assert SPACE.warmup_id not in ids
    assert len(np.unique(ids)) > 900  # spread over the whole range


def test_vectorised_keys_match_scalar_keys():
    hs = np.array([0, 1, 2, 10**9], dtype=np.uint64)
    assert stream_keys((3, "trace"), hs).tolist() == [stream_key(3, "trace", int(h)) for h in hs]
    rows = token_block(SPACE, stream_keys((3, "trace"), hs), 32)
    for row, h in zip(rows, hs.tolist()):
        assert np.array_equal(row, token_ids(SPACE, (3, "trace", h), 32))


def test_head_forces_first_token_and_heads_are_distinct():
    heads = distinct_heads(SPACE, 500, 0, "g")
    assert len(set(heads.tolist())) == 500 and heads.min() >= SPACE.first_workload_id
    assert token_ids(SPACE, (0, "a"), 8, head=int(heads[3]))[0] == heads[3]
    with pytest.raises(ValueError, match="distinct first tokens"):
        distinct_heads(SPACE, SPACE.num_workload_ids + 1, 0, "g")


def test_token_space_needs_ordinary_ids():
    with pytest.raises(ValueError, match="at least 2 ordinary ids"):
        TokenSpace(vocab_size=10, first_ordinary_id=9)


def test_warmup_requests_start_with_the_reserved_id():
    reqs = warmup_requests(SPACE, seed=0, num=3, prompt_len=16, output_len=2)
    assert [len(r.prompt_ids) for r in reqs] == [16] * 3 and all(r.output_len == 2 for r in reqs)
    assert all(r.prompt_ids[0] == SPACE.warmup_id for r in reqs)
    assert all(SPACE.warmup_id not in r.prompt_ids[1:] for r in reqs)
    assert reqs == warmup_requests(SPACE, seed=0, num=3, prompt_len=16, output_len=2)
    assert len({r.request_id for r in reqs}) == 3
