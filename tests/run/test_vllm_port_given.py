"""A vLLM launch on a port given by number is refused, in one line, when another process holds
that port: the launcher never swaps a port the user chose (only port 0, any free one, moves on;
tests/live/test_vllm_port_taken.py). Refused before any process starts."""

from __future__ import annotations

import socket

import pytest

from harness.live_server.launch import PortBusy, VllmLaunch, start_vllm


def test_a_port_given_by_number_is_refused_not_swapped():
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        with pytest.raises(PortBusy, match=f"port {port} on 127.0.0.1 is already in use"):
            start_vllm(VllmLaunch(port=port))
