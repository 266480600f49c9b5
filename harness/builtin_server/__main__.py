"""`python -m harness.builtin_server engine=<apc|radix> [model=...] [port=...]`: serve one built-in engine.

The configuration is composed from conf/serve.yaml with the harness's groups (engine, model), so
every engine knob is an override (`engine.kv_capacity_tokens=8192`). Bad input is one `error: `
line and exit 2; SIGINT/SIGTERM stop the server cleanly (uvicorn lets in-flight requests finish
for `timeout_graceful_shutdown_s`, then the engine thread aborts the rest) and exit 0. SIGINT
while the server is still starting (loading the model) is one line and exit 130: the signal is
held until it can be raised where unwinding is safe (harness/config/startup_signals.py).
"""

from __future__ import annotations

import logging
import os
import sys

EXIT_OK, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 2, 130


def main(argv: list[str]) -> int:
    try:
        prepared = _start(argv)
        if isinstance(prepared, int):
            return prepared
        from harness.builtin_server.server import serve

        serve(prepared)  # raises a held start-up signal before it prints that it serves
    except KeyboardInterrupt:  # Ctrl-C while importing torch or building the model
        print("interrupted while starting; nothing was served", file=sys.stderr)
        return EXIT_INTERRUPTED
    return EXIT_OK


def _start(argv: list[str]):
    """The prepared server, or the exit status of a bad command line."""
    from harness.builtin_server.kv_publisher import check_endpoint_free
    from harness.builtin_server.server import check_bindable, compose_config, prepare
    from harness.config.errors import config_errors, describe

    try:
        cfg = compose_config(argv)
        check_bindable(cfg.host, cfg.port)
        if cfg.kv_events_endpoint is not None:
            check_endpoint_free(cfg.kv_events_endpoint, cfg.port)
        return prepare(cfg)
    except config_errors() as exc:
        print(f"error: {describe(exc)}", file=sys.stderr)
        return EXIT_BAD_INPUT


if __name__ == "__main__":
    try:
        from harness.config.startup_signals import hold_startup_signals

        hold_startup_signals()  # the process's start-up only: main() also runs inside tests
        code = main(sys.argv[1:])
    except KeyboardInterrupt:  # before main's own handling (a stdlib-only import)
        print("interrupted while starting; nothing was served", file=sys.stderr)
        code = EXIT_INTERRUPTED
    # The server has stopped: its lifespan ended the engine thread and closed the step log, the
    # request log and the KV-event socket. The interpreter's own teardown would then spend 2-6 s
    # in torch's finalisers on a busy 2-core machine (measured: `import torch` alone exits 2-3 s
    # after its last line) only to free memory the OS takes back, and whoever stops a fleet of
    # servers waits for it. So the process ends here, its streams and log handlers flushed.
    sys.stdout.flush()
    sys.stderr.flush()
    logging.shutdown()
    os._exit(code)
