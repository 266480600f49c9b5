"""The export formats, registered in one place: each turns one finished run into the files it
writes (name relative to --out, text). br0.2: one Benchmark Report per run
(harness/export/br02.py); mooncake and bailian: the run's workload as a trace
(harness/export/traces.py)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import NamedTuple

from harness.export.run_view import RunView
from harness.results.json_safe import json_safe
from workloads.registry import Registry


class Format(NamedTuple):
    suffix: str  # file name ending after the run's stem
    render: Callable[[RunView], str]
    validates: bool  # checked with llmd-benchmark-report before writing


def _br02(run: RunView) -> str:
    from harness.export.br02 import br02_document

    return json.dumps(json_safe(br02_document(run)), indent=2, allow_nan=False) + "\n"


def _trace(kind: str) -> Callable[[RunView], str]:
    def render(run: RunView) -> str:
        from harness.export.traces import trace_lines

        return "".join(line + "\n" for line in trace_lines(run, kind))

    return render


FORMATS: Registry[Format] = Registry("export format")
FORMATS.add("br0.2", Format(".br0.2.json", _br02, validates=True))
FORMATS.add("mooncake", Format(".mooncake.jsonl", _trace("mooncake"), validates=False))
FORMATS.add("bailian", Format(".bailian.jsonl", _trace("bailian"), validates=False))
