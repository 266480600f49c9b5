"""A start-up signal is raised only where unwinding is safe, and held until then.

CI saw three endings of an interrupted start that were not "one line, exit 130": SIGABRT (-6)
when the KeyboardInterrupt surfaced in torch's C++ initialisation, death by SIGINT (-2) with
nothing printed when it surfaced in Python code C code had run, and an omegaconf traceback when it
broke a config mid-update. harness/config/startup_signals.py raises only when every frame on the
stack is the project's or the standard library's, no import running.
"""

from __future__ import annotations

import importlib
import signal
import sys
import threading
import time
from types import FrameType

import pytest

from harness.config import startup_signals
from harness.config.startup_signals import (
    OWN_ROOTS,
    StartupInterrupted,
    hold_startup_signals,
    raise_held,
    safe_to_raise,
)


def _frame_in_a_thread(target) -> FrameType:
    """The frame `target` runs in, on a fresh thread (whose stack is threading's, then target's)."""
    seen: list[FrameType] = []
    thread = threading.Thread(target=lambda: seen.append(target()))
    thread.start()
    thread.join()
    return seen[0]


def _own_frame() -> FrameType:
    return sys._getframe()


def test_a_stack_of_own_and_standard_library_code_is_safe():
    assert safe_to_raise(_frame_in_a_thread(_own_frame), own_roots=(__file__,))


def test_the_default_roots_are_the_three_packages():
    assert {root.rsplit("/", 1)[-1] for root in OWN_ROOTS} == {"harness", "engines", "workloads"}


def test_a_frame_inside_an_import_is_not_safe(tmp_path, monkeypatch):
    (tmp_path / "frame_probe_mod.py").write_text("import sys\nFRAME = sys._getframe()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        module = importlib.import_module("frame_probe_mod")
    finally:
        sys.modules.pop("frame_probe_mod", None)
    own = (__file__, str(tmp_path))  # the module is "own": only the import makes it unsafe
    assert not safe_to_raise(module.FRAME, own_roots=own)


def test_a_third_party_frame_anywhere_on_the_stack_is_not_safe():
    import pytest as third_party

    # pytest's own frames (site-packages) are below this test's frame
    assert third_party.__file__ and "site-packages" in third_party.__file__
    assert not safe_to_raise(sys._getframe(), own_roots=(__file__,))


def test_code_made_by_exec_is_not_safe():
    frame = _frame_in_a_thread(lambda: eval("__import__('sys')._getframe()"))
    assert not safe_to_raise(frame, own_roots=(__file__,))


@pytest.fixture
def startup_handlers():
    """The start-up handlers installed in this process, and everything put back afterwards."""
    previous = {sig: signal.getsignal(sig) for sig in (*startup_signals.SIGNALS, signal.SIGALRM)}
    hold_startup_signals()
    yield
    signal.setitimer(signal.ITIMER_REAL, 0)
    startup_signals._held.clear()
    for sig, handler in previous.items():
        signal.signal(sig, handler)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_under_third_party_frames_is_held_then_raised_at_a_safe_point(
    startup_handlers, sig
):
    signal.raise_signal(sig)  # this test runs under pytest's frames: never a safe stack
    deadline = time.monotonic() + 10 * startup_signals.CHECK_S
    while time.monotonic() < deadline:  # Python code, through several re-checks
        pass
    with pytest.raises(StartupInterrupted, match=signal.Signals(sig).name):
        raise_held()
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    assert signal.getsignal(signal.SIGALRM) is signal.SIG_IGN  # a late SIGALRM raises no second
    raise_held()  # and once raised, nothing is held


def test_nothing_held_raises_nothing(startup_handlers):
    raise_held()
