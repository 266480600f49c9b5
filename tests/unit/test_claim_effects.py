"""The one 2x2 convention of the claims (harness/claims/effects.py): interaction = half the
difference of the simple effects, and simple effects decide when the interaction is as large as
the main effect."""

from __future__ import annotations

from harness.claims.effects import effects


def _cells(av, rv, as_, rs):
    return {
        ("apc", "vllm"): av,
        ("radix", "vllm"): rv,
        ("apc", "sglang"): as_,
        ("radix", "sglang"): rs,
    }


def test_interaction_is_half_the_difference_of_differences():
    e = effects(_cells(0.7, 0.4, 0.4, 0.4), ("apc", "radix"), ("vllm", "sglang"))
    assert abs(e.simple["vllm"] + 0.3) < 1e-12 and e.simple["sglang"] == 0.0
    assert abs(e.main + 0.15) < 1e-12
    assert abs(e.interaction - 0.15) < 1e-12  # ((0.0) - (-0.3)) / 2


def test_one_cell_effect_is_judged_by_simple_effects():
    e = effects(_cells(0.5, 0.5, 0.5, 0.56), ("apc", "radix"), ("vllm", "sglang"))
    assert e.use_simple  # main 0.03, interaction 0.03
    assert not e.judged(lambda v: v >= 0.02)  # the tree pays only under one scheduler


def test_a_uniform_effect_is_judged_by_the_main_effect():
    e = effects(_cells(0.5, 0.55, 0.5, 0.56), ("apc", "radix"), ("vllm", "sglang"))
    assert not e.use_simple and e.judged(lambda v: v >= 0.02)
