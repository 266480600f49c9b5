"""The launcher's nonce survives the Hydra override that carries it back.

The README's live run passes `server.expect_nonce=<nonce>` on the command line; Hydra's override
grammar reads a bare token that looks like a number as one, so a hex nonce such as "8e984212"
reached the run as the float inf and the run refused its own server (CI's failure on 03d5539).
"""

from __future__ import annotations

from hydra.core.override_parser.overrides_parser import OverridesParser

from harness.live_server.launch import VllmLaunch, new_nonce


def _as_overridden(nonce: str) -> object:
    parser = OverridesParser.create()
    return parser.parse_override(f"server.expect_nonce={nonce}").value()


def test_a_bare_hex_nonce_could_come_back_as_a_number():
    assert _as_overridden("8e984212") == float("inf")  # why the nonce is not bare hex
    assert _as_overridden("12345e12") == 1.2345e16


def test_every_fresh_nonce_comes_back_as_the_same_string():
    for _ in range(5000):
        nonce = new_nonce()
        assert _as_overridden(nonce) == nonce


def test_the_served_name_carries_the_nonce():
    launch = VllmLaunch()
    assert launch.served_model_name.endswith("-" + launch.nonce)
    assert launch.nonce != VllmLaunch().nonce
