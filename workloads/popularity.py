"""Popularity laws for picking groups (system_prompt) and documents (rag): item i has weight
w_i, uniform (w_i = 1) or Zipf (w_i = 1 / (i+1)^alpha, item 0 the most popular, as SGLang GSP's
`--gsp-group-distribution zipf`)."""

from __future__ import annotations

import numpy as np

from workloads.registry import Registry

POPULARITY: Registry = Registry("popularity law")


@POPULARITY.register("uniform")
def _uniform(num_items: int, alpha: float) -> np.ndarray:
    return np.full(num_items, 1.0 / num_items)


@POPULARITY.register("zipf")
def _zipf(num_items: int, alpha: float) -> np.ndarray:
    weights = 1.0 / np.arange(1, num_items + 1, dtype=np.float64) ** alpha
    return weights / weights.sum()


def probabilities(law: str, num_items: int, alpha: float) -> np.ndarray:
    """Probability of each item (index = popularity rank) under `law`."""
    return POPULARITY.get(law)(num_items, alpha)
