"""`BadInput`: the one exception class for workload input the user must fix.

A workload parameter, a trace or dataset file, a workload too large for this machine raises
`BadInput`; the harness prints its message as one line and exits 2. Any other exception is a bug.
`engines.errors.BadInput` is the same concept for the engines package (the two packages never
import each other); `harness.config.errors.BAD_INPUT` treats both alike. It subclasses ValueError so
callers that only know the builtin still catch it.
"""

from __future__ import annotations


class BadInput(ValueError):
    """Input the user must fix; the message is one line saying what, where and what is allowed."""
