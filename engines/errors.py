"""`BadInput`: the one exception class for input the user must fix.

A configuration value, a data file or a request that can never run raises `BadInput` (or a
subclass: `UnknownNameError`, `CapacityError`); the harness prints its message as one line and
exits 2. Any other exception is a bug or a crash. `workloads.errors.BadInput` is the same concept
for the workloads package (the two packages never import each other); `harness.config.errors.BAD_INPUT`
treats both alike. It subclasses ValueError so callers that only know the builtin still catch it.
"""

from __future__ import annotations


class BadInput(ValueError):
    """Input the user must fix; the message is one line saying what, where and what is allowed."""
