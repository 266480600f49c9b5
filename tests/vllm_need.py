"""The one rule for a test that needs the local vLLM-CPU server (scripts/setup_vllm.sh): when
it cannot start here, fail under CI=true (CI builds it) and skip elsewhere, naming the setup."""

from __future__ import annotations

import os

import pytest


def need_vllm() -> None:
    from harness.live_server.launch import missing

    problem = missing()
    if problem:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI needs the vLLM server: {problem}")
        pytest.skip(problem)
