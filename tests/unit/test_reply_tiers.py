"""A reply's cached tokens per tier, as the server target reads them (harness/live_server/
replies.py): vLLM's `local_cached_tokens` / `external_cached_tokens` beside `cached_tokens`,
else SGLang's `sglext.cached_tokens_details` {device, host}; parts that do not add up to the
cached tokens are a bad reply, never a row."""

from __future__ import annotations

import re

import pytest

from harness.live_server.replies import BadReply, usage


def _usage(details: dict) -> dict:
    return {"prompt_tokens": 300, "completion_tokens": 4, "prompt_tokens_details": details}


def test_vllm_external_tokens_are_the_host_part():
    got = usage(_usage({"cached_tokens": 288, "local_cached_tokens": 0,
                        "external_cached_tokens": 288}), 300, 4, 1)  # fmt: skip
    assert (got.cached_tokens, got.host_cached_tokens) == (288, 288)


def test_sglang_details_are_read_when_vllm_has_none():
    sglext = {"cached_tokens_details": {"device": 16, "host": 283}}
    got = usage(_usage({"cached_tokens": 299}), 300, 4, 1, sglext)
    assert (got.cached_tokens, got.host_cached_tokens) == (299, 283)


def test_no_split_is_no_host_part():
    got = usage(_usage({"cached_tokens": 64}), 300, 4, 1)
    assert got.host_cached_tokens is None
    assert usage(_usage({"cached_tokens": 64}), 300, 4, 1, {}).host_cached_tokens is None


@pytest.mark.parametrize(
    ("details", "sglext", "message"),
    [
        ({"cached_tokens": 64, "local_cached_tokens": 32, "external_cached_tokens": 16}, None,
         "local_cached_tokens 32 + external_cached_tokens 16 is not cached_tokens 64"),
        ({"cached_tokens": 64, "external_cached_tokens": 80}, None,
         "external_cached_tokens 80 is more than cached_tokens 64"),
        ({"cached_tokens": 64}, {"cached_tokens_details": {"device": 1, "host": 2}},
         "device 1 + host 2 is not cached_tokens 64"),
        ({"cached_tokens": 64}, {"cached_tokens_details": {"host": -1}},
         "sglext.cached_tokens_details.host must be between"),
        ({"cached_tokens": 64}, {"cached_tokens_details": [1]},
         "sglext.cached_tokens_details must be a JSON object"),
    ],
)  # fmt: skip
def test_parts_that_do_not_add_up_are_refused(details, sglext, message):
    with pytest.raises(BadReply, match=re.escape(message)):
        usage(_usage(details), 300, 4, 1, sglext)
