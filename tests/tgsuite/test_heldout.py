"""The preset's held-out design in the pipeline: stage_heldout writes the stratified primary set and the
generalization tier, the dev seed gives other repositories, the mini plan (v6) states the preset's design and freezes."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from harness.minirepos import make_mini
from harness.minirepos.primary import stratum_of, training_signatures
from harness.tasks import load_task_set
from tgsuite.pipeline.generalization import runner_arms
from tgsuite.pipeline.heldout import HeldoutDesign, write_heldout
from tgsuite.pipeline.presets import MINI, SMOKE, Preset
from tgsuite.pipeline.records import EvalOutputs, TaskSetOutputs
from tgsuite.pipeline.stages import pipeline_paths, stage_heldout
from tgsuite.pipeline.tiers import unseen_source

SMALL = HeldoutDesign(seed=5, dev_seed=6, repos=2, twin_per_repo=1, no_twin_per_repo=1, generalization_repos=1,
                      generalization_tasks_per_repo=2)


def _preset(design: HeldoutDesign | None) -> Preset:
    return Preset.model_validate({**SMOKE.model_dump(), "heldout_repos": 0, "heldout_tasks_per_repo": 0,
                                  "heldout": design.model_dump() if design else None})


def test_designs_are_checked_when_the_preset_is_made() -> None:
    with pytest.raises(ValidationError, match="must differ"):
        HeldoutDesign(seed=1, dev_seed=1, repos=1, twin_per_repo=1, no_twin_per_repo=0)
    with pytest.raises(ValidationError, match="set them to 0"):
        Preset.model_validate({**SMOKE.model_dump(), "heldout": SMALL.model_dump()})
    with pytest.raises(ValidationError, match="or a `heldout` design"):
        _preset(None)
    assert _preset(SMALL).heldout == SMALL and SMALL.strata == {"twin": 2, "no_twin": 2}


def test_stage_heldout_writes_exact_strata_and_the_generalization_tier(tmp_path: Path) -> None:
    paths = pipeline_paths(tmp_path)
    make_mini(paths.train_tasks, split="train", repos=6, tasks_per_repo=8, seed=0)
    rec = stage_heldout(paths, _preset(SMALL))
    prim, gen = load_task_set(paths.heldout_tasks), load_task_set(paths.generalization_tasks)
    assert rec.generalization is not None
    assert rec.sha256 == prim.sha256 and rec.generalization.sha256 == gen.sha256
    assert rec.strata == SMALL.strata and rec.n == 4 and rec.generalization.n == 2
    sigs = training_signatures(load_task_set(paths.train_tasks).instances)
    assert all(stratum_of(i, sigs) == i.stratum for i in prim.instances)
    assert {i.stratum for i in gen.instances} == {"generalization"}
    assert unseen_source(paths) == paths.generalization_tasks
    again = stage_heldout(paths, _preset(SMALL))
    assert again.sha256 == rec.sha256  # deterministic
    dev = write_heldout(SMALL, sigs, tmp_path / "dev", None, dev=True)
    assert dev.seed == SMALL.dev_seed and dev.strata == SMALL.strata and dev.generalization is None
    dev_repos = {i.repo for i in load_task_set(tmp_path / "dev").instances}
    assert dev_repos.isdisjoint({i.repo for i in prim.instances})


def test_unseen_source_falls_back_to_the_heldout_set(tmp_path: Path) -> None:
    paths = pipeline_paths(tmp_path)
    assert unseen_source(paths) == paths.heldout_tasks


def test_runner_arms_label_the_sft_start_and_seeds() -> None:
    arms = runner_arms({"base": "b", "grpo@s0": "g", "tg@s4": "t"})
    assert arms == {"base": ("base", -1), "grpo@s0": ("grpo", 0), "tg@s4": ("tg", 4)}


def test_the_mini_plan_v6_states_the_preset_design_and_freezes(tmp_path: Path) -> None:
    from protocols.freeze import freeze_plan, with_task_set
    from protocols.load import bundled_plans, load_plan

    plan = load_plan(bundled_plans()[MINI.plan.removesuffix(".toml")])
    design = MINI.heldout
    assert design is not None and plan.version == "6" and plan.decision.variance == "score_components"
    assert plan.design.seeds_per_arm == len(MINI.seeds) == 5 and plan.design.seed_ids == list(MINI.seeds)
    assert plan.design.n_tasks == design.n_tasks and plan.design.n_repositories == design.repos
    for said in (f"{design.twin_per_repo} tasks of stratum \"twin\"", f"{design.no_twin_per_repo} task of stratum",
                 f"{design.strata['twin']} twin + {design.strata['no_twin']} no-twin",
                 f"held-out seed {design.seed}", f"dev seed {design.dev_seed}",
                 f"training seed {design.generalization_seeds[0]} only" if design.generalization_seeds else "",
                 f"Training seeds {MINI.seeds[0]}-{MINI.seeds[-1]} per arm",
                 f"{design.generalization_repos} repositories x {design.generalization_tasks_per_repo} tasks",
                 f"task seed {MINI.task_seed}", f"{MINI.train_repos} repositories x {MINI.train_tasks_per_repo} tasks",
                 "never part of a primary endpoint"):
        assert said in " ".join(plan.notes.split()), said
    rec = freeze_plan(with_task_set(plan, name="minirepos-heldout", sha256="ab" * 32), out=tmp_path / "f.json")
    assert rec.protocol.version == "6" and rec.protocol.task_set.sha256 == "ab" * 32


def test_evaluate_generalization_evaluates_the_tier_and_reports_it_against_the_sft_start(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    import numpy as np

    from evalsuite.synthetic import SyntheticArm, SyntheticDesign, write_synthetic_runs
    from tgsuite.pipeline import generalization
    from tgsuite.pipeline.stage_runner import StageRunner

    paths = pipeline_paths(tmp_path)
    calls: list[Path] = []

    def fake_eval(run_dir: Path, tasks: Path, arms: dict[str, str], *_a: object) -> EvalOutputs:
        calls.append(tasks)
        d = SyntheticDesign(arms=tuple(SyntheticArm(a, 0.5, 0.5, seeds=(0, 1)) for a in ("base", "tg", "grpo")),
                            n_repos=2, tasks_per_repo=5)
        (made,) = write_synthetic_runs(tmp_path / "syn", d, rng=np.random.default_rng(0), protocol_hash=None,
                                       task_set_sha256="x")
        shutil.move(str(made), run_dir)
        return EvalOutputs.model_validate({"paths": {"manifest": str(run_dir / "manifest.json")},
                                           "finished_at": "2026-01-01T00:00:00Z", "n": 0, "scored": 0,
                                           "resolved": 0, "behaviour_ok": 0})

    monkeypatch.setattr(generalization, "stage_eval", fake_eval)
    runner = StageRunner(tmp_path, echo=lambda _m: None)
    preset = MINI.model_copy(update={"heldout": MINI.heldout.model_copy(update={"generalization_seeds": None})})
    ckpts = {f"{a}@s{s}": "m" for a in ("base", "tg", "grpo") for s in (0, 1)}
    held = {"paths": {"tasks": "t"}, "sha256": "h", "name": "h", "n": 1}
    assert generalization.evaluate_generalization(runner, paths, preset, TaskSetOutputs.model_validate(held), ckpts,
                                                  {}, "p") == []
    rows = generalization.evaluate_generalization(runner, paths, preset, TaskSetOutputs.model_validate(
        {**held, "generalization": {"sha256": "g", "name": "g", "n": 1}}), ckpts, {}, "p")
    assert calls == [paths.generalization_tasks]
    assert [(r.study, r.label, r.reference) for r in rows] == [("generalization", "base", True),
                                                                ("generalization", "grpo", False),
                                                                ("generalization", "tg", False)]
    assert all(r.rates[1].n == 20 for r in rows)  # 10 tasks x 2 seeds, pooled


def test_generalization_seeds_choose_the_checkpoints_the_tier_evaluates(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from tgsuite.pipeline import generalization
    from tgsuite.pipeline.stage_runner import StageRunner

    seen: list[dict[str, str]] = []

    def fake_eval(run_dir: Path, tasks: Path, arms: dict[str, str], *_a: object) -> EvalOutputs:
        seen.append(dict(arms))
        raise RuntimeError("stop after the arms are chosen")

    monkeypatch.setattr(generalization, "stage_eval", fake_eval)
    ckpts = {"base": "b", **{f"{a}@s{s}": "m" for a in ("tg", "grpo") for s in MINI.seeds}}
    held = {"paths": {"tasks": "t"}, "sha256": "h", "name": "h", "n": 1, "generalization": {"sha256": "g", "name": "g",
                                                                                           "n": 1}}  # fmt: skip
    with pytest.raises(RuntimeError, match="stop after"):
        generalization.evaluate_generalization(StageRunner(tmp_path, echo=lambda _m: None), pipeline_paths(tmp_path),
                                               MINI, TaskSetOutputs.model_validate(held), ckpts, {}, "p")  # fmt: skip
    assert MINI.heldout is not None and MINI.heldout.generalization_seeds == (MINI.seeds[0],)
    assert sorted(seen[0]) == ["base", f"grpo@s{MINI.seeds[0]}", f"tg@s{MINI.seeds[0]}"]


def test_generalization_seeds_must_be_training_seeds() -> None:
    from tgsuite.pipeline.presets import Preset

    bad = MINI.model_dump()
    bad["heldout"]["generalization_seeds"] = (99,)
    with pytest.raises(ValueError, match="generalization_seeds"):
        Preset.model_validate(bad)
