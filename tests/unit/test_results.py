"""Result files: atomic writes, the run directory layout, the loaders the report uses, the manifest."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from engines.records import RequestRecord
from harness.metrics.summarize import summarize, summary_dict
from harness.metrics.summary import RunContext
from harness.metrics.table import itls_ms, request_table, token_rows
from harness.results.load import load_run, load_runs
from harness.results.manifest import build_manifest
from harness.results.run_dir import (
    RunDir,
    write_failed_summary,
    write_json,
    write_parquet,
    write_tokens_jsonl,
)
from workloads.request import Request


def make_run(path, engine: str, cached: int) -> tuple[dict, pd.DataFrame]:
    """A complete two-request run directory, written the way the runner writes one."""
    reqs = {
        "q1": Request("q1", (1, 2, 3, 4), arrival_s=0.5),
        "q0": Request("q0", (1, 2, 9), arrival_s=0.0),
    }
    records = [
        RequestRecord("q1", "q1", 0, 4, cached, 2, 0, 0, 0.5, 0.5, 0.75, 1.0, (0.75, 1.0), (7, 8)),
        RequestRecord("q0", "q0", 0, 3, 0, 1, 0, 0, 0.0, 0.0, 0.25, 0.25, (0.25,), (5,)),
    ]
    ctx = RunContext("toy", 1, engine, "fcfs", 16, 0, path.name)
    df = request_table(records, reqs, ctx)
    summary = summary_dict(summarize(df, itls_ms(records), 1.0, {"status": "ok"}, context=ctx))
    run = RunDir(path)
    run.write_requests(df)
    run.write_tokens(token_rows(df, records, reqs))
    run.write_manifest(build_manifest({"engine": {"cache": engine, "block_size": 16}}, 0))
    run.write_summary(summary)
    return summary, df


def test_run_dir_round_trip(tmp_path):
    summary, df = make_run(tmp_path / "deep" / "run-a", "apc", cached=2)
    run = RunDir(tmp_path / "deep" / "run-a")
    names = sorted(p.name for p in run.path.iterdir())
    assert names == ["manifest.json", "requests.parquet", "summary.json", "tokens.jsonl"]
    loaded_summary, loaded_df, manifest = load_run(run.path)
    assert loaded_summary == summary
    pd.testing.assert_frame_equal(loaded_df, df)  # dtypes survive parquet
    assert manifest["config"] == {"engine": {"cache": "apc", "block_size": 16}}


def test_tokens_jsonl_is_in_arrival_order(tmp_path):
    make_run(tmp_path, "apc", cached=2)
    lines = (tmp_path / RunDir.TOKENS).read_text().splitlines()
    rows = [json.loads(line) for line in lines]
    assert [r["request_id"] for r in rows] == ["q0", "q1"]
    assert rows[1] == {"request_id": "q1", "prompt_ids": [1, 2, 3, 4], "output_ids": [7, 8]}


class Unserializable:
    pass


def test_failed_json_write_keeps_old_file_and_leaves_no_temp(tmp_path):
    path = tmp_path / "summary.json"
    write_json(path, {"completed": 1})
    # json.dump streams: "a" is written to the temporary file before the object fails
    with pytest.raises(TypeError):
        write_json(path, {"a": 1, "b": Unserializable()})
    with pytest.raises(ValueError):
        write_json(path, {"hit_rate": float("nan")})  # strict JSON
    assert json.loads(path.read_text()) == {"completed": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["summary.json"]


def test_failed_jsonl_write_midway_keeps_old_file(tmp_path):
    path = tmp_path / "tokens.jsonl"
    write_tokens_jsonl(path, [{"request_id": "old"}])

    def rows():
        yield {"request_id": "new-0"}
        raise RuntimeError("generator died")

    with pytest.raises(RuntimeError):
        write_tokens_jsonl(path, rows())
    assert path.read_text() == '{"request_id":"old"}\n'
    assert [p.name for p in tmp_path.iterdir()] == ["tokens.jsonl"]


def test_parquet_write_replaces_whole_file(tmp_path):
    path = tmp_path / "requests.parquet"
    write_parquet(path, pd.DataFrame({"x": [1, 2, 3]}))
    write_parquet(path, pd.DataFrame({"x": [4]}))
    assert pd.read_parquet(path)["x"].tolist() == [4]
    assert [p.name for p in tmp_path.iterdir()] == ["requests.parquet"]


def test_load_runs_skips_unreadable_and_joins_by_run_id(tmp_path):
    make_run(tmp_path / "sweep" / "0", "apc", cached=2)
    make_run(tmp_path / "sweep" / "1", "radix", cached=3)
    (tmp_path / "sweep" / "2").mkdir()
    (tmp_path / "sweep" / "2" / "summary.json").write_text('{"completed": 3, "dur')  # truncated
    (tmp_path / "sweep" / "3").mkdir()
    (tmp_path / "sweep" / "3" / "summary.json").write_text("[1, 2]")  # JSON, but not an object
    write_failed_summary(tmp_path / "single" / "boom", "ValueError: bad workload")
    (tmp_path / "sweep" / "0" / ".hydra").mkdir()  # not a run: no summary.json

    skipped = (
        r"skipped 2 unreadable run directories: .*sweep/2 \(BadInput\), .*sweep/3 \(ValueError\)"
    )
    with pytest.warns(UserWarning, match=skipped):
        runs, requests = load_runs(tmp_path)
    assert runs["run_dir"].tolist() == ["single/boom", "sweep/0", "sweep/1"]
    assert runs["run_id"].tolist() == ["single/boom", "0", "1"]  # summary's run_id, else the path
    assert runs["status"].tolist() == ["failed", "ok", "ok"]
    assert runs["config.engine.cache"].tolist()[1:] == ["apc", "radix"]
    assert runs["hit_rate"].tolist()[1:] == pytest.approx([2 / 7, 3 / 7])
    assert "git_sha" in runs and "packages.pandas" in runs
    assert len(requests) == 4 and requests["run_id"].tolist() == ["0", "0", "1", "1"]
    joined = requests.merge(runs[["run_id", "engine"]], on="run_id", suffixes=("", "_run"))
    assert (joined["engine"] == joined["engine_run"]).all()


def test_load_runs_on_empty_root(tmp_path):
    runs, requests = load_runs(tmp_path)
    assert runs.empty and requests.empty


def test_load_run_without_requests(tmp_path):
    write_failed_summary(tmp_path, "crash")
    summary, requests, manifest = load_run(tmp_path)
    assert summary["status"] == "failed" and summary["error"] == "crash"
    assert requests.empty and manifest == {}


def test_manifest_fields_and_extra_last():
    m = build_manifest({"seed": 3}, 3, {"device": "cpu", "seed": 3})
    json.dumps(m, allow_nan=False)
    assert m["config"] == {"seed": 3} and m["seed"] == 3 and m["device"] == "cpu"
    assert m["packages"]["pandas"] == pd.__version__ and m["packages"]["python"]
    assert m["created_utc"].endswith("+00:00")
    assert isinstance(m["torch_num_threads"], int)
    simulated = build_manifest({"seed": 3}, 3, {"device": "virtual"})
    assert simulated["torch_num_threads"] is None and simulated["cuda_device"] is None


# ------------------------------------------------------------------ run identity


def test_fresh_dir_never_reuses_a_name(tmp_path):
    from harness.config.run_dirs import fresh_dir

    base = str(tmp_path / "results" / "20261201-120000.123456-unique-apc-seed0")
    names = [fresh_dir(base) for _ in range(3)]
    assert names == [base, f"{base}-1", f"{base}-2"]


def test_a_claimed_or_finished_directory_is_refused_unless_overwrite(tmp_path):
    from harness.config.errors import BAD_INPUT
    from harness.results.identity import claim_run_dir

    run = tmp_path / "run"
    claim_run_dir(run, "rows.jsonl", overwrite=False)
    with pytest.raises(BAD_INPUT, match=r"holds another run's results \(rows.jsonl\)"):
        claim_run_dir(run, "rows.jsonl", overwrite=False)  # a second run pointed at a running one
    (run / "rows.jsonl").unlink()
    write_json(run / "summary.json", {"status": "ok"})
    with pytest.raises(
        BAD_INPUT, match=r"holds another run's results \(summary.json\); .*overwrite=true"
    ):
        claim_run_dir(run, "rows.jsonl", overwrite=False)
    claim_run_dir(run, "rows.jsonl", overwrite=True)
    assert not (run / "summary.json").exists() and (run / "rows.jsonl").exists()


def test_fingerprint_ignores_seed_and_output_settings_only():
    from harness.results.identity import fingerprint

    base = {"seed": 0, "engine": {"cache": "apc"}, "load": {"rate": 8.0}, "save_tokens": False}
    assert fingerprint(base) == fingerprint(
        {**base, "seed": 7, "save_tokens": True, "overwrite": True}
    )
    assert fingerprint(base) != fingerprint({**base, "load": {"rate": 64.0}})
