"""Bounded, strict readers for the files a user names: prompt files, traces, datasets, configs.

Every read opens the path without blocking (a FIFO or device would otherwise wait forever), refuses
anything but a regular file (directories, FIFOs, dangling symlinks), caps the file's size and each
JSONL line's length before reading it, decodes UTF-8 strictly and parses JSON without NaN,
Infinity or lone surrogates. YAML is read with aliases refused (a "billion laughs" file expands
exponentially later, in OmegaConf) and duplicate keys refused. Each error is one `BadInput` line
naming the file and the line.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from workloads.errors import BadInput

MIB = 2**20
# A JSONL line longer than this is refused before it is read (a 16 MiB prompt is ~4M tokens, far
# past any model's context). A JSON file whose array sits on one line is bounded by the file limit.
MAX_LINE_BYTES = int(os.environ.get("PREFIXBENCH_MAX_LINE_BYTES", 16 * MIB))
# Any one input file; the whole-trace replay reads ~25 MB, a ShareGPT dump ~700 MB.
MAX_FILE_BYTES = int(os.environ.get("PREFIXBENCH_MAX_FILE_BYTES", 4096 * MIB))
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def check_regular(path: Path, what: str) -> None:
    """Raise BadInput unless `path` is (or links to) a regular file; never opens it."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        if path.is_symlink():
            raise BadInput(f"{what} {str(path)!r} is a dangling symlink") from None
        raise BadInput(f"{what} {str(path)!r} not found") from None
    except OSError as exc:
        raise BadInput(f"{what} {str(path)!r} cannot be read: {exc.strerror}") from None
    if not stat.S_ISREG(mode):
        raise BadInput(f"{what} {str(path)!r} is {_kind(mode)}, not a regular file")


def open_regular(path: Path, what: str, max_bytes: int | None = None) -> BinaryIO:
    """A binary file object on `path`, opened with O_NONBLOCK (returns at once even for a FIFO)
    and checked with fstat on the opened descriptor: a regular file of at most `max_bytes`."""
    limit = MAX_FILE_BYTES if max_bytes is None else max_bytes
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        check_regular(path, what)  # names a dangling symlink
        raise
    except OSError as exc:
        raise BadInput(f"{what} {str(path)!r} cannot be read: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise BadInput(f"{what} {str(path)!r} is {_kind(st.st_mode)}, not a regular file")
        if st.st_size > limit:
            raise BadInput(
                f"{what} {str(path)!r} is {st.st_size:,} bytes; the limit is {limit:,} "
                "(PREFIXBENCH_MAX_FILE_BYTES)"
            )
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb")


def _decode(raw: bytes, where: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadInput(f"{where}: not valid UTF-8 (byte {exc.start} of the line)") from None


def iter_lines(path: Path, what: str) -> Iterator[tuple[int, str]]:
    """(line number, text) of each line, each at most MAX_LINE_BYTES, strictly UTF-8."""
    with open_regular(path, what) as f:
        line_no = 0
        while True:
            raw = f.readline(MAX_LINE_BYTES + 1)
            if not raw:
                return
            line_no += 1
            if len(raw) > MAX_LINE_BYTES:
                raise BadInput(
                    f"{path}:{line_no}: line longer than {MAX_LINE_BYTES:,} bytes "
                    "(PREFIXBENCH_MAX_LINE_BYTES)"
                )
            yield line_no, _decode(raw, f"{path}:{line_no}")


def read_text(path: Path, what: str, max_bytes: int | None = None) -> str:
    """The whole file (at most `max_bytes`), strictly UTF-8; a bad byte names its line."""
    with open_regular(path, what, max_bytes) as f:
        raw = f.read()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line_no = raw.count(b"\n", 0, exc.start) + 1
        raise BadInput(f"{path}:{line_no}: not valid UTF-8") from None


def _refuse_constant(name: str) -> float:
    raise ValueError(f"{name} is not allowed (JSON numbers must be finite)")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} overflows a float (JSON numbers must be finite)")
    return value


def loads_json(text: str, where: str) -> object:
    """Strict JSON: no NaN/Infinity (nor numbers that overflow to them), no lone surrogates."""
    try:
        value = json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)
    except json.JSONDecodeError as exc:
        raise BadInput(f"{where}: not valid JSON ({exc.msg})") from None
    except (ValueError, RecursionError) as exc:
        raise BadInput(f"{where}: not valid JSON ({exc})") from None
    if _SURROGATE_ESCAPE.search(text):
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise BadInput(
                f"{where}: a string holds a lone UTF-16 surrogate (\\uD800-\\uDFFF)"
            ) from None
    return value


def load_yaml(text: str, where: str) -> object:
    """yaml.safe_load without aliases and without duplicate keys (both BadInput naming the line)."""
    import yaml

    class StrictLoader(yaml.SafeLoader):
        def compose_node(self, parent, index):
            if self.check_event(yaml.AliasEvent):
                line = self.peek_event().start_mark.line + 1
                raise BadInput(f"{where}: line {line}: YAML aliases (*name) are not allowed")
            return super().compose_node(parent, index)

        def construct_mapping(self, node, deep=False):
            seen: set[object] = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                if isinstance(key, (str, int, float, bool)) or key is None:
                    if key in seen:
                        line = key_node.start_mark.line + 1
                        raise BadInput(f"{where}: line {line}: duplicate key {key!r}")
                    seen.add(key)
            return super().construct_mapping(node, deep)

    return yaml.load(text, Loader=StrictLoader)  # noqa: S506 (a SafeLoader subclass)
