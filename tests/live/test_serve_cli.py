"""Issue 37 class 4 (server side) and the knob bounds left from round two: the command lines.

`python -m harness.builtin_server` refuses a device it cannot run on, a step log it cannot write, sizes
no machine holds, in one `error:` line and exit 2; SIGINT while it starts is one line and exit
130, never a traceback. `python -m harness` refuses hardware and model values no real part or
model has (a unit mix-up, an overflow) the same way, naming the unit it expected.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from tests.cli_util import harness
from tests.serve_process import (
    ROOT,
    TINY,
    assert_one_error_line,
    run_serve,
    serve_command,
    serve_env,
)


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


SERVE_CASES = {
    "device_meta": (["device=meta"], "device must be auto, cpu or cuda[:N], got 'meta'"),
    "device_mps": (["device=mps"], "device must be auto, cpu or cuda[:N]"),
    "step_log_missing_folder": (
        ["step_log=/nonexistent-prefixbench/steps.jsonl"],
        "step_log: the folder '/nonexistent-prefixbench' does not exist",
    ),
    "step_log_is_a_folder": (["step_log=/tmp"], "step_log: '/tmp' is not a file"),
    "request_log_missing_folder": (
        ["request_log=/nonexistent-prefixbench/requests.jsonl"],
        "request_log: the folder '/nonexistent-prefixbench' does not exist",
    ),
    "request_log_is_a_folder": (["request_log=/tmp"], "request_log: '/tmp' is not a file"),
    "kv_capacity": (["engine.kv_capacity_tokens=1000000000"], "engine.kv_capacity_tokens: "),
    "block_size": (
        ["engine.block_size=1073741824", "engine.kv_capacity_tokens=1073741824"],
        "this server needs an estimated",
    ),
    "context": (["model.max_position_embeddings=100000000"], "model.max_position_embeddings"),
    "step_log_size": (["step_log_size=1000000000"], "step_log_size must be an integer"),
    "max_body_bytes": (["max_body_bytes=1e12"], "max_body_bytes"),
    "body_timeout": (["body_timeout_s=0"], "body_timeout_s must be a positive finite number"),
}


@pytest.mark.parametrize("name", sorted(SERVE_CASES))
def test_serve_refuses_a_bad_command_line_in_one_line(name, capsys):
    """In-process (the command's own main()), as test_serve's command-line cases."""
    from harness.builtin_server.__main__ import main

    args, needle = SERVE_CASES[name]
    code = main([*TINY, *args])
    err = capsys.readouterr().err
    assert_one_error_line(subprocess.CompletedProcess([], code, "", err), needle)


@pytest.mark.skipif(_cuda(), reason="this machine has a CUDA device")
def test_serve_refuses_cuda_without_a_gpu():
    done = run_serve([*TINY[:1], "device=cuda"], timeout_s=60)
    assert_one_error_line(done, "device 'cuda' was asked for but no CUDA device is available")


@pytest.mark.parametrize("delay_s", [0.5, 2.0, 4.0])
def test_sigint_during_start_up_is_one_line_and_exit_130(delay_s):
    """SIGINT at three points of the start-up (imports, config, building the model)."""
    proc = subprocess.Popen(
        serve_command(["model=smollm2-rand", *TINY[1:], "port=0"]),
        cwd=ROOT,
        env=serve_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        time.sleep(delay_s)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "Traceback" not in err and "Traceback" not in out, err
    if "serving" in err:  # it had started: uvicorn's clean shutdown
        assert proc.returncode == 0, err
    else:
        assert proc.returncode == 130, err
        assert err.strip().splitlines() == ["interrupted while starting; nothing was served"]


# ------------------------------------------------- `python -m harness`: plausible hardware, model

SIM = ["executor=simulated", "decode=scripted", "hardware=h200_llama3_70b_fp8"]
RUN_CASES = {
    "peak_flops_in_tflops": (
        [*SIM, "hardware.peak_flops=989"],
        "hardware.peak_flops must be between 1e+09 and 1e+18 FLOP/s",
    ),
    "step_overhead_overflow": (
        [*SIM, "hardware.step_overhead_s=1e308"],
        "hardware.step_overhead_s must be between 0 and 10 seconds per step",
    ),
    "bandwidth_in_tb": ([*SIM, "hardware.memory_bandwidth=4.8"], "bytes/s"),
    "gpu_memory_in_gb": ([*SIM, "hardware.gpu_memory_bytes=141"], "bytes (141 GB is 1.41e11)"),
    "utilization_percent": ([*SIM, "hardware.flops_utilization=45"], "a fraction of peak_flops"),
    "vocab_simulated": (
        [
            "executor=simulated",
            "decode=scripted",
            "hardware=cpu_measured",
            "model.vocab_size=10000000000",
        ],
        "model.vocab_size must be between 2 and 16,777,216 tokens",
    ),
    "vocab_float": (["model.vocab_size=1e10"], "model.vocab_size"),
}


@pytest.mark.parametrize("name", sorted(RUN_CASES))
def test_implausible_knobs_are_one_line_naming_the_unit(name, tmp_path):
    args, needle = RUN_CASES[name]
    done = harness(args, tmp_path / "run", timeout=120)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr[-2000:]
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], lines
    assert not (tmp_path / "run").exists()  # refused before a run folder was made


def test_the_shipped_hardware_presets_are_plausible():
    from hydra import compose, initialize_config_dir

    from engines.simulate.cost_model import HardwareConfig
    from harness.config.plausible import check_hardware
    from harness.config.schema import CONF_DIR, to_schema

    names = sorted(p.stem for p in (CONF_DIR / "hardware").glob("*.yaml"))
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        for name in names:
            node = compose(config_name="config", overrides=[f"hardware={name}"]).hardware
            check_hardware(to_schema(node, HardwareConfig))
    assert len(names) >= 7 and os.sep not in names[0]
