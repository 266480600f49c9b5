"""A reply's cached tokens per tier, as the server target reads them (harness/live_server/
replies.py): vLLM's `local_cached_tokens` / `external_cached_tokens` beside `cached_tokens`,
else SGLang's `sglext.cached_tokens_details` {device, host}; parts that do not add up to the
cached tokens are a bad reply, never a row. With a storage tier, the built-in server's fields
(harness/builtin_server/protocol.py) under both flavours: vLLM's external part is host + storage,
SGLang's details carry `storage` and are read per tier."""

from __future__ import annotations

import re

import pytest

from harness.builtin_server import protocol as api
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


# A storage hit under both flavours, as the built-in server writes it (harness/builtin_server/
# protocol.py) and the server target reads it back: 300 prompt tokens, 16 on the device, 100
# from the host tier and 160 from storage.
CACHED, HOST, STORAGE = 276, 100, 160


def test_vllm_flavour_storage_hit_is_external_and_read_as_host():
    body = api.usage(300, 4, CACHED, HOST, STORAGE)
    assert body["prompt_tokens_details"] == {"cached_tokens": CACHED, "local_cached_tokens": 16,
                                             "external_cached_tokens": HOST + STORAGE}  # fmt: skip
    got = usage(body, 300, 4, 1)
    # vLLM reports one external hit for both tiers: no storage part, the host part is both
    assert (got.cached_tokens, got.host_cached_tokens, got.storage_cached_tokens) == (
        CACHED, HOST + STORAGE, None)  # fmt: skip


def test_sglang_flavour_storage_hit_is_read_per_tier():
    sglext = api.cached_tokens_details(CACHED, HOST, STORAGE)
    assert sglext == {"cached_tokens_details": {"device": 16, "host": HOST, "storage": STORAGE,
                                                "storage_backend": "HiCacheFile"}}  # fmt: skip
    # the built-in server sends vLLM's split beside SGLang's: the two must agree
    got = usage(api.usage(300, 4, CACHED, HOST, STORAGE), 300, 4, 1, sglext)
    assert (got.host_cached_tokens, got.storage_cached_tokens) == (HOST, STORAGE)
    got = usage(_usage({"cached_tokens": CACHED}), 300, 4, 1, sglext)  # SGLang's own reply
    assert (got.host_cached_tokens, got.storage_cached_tokens) == (HOST, STORAGE)


def test_storage_fields_only_with_a_storage_tier():
    without = api.cached_tokens_details(CACHED, HOST)
    assert without == {"cached_tokens_details": {"device": CACHED - HOST, "host": HOST}}
    with_zero = api.cached_tokens_details(CACHED, HOST, 0)["cached_tokens_details"]
    assert (with_zero["storage"], with_zero["storage_backend"]) == (0, "HiCacheFile")
    assert api.cached_tokens_details(0, 0, 0) is None  # nothing cached: SGLang leaves it out
    assert usage(_usage({"cached_tokens": CACHED}), 300, 4, 1,
                 {"cached_tokens_details": without}).storage_cached_tokens is None  # fmt: skip


@pytest.mark.parametrize(
    ("details", "found", "message"),
    [
        ({"cached_tokens": 64}, {"device": 1, "host": 2, "storage": 3},
         "device 1 + host 2 + storage 3 is not cached_tokens 64"),
        ({"cached_tokens": 64}, {"host": 40, "storage": 30},
         "host 40 + storage 30 is more than 64"),
        ({"cached_tokens": 64}, {"device": 64, "storage": 0}, "storage 0 without host"),
        ({"cached_tokens": 64, "external_cached_tokens": 48},
         {"device": 24, "host": 20, "storage": 20},
         "external_cached_tokens 48 is not sglext.cached_tokens_details's host 20 + storage 20"),
    ],
)  # fmt: skip
def test_storage_parts_that_do_not_add_up_are_refused(details, found, message):
    with pytest.raises(BadReply, match=re.escape(message)):
        usage(_usage(details), 300, 4, 1, {"cached_tokens_details": found})
