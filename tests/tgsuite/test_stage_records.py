"""tgsuite.pipeline.records: typed stage outputs hash as the dict records they replace (run directories written
before keep resuming), are read back through their model, and a record that does not fit names its file and field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tgsuite.pipeline.records import (
    AnalyzeOutputs,
    EvalOutputs,
    ImagesOutputs,
    Paths,
    ReportOutputs,
    SftOutputs,
    TaskSetOutputs,
    TrainOutputs,
)
from tgsuite.pipeline.stage_runner import StageRecordError, StageRunner, canonical_hash

# records as the dict-returning stages wrote them (the shapes the stage functions returned before the typed records)
SFT_TRAINED = {"paths": {"model": "/r/sft/model"},
               "report": {"model_dir": "/r/sft/model", "n_params": 123, "vocab": 1024, "n_trajectories": 16,
                          "n_hinted": 4, "train_tokens": 5000, "train_act_tokens": 2000, "steps": 3,
                          "final_loss": 1.0, "train_tokens_per_s": 250.5, "wall_s": {"expert": 2.0, "train": 7.25},
                          "eval": [{"split": "heldout", "loss": 2.5}]}}
SFT_SHIPPED = {"paths": {"model": "/a/sft/mini"},
               "report": {"model_dir": "/a/sft/mini", "shipped": "sft:mini", "recipe_sha256": "ab" * 32,
                          "n_trajectories": 400, "train_tokens": 10, "steps": 5, "wall_s": 100.0, "heldout": None}}
TRAIN = {"paths": {"checkpoint": "/r/train/tg/s0/checkpoints/step_2"},
         "checkpoint": {"path": "/r/train/tg/s0/checkpoints/step_2", "step": 2, "sha256": "c" * 64,
                        "config_sha256": "d" * 64, "arm": "tg", "seed": 0, "created_at": "2026-01-01T00:00:00Z",
                        "compute": {"tokens": {"rollout": 10}, "flops_total": 3.0e9, "peak_cuda_bytes": None}}}
EVAL = {"paths": {"manifest": "/r/eval/arms/manifest.json"}, "finished_at": "2026-01-01T00:00:00Z", "n": 8,
        "scored": 8, "resolved": 3, "behaviour_ok": 5}
ANALYZE = {"paths": {"analysis": "/r/analysis/analysis.json"}, "decision": "inconclusive", "reasons": ["underpowered"]}
REPORT = {"paths": {"index": "/r/report/index.html"}, "summary": {"verdict": "inconclusive", "n": 2, "x": [1.5, None]}}
TASKS = {"paths": {"tasks": "/r/tasks/train/tasks.jsonl"}, "sha256": "e" * 64, "name": "minirepos-train", "n": 24}
HELDOUT = {"paths": {"tasks": "/r/tasks/heldout/tasks.jsonl", "generalization": "/r/tasks/generalization/tasks.jsonl"},
           "sha256": "f" * 64, "name": "primary", "n": 40, "strata": {"twin": 30, "no_twin": 10}, "seed": 20261206,
           "dev": False, "generalization": {"sha256": "9" * 64, "name": "gen", "n": 10}}


@pytest.mark.parametrize(("model", "record"), [
    (SftOutputs, SFT_TRAINED), (SftOutputs, SFT_SHIPPED), (TrainOutputs, TRAIN), (EvalOutputs, EVAL),
    (AnalyzeOutputs, ANALYZE), (ReportOutputs, REPORT), (TaskSetOutputs, TASKS), (TaskSetOutputs, HELDOUT),
    (ImagesOutputs, {"image": None}), (ImagesOutputs, {"image": "tg-base:1", "digest": "sha256:1"}),
])
def test_a_typed_record_hashes_as_the_dict_it_was_read_from(model: type, record: dict[str, object]) -> None:
    typed = model.model_validate(record)
    assert canonical_hash(typed) == canonical_hash(record)
    assert canonical_hash({"base": typed, "x": [typed]}) == canonical_hash({"base": record, "x": [record]})


def test_a_run_directory_written_with_dict_records_resumes_typed(tmp_path: Path) -> None:
    """The record an earlier (dict-returning) stage wrote is skipped, read back as its model, and the inputs of
    the stages downstream hash as before."""
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    old = {**TRAIN, "paths": {"checkpoint": str(ckpt)}}
    StageRunner(tmp_path, echo=lambda s: None).run("train_tg_s0", {"k": 1}, lambda: old)  # as the old code did

    def never() -> TrainOutputs:
        raise AssertionError("the stage is up to date")

    runner = StageRunner(tmp_path, echo=lambda s: None)
    rec = runner.run("train_tg_s0", {"k": 1}, never, TrainOutputs)
    assert isinstance(rec, TrainOutputs) and rec.paths.checkpoint == str(ckpt) and rec.checkpoint is not None
    assert rec.checkpoint.step == 2 and runner.timings()["train_tg_s0"]["skipped"] is True
    assert canonical_hash(rec) == canonical_hash(old)


def test_a_fresh_typed_record_hashes_as_when_it_is_read_back(tmp_path: Path) -> None:
    made = EvalOutputs.model_validate({**EVAL, "paths": {"manifest": str(tmp_path / "m.json")}})
    (tmp_path / "m.json").write_text("{}")
    first = StageRunner(tmp_path, echo=lambda s: None).run("eval_arms", {"k": 1}, lambda: made, EvalOutputs)
    again = StageRunner(tmp_path, echo=lambda s: None).run("eval_arms", {"k": 1}, lambda: made, EvalOutputs)
    assert first == again == made and canonical_hash(first) == canonical_hash(again)
    stored = json.loads((tmp_path / "stages" / "eval_arms.json").read_text())["outputs"]
    assert canonical_hash(stored) == canonical_hash(made)


def test_a_record_that_does_not_fit_names_the_file_and_field(tmp_path: Path) -> None:
    bad = {**EVAL, "paths": {"manifest": str(tmp_path)}, "resolved": "three"}
    StageRunner(tmp_path, echo=lambda s: None).run("eval_arms", {"k": 1}, lambda: bad)
    with pytest.raises(StageRecordError, match=r"stages/eval_arms\.json: field outputs\.resolved: .*--force eval_arms"):
        StageRunner(tmp_path, echo=lambda s: None).run("eval_arms", {"k": 1}, lambda: EvalOutputs(**EVAL), EvalOutputs)
    with pytest.raises(StageRecordError, match=r"field outputs\.paths\.manifest"):  # a stage never writes one
        StageRunner(tmp_path, echo=lambda s: None).run("e2", {}, lambda: {"paths": {}}, EvalOutputs)
    assert not (tmp_path / "stages" / "e2.json").exists()


def test_paths_under_a_run_directory() -> None:
    p = Paths.under(Path("/r"))
    assert (p.train_tasks, p.sft_model, p.frozen, p.analysis) == (Path("/r/tasks/train"), Path("/r/sft/model"),
                                                                 Path("/r/protocol/frozen.json"),
                                                                 Path("/r/analysis/analysis.json"))
    assert p.model_copy(update={"sft_model": Path("/m")}).sft_model == Path("/m") and p.sft_model == Path("/r/sft/model")
