"""Every conf/workload/*.yaml composes through Hydra against its family's schema and generates
(docs/benchmarking.md §13, pitfall 9: compose configs without running the app)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from harness.config.schema import register_configs
from workloads.base import FAMILIES, TokenSpace, generate
from workloads.bounds import ideal_hit_rate

CONF = Path(__file__).resolve().parents[2] / "conf"
NAMES = sorted(p.stem for p in (CONF / "workload").glob("*.yaml"))
SPACE = TokenSpace(vocab_size=32000, first_ordinary_id=1)  # model s


def _compose(overrides: list[str]):
    register_configs()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="config", overrides=overrides)


def test_every_family_has_a_config():
    families = {OmegaConf.to_object(_compose([f"workload={n}"]).workload).family for n in NAMES}
    assert families == set(FAMILIES.names())


@pytest.mark.parametrize("name", NAMES)
def test_workload_config_composes_and_generates(name):
    params = OmegaConf.to_object(_compose([f"workload={name}"]).workload)
    assert isinstance(params, FAMILIES.get(params.family).params_cls)
    assert params.name == name and params.version >= 1
    reqs = generate(params, 0, SPACE)
    assert reqs and all(r.prompt_ids for r in reqs)
    rates = ideal_hit_rate(reqs, (1, 16)).by_granularity
    assert 0.0 <= rates[16] <= rates[1] <= 1.0
    zero_hit = name in ("unique", "rag_question_first")
    assert (rates[1] == 0.0) == zero_hit


def test_bad_value_fails_at_compose_time():
    with pytest.raises(Exception, match="num_groups"):
        _compose(["workload=system_prompt", "workload.num_groups=notanint"])


def test_override_reaches_the_generator():
    params = OmegaConf.to_object(_compose(["workload=unique", "workload.num_prompts=3"]).workload)
    assert len(generate(params, 0, SPACE)) == 3
