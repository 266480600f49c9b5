"""Issue 48: a KV-event endpoint the server could not bind, or whose binding would delete a file
(ZMQ unlinks an ipc path before binding), is refused with one line before anything is built."""

from __future__ import annotations

import socket

import pytest

from harness.builtin_server.kv_publisher import check_endpoint, check_endpoint_free
from harness.config.errors import BadInput
from tests.serve_process import TINY, assert_one_error_line, run_serve


@pytest.mark.parametrize(
    ("path", "needle"),
    [
        ("", "the path is empty"),
        ("/no/such/folder/kv.sock", "does not exist"),
        ("/tmp/" + "x" * 200, "at most 107 bytes"),
    ],
)
def test_an_ipc_path_that_cannot_be_a_socket_is_refused(path, needle):
    with pytest.raises(BadInput, match=needle):
        check_endpoint(f"ipc://{path}")


def test_an_ipc_path_naming_a_file_is_refused_and_the_file_kept(tmp_path):
    victim = tmp_path / "notes.txt"
    victim.write_text("keep me")
    with pytest.raises(BadInput, match="exists and is not a socket; binding would delete it"):
        check_endpoint(f"ipc://{victim}")
    with pytest.raises(BadInput, match="is not a socket"):
        check_endpoint(f"ipc://{tmp_path}")  # a folder
    assert victim.read_text() == "keep me"


def test_a_stale_socket_and_a_new_path_are_accepted(tmp_path):
    check_endpoint(f"ipc://{tmp_path}/new.sock")
    stale = tmp_path / "stale.sock"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(stale))  # left behind by a killed server
    check_endpoint(f"ipc://{stale}")


def test_a_taken_port_or_the_http_port_is_refused():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(BadInput, match=f"cannot listen on 127.0.0.1:{port}"):
            check_endpoint_free(f"tcp://127.0.0.1:{port}", 8000)
    with pytest.raises(BadInput, match="the server's own HTTP port"):
        check_endpoint_free("tcp://127.0.0.1:8123", 8123)
    check_endpoint_free("ipc:///tmp/x.sock", 8000)  # nothing to probe for a path


def test_the_server_refuses_them_in_one_line_and_deletes_nothing(tmp_path):
    victim = tmp_path / "notes.txt"
    victim.write_text("keep me")
    done = run_serve(["engine=apc", *TINY, f"kv_events_endpoint=ipc://{victim}"], timeout_s=120)
    assert_one_error_line(done, "exists and is not a socket")
    assert victim.read_text() == "keep me"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        endpoint = f"kv_events_endpoint=tcp://127.0.0.1:{port}"
        done = run_serve(["engine=apc", *TINY, endpoint], timeout_s=120)
    assert_one_error_line(done, f"cannot listen on 127.0.0.1:{port}")
