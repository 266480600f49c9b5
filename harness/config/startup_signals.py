"""SIGINT/SIGTERM while a command starts (imports, composing its config, building a model): raised
only where unwinding is safe, held otherwise.

A KeyboardInterrupt raised wherever the signal happens to land broke a start-up three ways, each
seen in CI or in a loop of interrupted starts under load:
- inside torch's C++ initialisation it cannot unwind: pybind11's `error_already_set` reaches a
  noexcept path and the process aborts (SIGABRT, exit -6);
- inside Python code that C code ran through `PyRun_String` it sets CPython's "unhandled
  interrupt" flag, and the process later kills itself with SIGINT (exit -2), having printed nothing;
- inside omegaconf's flag context managers it leaves a config half-updated, which surfaces as an
  AttributeError traceback or a bogus config error.

So the start-up handler raises only when every frame on the main thread's stack is the project's
own code or the standard library's, no import running (`safe_to_raise`). Otherwise it holds the
signal and looks again every CHECK_S seconds (SIGALRM) until the stack is safe; an entry point
also calls `raise_held` at its own safe points, and once when it installs its run-time handlers.
This module imports only the standard library: it is installed before anything heavy is imported.
"""

from __future__ import annotations

import signal
import sysconfig
from pathlib import Path
from types import FrameType

CHECK_S = 0.02  # how soon a held signal looks again for a safe stack
SIGNALS = (signal.SIGINT, signal.SIGTERM)
# The project's packages, as imported and with links resolved (a checkout or an installed wheel).
OWN_ROOTS = tuple(
    {
        str(root / name)
        for root in (Path(__file__).parents[2], Path(__file__).resolve().parents[2])
        for name in ("harness", "engines", "workloads")
    }
)
_STDLIB = str(Path(sysconfig.get_paths()["stdlib"]).resolve())
_THIRD_PARTY_DIRS = ("site-packages", "dist-packages")
_SAFE_FROZEN = "<frozen runpy>"  # `python -m` runs the entry point under runpy's frames

_held: list[str] = []  # the name of a signal held until the stack is safe


class StartupInterrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM before the command's own run-time handling is in place."""


def hold_startup_signals() -> None:
    """Install the start-up handler for SIGINT and SIGTERM (the main thread, first thing)."""
    for sig in SIGNALS:
        signal.signal(sig, _on_startup_signal)


def raise_held() -> None:
    """Raise a held start-up signal now: the caller is at a point where unwinding is safe."""
    if _held:
        _raise()


def safe_to_raise(frame: FrameType | None, own_roots: tuple[str, ...] = OWN_ROOTS) -> bool:
    """Whether an exception raised in `frame` unwinds only through own or standard-library code."""
    while frame is not None:
        if not _safe_file(frame.f_code.co_filename, own_roots):
            return False
        frame = frame.f_back
    return True


def _safe_file(filename: str, own_roots: tuple[str, ...]) -> bool:
    if filename == _SAFE_FROZEN:
        return True
    if filename.startswith("<"):  # an import's frozen bootstrap, or code made by exec
        return False
    if filename.startswith(own_roots):
        return True
    parts = Path(filename).parts
    return filename.startswith(_STDLIB) and not any(d in parts for d in _THIRD_PARTY_DIRS)


def _on_startup_signal(signum: int, frame: FrameType | None) -> None:
    if not _held:  # a second signal while one is held changes nothing
        _held.append(signal.Signals(signum).name)
    signal.signal(signal.SIGALRM, _look_again)
    _look_again(signum, frame)


def _look_again(signum: int, frame: FrameType | None) -> None:
    if not safe_to_raise(frame):
        signal.setitimer(signal.ITIMER_REAL, CHECK_S)
        return
    _raise()


def _raise() -> None:
    # The timer stops and its handler goes: a SIGALRM already delivered would otherwise run the
    # check once more and raise a second time, inside the entry point's `except`. (Ignored, not
    # default: SIGALRM's default action ends the process.)
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGALRM, signal.SIG_IGN)
    name = _held.pop()
    raise StartupInterrupted(name)
