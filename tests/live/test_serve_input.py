"""Issue 37 class 3 (server side): bad client input is HTTP 4xx with an OpenAI-style error body.

Never a 500 and never a traceback in the server's log: JSON nested 100,000 deep, lone surrogates
in text fields, malformed `since` on the step log, values whose repr would be huge, unknown
routes and methods. The server keeps serving after each.
"""

from __future__ import annotations

import pytest

from tests.serve_process import TEXT, ServeProcess, assert_error_body


@pytest.fixture(scope="module")
def server():
    with ServeProcess(["engine=radix", *TEXT]) as running:
        yield running
    assert "Traceback" not in running.log(), running.log()


def post(server, body: bytes | str):
    raw = body.encode("utf-8", "surrogatepass") if isinstance(body, str) else body
    with server.client() as client:
        return client.post(
            "/v1/completions", content=raw, headers={"content-type": "application/json"}
        )


BODIES = {
    "nested_lists": ("[" * 100_000 + "]" * 100_000, None),
    "nested_objects": ('{"a":' * 100_000 + "1" + "}" * 100_000, None),
    "nested_in_a_field": ('{"prompt": "hi", "x": ' + "[" * 100_000 + "]" * 100_000 + "}", None),
    "nested_best_of": (
        '{"prompt": "hi", "best_of": '
        + "[" * 900
        + "]" * 900
        + ', "n": '
        + "[" * 900
        + "]" * 900
        + "}",
        "",
    ),
    "surrogate_prompt": ('{"prompt": "abc \\ud800 def", "max_tokens": 2}', "prompt"),
    "surrogate_prompt_list": ('{"prompt": ["\\udfff"], "max_tokens": 2}', "prompt"),
    "surrogate_model": ('{"prompt": "hi", "model": "\\ud83d"}', "model"),
    "surrogate_salt": ('{"prompt": "hi", "cache_salt": "\\udc00"}', "cache_salt"),
    "invalid_utf8": (b'{"prompt": "\xff\xfe"}', None),
    "not_an_object": ("[1, 2, 3]", None),
    "huge_integer": ('{"prompt": [1, 2], "max_tokens": ' + "9" * 5000 + "}", None),
    "huge_value_quoted": (
        '{"prompt": [1, 2], "max_tokens": [' + "1," * 200_000 + "1]}",
        "max_tokens",
    ),
    "nan_temperature": ('{"prompt": [1, 2], "temperature": NaN}', "temperature"),
    "ids_past_the_context": ('{"prompt": [' + "5," * 100_000 + "5]}", "prompt"),
    "negative_id": ('{"prompt": [1, -2, 3]}', "prompt"),
    "empty": ("", None),
}


@pytest.mark.parametrize("name", sorted(BODIES))
def test_bad_bodies_are_400_with_an_error_body(server, name):
    body, param = BODIES[name]
    error = assert_error_body(post(server, body), 400, param)
    assert len(error["message"]) < 1000  # a client's value is quoted, never all of it


def test_a_surrogate_pair_is_text(server):
    reply = post(server, '{"prompt": "smile \\ud83d\\ude00", "max_tokens": 2}')
    assert reply.status_code == 200, reply.text


@pytest.mark.parametrize(
    "since", ["abc", "-1", "1.5", "²", "١٢٣", "9" * 5000, "", " 1", "0x10", "%ff", "1e3"]
)
def test_malformed_since_on_the_step_log_is_400(server, since):
    with server.client() as client:
        reply = client.get("/step_log", params={"since": since})
    error = assert_error_body(reply, 400, "since")
    assert len(error["message"]) < 1000


def test_a_good_since_reads_the_step_log(server):
    with server.client() as client:
        assert client.get("/step_log", params={"since": "0"}).status_code == 200
        assert client.get("/step_log?since=999999999999999999").json() == {"steps": []}


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [("GET", "/nope", 404), ("GET", "/v1/completions", 405), ("DELETE", "/health", 405)],
)
def test_unknown_routes_and_methods_get_an_error_body(server, method, path, status):
    with server.client() as client:
        assert_error_body(client.request(method, path), status)


def test_the_server_still_serves_after_the_bad_input(server):
    with server.client() as client:
        reply = client.post("/v1/completions", json={"prompt": "Hello there", "max_tokens": 3})
        assert reply.status_code == 200, reply.text
        assert client.get("/health").status_code == 200


def test_an_unknown_model_name_of_a_megabyte_is_quoted_short(server):
    with server.client() as client:
        reply = client.post("/v1/completions", json={"prompt": "hi", "model": "m" * (1 << 20)})
    error = assert_error_body(reply, 404, "model")
    assert len(error["message"]) < 1000
