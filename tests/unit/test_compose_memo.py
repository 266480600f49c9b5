"""harness/config/compose_memo.py gives what Hydra's compose gives: the same config, node for node
and flag for flag, for the claims' arms and every kind of value override; the same error where
Hydra refuses; and no state carried from one composition to the next."""

from __future__ import annotations

import pytest
from hydra import compose as hydra_compose
from hydra import initialize_config_dir
from omegaconf import OmegaConf

from harness.claims.arms import ARMS, GPU_BUDGETS, H100_8B
from harness.config import compose_memo
from harness.config.compose_memo import compose_config
from harness.config.schema import CONF_DIR, register_configs

register_configs()

# The claims' arms (every design, caching on and off) on their GPU preset, and value overrides
# of every kind the grammar has: ints, floats, null, booleans, lists, dicts, quoted strings and
# interpolations, nested keys, a key set twice (the last wins), groups given after values.
CASES = [
    *[[*H100_8B, *arm, "workload=multiturn", "workload.num_users=4"] for arm in ARMS.values()],
    [*H100_8B, *GPU_BUDGETS, "workload=unique", "workload.num_prompts=32", "seed=7"],
    ["workload=rag", "engine=radix", "model=tiny", "load.mode=poisson", "load.rate=2.5"],
    ["workload=system_prompt", "workload.num_groups=2", "workload.num_groups=3", "engine=apc"],
    ["seed=3", "engine=radix", "workload=parallel", "workload.n=4", "hardware=h100_llama3_8b_bf16"],
    ["load.max_concurrency=null", "engine.prefix_caching=false", "label='a b, c'"],
    ["workload=multiturn", "workload.num_rounds=${seed}", "seed=5"],
    ["workload=fewshot", "workload.num_tasks=2", "workload.questions_per_task=4"],
    [],
]


def _hydra(overrides: list[str]):
    return hydra_compose(config_name="config", overrides=overrides)


@pytest.fixture(autouse=True)
def _hydra_dir():
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3", job_name="harness"):
        yield


@pytest.mark.parametrize("overrides", CASES, ids=lambda o: " ".join(o)[:60] or "defaults")
def test_the_memo_composes_what_hydra_composes(overrides):
    for _ in range(2):  # the second comes from the memo
        ours, theirs = compose_config(overrides), _hydra(overrides)
        assert OmegaConf.to_yaml(ours) == OmegaConf.to_yaml(theirs)
        assert OmegaConf.to_container(ours, resolve=True) == OmegaConf.to_container(
            theirs, resolve=True
        )
        assert OmegaConf.is_struct(ours) and OmegaConf.is_struct(theirs)
        assert OmegaConf.get_type(ours) is OmegaConf.get_type(theirs)


@pytest.mark.parametrize(
    "overrides",
    [
        ["workload.nope=1"],  # a key the config lacks
        ["workload=multiturn", "workload.num_users=many"],  # a value of the wrong type
        ["workload=nope"],  # a group choice that does not exist
        ["+engine.cache=radix"],  # an addition where a key is
        ["seed=1,2"],  # a sweep
    ],
)
def test_where_hydra_refuses_the_memo_raises_hydras_own_error(overrides):
    with pytest.raises(Exception) as theirs:
        _hydra(overrides)
    with pytest.raises(type(theirs.value)) as ours:
        compose_config(overrides)
    assert str(ours.value) == str(theirs.value)


def test_a_composed_config_changed_by_its_caller_leaves_the_next_alone():
    first = compose_config(["workload=multiturn", "workload.num_users=4"])
    first.workload.num_users = 99
    second = compose_config(["workload=multiturn"])
    assert second.workload.num_users == _hydra(["workload=multiturn"]).workload.num_users


def test_additions_deletions_and_hydras_own_keys_go_to_hydra_whole():
    assert compose_memo._split(["+foo=1"]) is None
    assert compose_memo._split(["~seed"]) is None
    assert compose_memo._split(["hydra.run.dir=x"]) is None
    groups, values = compose_memo._split(["seed=2", "workload=rag", "suite/arm=x", "engine=radix"])
    assert groups == ("workload=rag", "suite/arm=x", "engine=radix")
    assert [v.key_or_group for v in values] == ["seed"]
