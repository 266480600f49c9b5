"""`python -m harness.builtin_server engine=<apc|radix> [model=...] [port=...]`: serve one built-in engine.

The configuration is composed from conf/serve.yaml with the harness's groups (engine, model), so
every engine knob is an override (`engine.kv_capacity_tokens=8192`). Bad input is one `error: `
line and exit 2; SIGINT/SIGTERM stop the server cleanly (uvicorn lets in-flight requests finish
for `timeout_graceful_shutdown_s`, then the engine thread aborts the rest) and exit 0.
"""

from __future__ import annotations

import sys

from harness.config.errors import config_errors, describe

EXIT_OK, EXIT_BAD_INPUT = 0, 2


def main(argv: list[str]) -> int:
    from harness.builtin_server.server import check_bindable, compose_config, prepare, serve

    try:
        cfg = compose_config(argv)
        check_bindable(cfg.host, cfg.port)
        prepared = prepare(cfg)
    except config_errors() as exc:
        print(f"error: {describe(exc)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    serve(prepared)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
