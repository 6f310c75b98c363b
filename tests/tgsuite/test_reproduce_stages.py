"""tgsuite.pipeline.reproduce with every stage function faked (no Docker, no model): the orchestrator passes the
typed records from stage to stage, resumes with every stage up to date, and a changed upstream record re-runs
exactly what consumes it."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

import tgsuite.pipeline.reproduce as rp
from harness.schema import ArmSpec, RunManifest
from tgsuite.pipeline.presets import SMOKE, Preset
from tgsuite.pipeline.records import (
    AnalyzeOutputs,
    EvalOutputs,
    FreezeOutputs,
    ImagesOutputs,
    Paths,
    ReportOutputs,
    SftOutputs,
    TaskSetOutputs,
    TrainOutputs,
    ValidateOutputs,
)


def _file(p: Path, text: str = "x") -> str:
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)
    return str(p)


@pytest.fixture()
def fakes(monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], dict[str, str]]:
    """The stage functions faked; returns the stages they ran, in order, and the weights tag of trained checkpoints."""
    made: list[str] = []
    weights = {"sha": "w1"}

    def tasks(out: Path, split: str, repos: int, per_repo: int, seed: int) -> TaskSetOutputs:
        made.append(f"tasks_{split}")
        return TaskSetOutputs.model_validate({"paths": {"tasks": _file(out / "tasks.jsonl")}, "sha256": split * 8,
                                              "name": split, "n": repos * per_repo})

    def heldout(paths: Paths, preset: Preset) -> TaskSetOutputs:
        return tasks(paths.heldout_tasks, "heldout", preset.heldout_repos, preset.heldout_tasks_per_repo, 0)

    def validate(task_dir: Path, preset: Preset, sha256: str) -> ValidateOutputs:
        made.append("validate")
        return ValidateOutputs.model_validate({"paths": {"validation": _file(task_dir / "validation.json")},
                                               "n_valid": 12})

    def sft(paths: Paths, preset: Preset) -> SftOutputs:
        made.append("sft")
        model = _file(paths.sft / "model" / "config.json")
        return SftOutputs.model_validate({"paths": {"model": str(Path(model).parent)},
                                          "report": {"model_dir": str(Path(model).parent), "final_loss": 1.5}})

    def freeze(paths: Paths, preset: Preset, held: TaskSetOutputs) -> FreezeOutputs:
        made.append("protocol")
        assert held.name == "heldout"
        return FreezeOutputs.model_validate({"paths": {"frozen": _file(paths.frozen)}, "sha256": "f" * 64,
                                             "frozen_at": "2026-01-01T00:00:00Z"})

    def train(run_dir: Path, paths: Paths, preset: Preset, arm: str, seed: int, protocol: str | None) -> TrainOutputs:
        made.append(f"train_{arm}_s{seed}")
        assert paths.sft_model == paths.sft / "model" and protocol == "f" * 64
        ckpt = _file(run_dir / "ckpt" / "model.safetensors")
        return TrainOutputs.model_validate({"paths": {"checkpoint": str(Path(ckpt).parent)},
                                            "checkpoint": {"path": str(Path(ckpt).parent), "step": 2,
                                                           "sha256": f"{weights['sha']}-{arm}-{seed}",
                                                           "config_sha256": "c", "arm": arm, "seed": seed}})

    def evaluate(run_dir: Path, heldout: Path, arms: dict[str, str], *_a: object, **_kw: object) -> EvalOutputs:
        made.append(f"eval_{run_dir.name}")
        man = RunManifest(run_id=run_dir.name, created_at="2026-01-01T00:00:00Z", task_set_name="heldout",
                          task_set_sha256="h", instance_ids=[], seeds=[0], sandbox="local", isolated=False,
                          arms=[ArmSpec(name=a, policy=f"hf:{p}") for a, p in arms.items()])  # a run without episodes
        return EvalOutputs.model_validate({"paths": {"manifest": _file(run_dir / "manifest.json", man.model_dump_json())},
                                           "finished_at": "2026-01-01T00:00:00Z", "n": len(arms), "scored": len(arms),
                                           "resolved": 0, "behaviour_ok": 0})

    def analyze(paths: Paths, run_dirs: list[Path], exploratory: object = None) -> AnalyzeOutputs:
        made.append("analyze")  # each analysis writes a file of its own (analysis.json carries its creation time)
        text = f"analysis {len(made)}"
        return AnalyzeOutputs.model_validate({"paths": {"analysis": _file(paths.analysis, text)},
                                              "decision": "INCONCLUSIVE", "reasons": ["smoke"],
                                              "sha256": hashlib.sha256(text.encode()).hexdigest()})

    def report(paths: Paths, run_dirs: list[Path], training: dict[str, dict[str, str]]) -> ReportOutputs:
        made.append("report")
        assert set(training) == set(SMOKE.arms)
        return ReportOutputs.model_validate({"paths": {"index": _file(paths.report / "index.html")},
                                             "summary": {"verdict": "INCONCLUSIVE"}})

    for name, fake in {"stage_images": lambda preset: ImagesOutputs(image=None), "stage_tasks": tasks,
                       "stage_heldout": heldout, "stage_validate": validate, "stage_sft": sft,
                       "stage_freeze": freeze, "stage_train": train, "stage_eval": evaluate,
                       "stage_analyze": analyze, "stage_report": report,
                       "excluded_tests": lambda task_dir: {}}.items():
        monkeypatch.setattr(rp, name, fake)
    return made, weights


def test_reproduce_passes_typed_records_and_resumes(tmp_path: Path, fakes: tuple[list[str], dict[str, str]]) -> None:
    calls, weights = fakes
    record = rp.reproduce(SMOKE, tmp_path / "out", echo=lambda s: None)
    assert record["decision"] == "INCONCLUSIVE" and record["report"].endswith("report/index.html")
    trains = [f"train_{a}_s{s}" for a in SMOKE.arms for s in SMOKE.seeds]
    assert calls == ["tasks_train", "tasks_heldout", "validate", "sft", "protocol", *trains, "eval_base", "eval_arms",
                     "analyze", "report"]
    n = len(calls)
    again = rp.reproduce(SMOKE, tmp_path / "out", echo=lambda s: None)
    assert calls[n:] == []  # nothing ran again
    assert all(v["skipped"] for v in again["stages"].values()) and again["decision"] == record["decision"]
    # one arm retrained with other weights: its record changes, so both evaluations and the report (it hashes the
    # training records) re-run; nothing upstream does, nor the analysis (the fake evaluation's record is the same)
    weights["sha"] = "w2"
    n = len(calls)
    rp.reproduce(SMOKE, tmp_path / "out", force=frozenset({"train_tg_s0"}), echo=lambda s: None)
    assert calls[n:] == ["train_tg_s0", "eval_base", "eval_arms", "report"]


def test_a_new_analysis_re_renders_the_report(tmp_path: Path, fakes: tuple[list[str], dict[str, str]]) -> None:
    """A re-analysis with the same verdict and reasons (a study adding exploratory results) changes analysis.json;
    the report renders that file, so it must run again (it was skipped, showing the old analysis)."""
    calls, _ = fakes
    rp.reproduce(SMOKE, tmp_path / "out", echo=lambda s: None)
    n = len(calls)
    rp.reproduce(SMOKE, tmp_path / "out", force=frozenset({"analyze"}), echo=lambda s: None)
    assert calls[n:] == ["analyze", "report"]


def test_studies_read_the_main_evaluation_instead_of_evaluating_its_checkpoints_again(
        tmp_path: Path, fakes: tuple[list[str], dict[str, str]], monkeypatch: pytest.MonkeyPatch) -> None:
    """The studies' unhinted evaluation of the SFT start and the arms' checkpoints is the main evaluation (same task
    set, plan and settings): reproduce hands its episodes to the studies, so only hinted evaluations run."""
    from tgsuite.pipeline import stages

    calls, _ = fakes
    for name in ("stage_train", "stage_eval"):  # the studies call the stages module's functions
        monkeypatch.setattr(stages, name, getattr(rp, name))
    rp.reproduce(SMOKE, tmp_path / "out", echo=lambda s: None)
    n = len(calls)
    rp.reproduce(SMOKE, tmp_path / "out", studies=frozenset({"can_do"}), echo=lambda s: None)
    assert [c.split("-")[0] for c in calls[n:]] == ["eval_study_eval_corrective", "analyze", "report"]
    plain = json.loads((tmp_path / "out" / "studies" / "studies.json").read_text())["episodes"]["plain"]
    assert plain["tg_s0"] == {"run_dir": str(tmp_path / "out" / "eval" / "arms"), "arm": "tg@s0"}
    assert plain["base"] == {"run_dir": str(tmp_path / "out" / "eval" / "base"), "arm": "base"}
