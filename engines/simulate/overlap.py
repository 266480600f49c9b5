"""Pricing SGLang's overlap loop (`engine.overlap`) on the simulated executor.

Upstream forms and launches step N+1 on the CPU while the GPU still runs step N, so the per-step
CPU cost (`step_overhead_s`: input preparation, scheduling, result processing) is hidden behind
the previous step's GPU time, up to that time. A stretch of back-to-back steps still pays one
CPU part whole: upstream's last step of a stretch processes its result with no GPU work to hide
behind; here the stretch's first step pays it (same busy time, token times within a stretch
earlier by at most one CPU part). Only the GPU (roofline) models hide anything: the fitted CPU
model runs host and model on the same cores.
"""

from __future__ import annotations

import numpy as np


class OverlapPricing:
    """The hidden part of each step's CPU cost, from the previous step's GPU time."""

    def __init__(self, cpu_s: float) -> None:
        self.cpu_s = cpu_s
        self._prev_gpu_s = 0.0  # GPU part of the last priced step
        self._prev_end_s = -1.0  # when it ended (a step starting then follows it back to back)

    def step(self, start_s: float, time_s: float) -> float:
        """The step's time with its CPU part hidden behind a step that ended at `start_s`."""
        hidden = min(self.cpu_s, self._prev_gpu_s) if start_s == self._prev_end_s else 0.0
        self._prev_gpu_s = time_s - self.cpu_s
        out = time_s - hidden
        self._prev_end_s = start_s + out
        return out

    def run(self, start_s: float, times_s: np.ndarray) -> np.ndarray:
        """`step` over back-to-back steps, elementwise with the same float operations."""
        if len(times_s) == 0:
            return times_s
        hidden = np.empty_like(times_s)
        hidden[0] = min(self.cpu_s, self._prev_gpu_s) if start_s == self._prev_end_s else 0.0
        hidden[1:] = np.minimum(self.cpu_s, times_s[:-1] - self.cpu_s)
        out: np.ndarray = times_s - hidden
        return out

    def ran(self, end_s: float, last_time_s: float) -> None:
        """A priced run ended at `end_s` with a last step of full price `last_time_s`."""
        self._prev_gpu_s = last_time_s - self.cpu_s
        self._prev_end_s = end_s
