"""JSON-safe values for the files a run writes (summary.json, rows.jsonl): plain Python values,
NaN as null and infinities as strings, as vLLM writes them."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import cast

import numpy as np
import pandas as pd

_PLAIN = frozenset({str, int, bool, type(None)})  # returned as they are


def json_safe(value: object) -> object:
    """Plain Python values only: numpy scalars/arrays unwrapped, NaN -> None, +-inf -> "inf"."""
    kind = type(value)  # exact types first: the rows file calls this for every finished request
    if kind in _PLAIN or (kind is float and math.isfinite(cast(float, value))):
        return value
    if kind is dict:
        items = cast("dict[object, object]", value).items()
        return {k: v if type(v) in _PLAIN else json_safe(v) for k, v in items}
    if isinstance(value, Mapping):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, np.ndarray)):
        return [json_safe(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if value is pd.NA:
        return None
    if isinstance(value, float):
        if math.isnan(value):
            return None
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
    return value
