"""tgsuite.pipeline.tiers: the behaviour-tier study's stage wiring with fake SFT, training and evaluation stages (no
Docker, no model), checked through the real task-set filter, run-directory reader, Wilson rates and stage runner."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import tgsuite.pipeline.studies as ps
import tgsuite.pipeline.tiers as pt
from evalsuite.rates import wilson_ci
from harness.minirepos import make_mini
from harness.schema import ArmSpec, BehaviourResult, EpisodeResult, RunManifest
from harness.tasks import load_task_set
from tgsuite.pipeline import stages
from tgsuite.pipeline.presets import SMOKE, Preset
from tgsuite.pipeline.records import CheckpointFiles, EvalOutputs, Paths, SftOutputs, SftReport, TrainOutputs
from tgsuite.pipeline.stage_runner import StageRunner
from tgsuite.pipeline.stages import pipeline_paths as _paths

SIZES = pt.TierSizes(seeds=(0, 1))


def _ok(label: str, trained: str | None, checker: str, i: int) -> bool:
    """Fake outcome: the base complies on every 4th episode; an RL arm on its own tier complies on all but every
    3rd (tg) or on every 2nd (grpo); other tiers as the base."""
    if label == "base" or checker != trained:
        return i % 4 == 0
    return i % 3 != 0 if label == "tg" else i % 2 == 0


def _write_run(run_dir: Path, task_dir: Path, arms: dict[str, str]) -> EvalOutputs:
    ts = load_task_set(task_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    ids = [i.instance_id for i in ts.instances]
    man = RunManifest(run_id=run_dir.name, created_at="2026-01-01T00:00:00Z", task_set_name=ts.name,
                      task_set_sha256=ts.sha256, instance_ids=ids, seeds=[0], sandbox="local", isolated=False,
                      arms=[ArmSpec(name=a, policy=f"hf:{p}") for a, p in arms.items()])
    (run_dir / "manifest.json").write_text(man.model_dump_json())
    for arm in arms:
        label = "base" if arm == "base" else arm.split("_", 1)[0]
        trained = None if arm == "base" else next(t for t in pt.TIERS if pt.slug(t) in arm)
        for k, inst in enumerate(ts.instances):
            i = k + (int(arm[-1]) if arm != "base" else 0)
            beh = [BehaviourResult(checker=c, ok=_ok(label, trained, c, i),
                                   turn_verdicts=["PASS" if _ok(label, trained, c, i) else "FAIL"] if i % 5 else ["NA"])
                   for c in inst.behaviour]
            ok = all(b.ok for b in beh)
            code = i % 2 == 1
            res = EpisodeResult(run_id=run_dir.name, instance_id=inst.instance_id, repo=inst.repo, cluster=inst.repo,
                                arm=arm, policy=arm, seed=0, status="ok" if code else "tests_failed",
                                failure_class="none" if code else "agent", resolved=code, behaviour_ok=ok,
                                joint_ok=ok and code, behaviour=beh)
            p = run_dir / "episodes" / arm / inst.instance_id / "s0" / "a0" / "result.json"
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(res.model_dump_json())
    return EvalOutputs.model_validate({"paths": {"manifest": str(run_dir / "manifest.json")}, "finished_at": "2026-01-01T00:00:00Z",
                                       "n": len(arms) * len(ids), "scored": 0, "resolved": 0, "behaviour_ok": 0})


@pytest.fixture()
def fakes(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[Any]]:
    calls: dict[str, list[Any]] = {"sft": [], "train": [], "eval": []}

    def fake_sft(paths: Paths, preset: Any) -> SftOutputs:
        calls["sft"].append((paths.sft, dict(preset.sft)))
        (paths.sft / "model").mkdir(parents=True, exist_ok=True)
        return SftOutputs.model_validate({"paths": {"model": str(paths.sft / "model")},
                                          "report": {"model_dir": str(paths.sft / "model")}})

    def fake_train(run_dir: Path, paths: Paths, preset: Any, arm: str, seed: int,
                   protocol_hash: str | None = None) -> TrainOutputs:
        calls["train"].append((run_dir, paths.sft, arm, seed, preset.rl["reward.checker"], protocol_hash))
        (run_dir / "ckpt").mkdir(parents=True, exist_ok=True)
        return TrainOutputs(paths=CheckpointFiles(checkpoint=str(run_dir / "ckpt")))

    def fake_eval(run_dir: Path, heldout: Path, arms: dict[str, str], preset: Any, protocol_hash: Any,
                  excluded: Any, feedback: str | None = None) -> EvalOutputs:
        calls["eval"].append((heldout, sorted(arms), feedback))
        return _write_run(run_dir, heldout, arms)

    monkeypatch.setattr(stages, "stage_sft", fake_sft)
    monkeypatch.setattr(stages, "stage_train", fake_train)
    monkeypatch.setattr(stages, "stage_eval", fake_eval)
    return calls


def _ctx(out: Path, preset: Preset = SMOKE) -> ps.StudyContext:
    paths = _paths(out)
    make_mini(paths.heldout_tasks, split="heldout", repos=4, tasks_per_repo=2, seed=3)
    make_mini(paths.train_tasks, split="train", repos=1, tasks_per_repo=2, seed=3)
    return ps.StudyContext(preset=preset, paths=paths, protocol_sha256="p" * 64, heldout_sha256="h" * 64,
                           sft_report=SftReport(model_dir=str(out / "sft" / "model")), ckpts={}, excluded={})


def test_write_unseen_tasks_keeps_only_unseen_with_all_tiers(tmp_path: Path) -> None:
    make_mini(tmp_path / "h", split="heldout", repos=2, tasks_per_repo=2, seed=3)
    rec = pt.write_unseen_tasks(tmp_path / "h", tmp_path / "u", pt.TIERS)
    sub = load_task_set(tmp_path / "u")
    assert {i.template_tier for i in sub.instances} == {"unseen_templates"} and len(sub.instances) == 2
    assert rec.sha256 == sub.sha256 and rec.instance_ids == [i.instance_id for i in sub.instances]
    for inst in sub.instances:
        assert set(pt.TIERS) <= set(inst.behaviour) and "tool_protocol@v1" in inst.behaviour
    make_mini(tmp_path / "seen", split="heldout", repos=1, tasks_per_repo=1, seed=3)
    with pytest.raises(ValueError, match="unseen_templates"):
        pt.write_unseen_tasks(tmp_path / "seen", tmp_path / "u2", pt.TIERS)


def test_study_stages_wiring_and_rates(tmp_path: Path, fakes: dict[str, list[Any]]) -> None:
    ctx = _ctx(tmp_path)
    res = pt.run_behaviour_tiers(StageRunner(tmp_path, echo=lambda s: None), ctx, SIZES)
    root = ctx.paths.train / "studies" / "tiers"
    # SFT: its own directory, the preset's settings plus all three tiers' reminders
    ((sft_dir, sft),) = fakes["sft"]
    assert sft_dir == root / "sft" and sft["hint_checkers"] == list(pt.TIERS) and sft["hint_share"] == 0.6
    assert {k: v for k, v in sft.items() if k not in ("hint_checkers", "hint_share")} == SMOKE.sft
    # RL: tiers x arms x seeds from the tier base, reward.checker = the tier, protocol hash passed
    assert len(fakes["train"]) == 3 * 2 * 2
    assert {(a, s, c) for _, _, a, s, c, _ in fakes["train"]} == {(a, s, c) for a in ("grpo", "tg") for s in (0, 1)
                                                                   for c in pt.TIERS}
    assert all(sd == root / "sft" and ph == "p" * 64 for _, sd, _, _, _, ph in fakes["train"])
    # eval: one run, no hints, the unseen instances only, base + every checkpoint
    ((heldout, arms, feedback),) = fakes["eval"]
    ts = load_task_set(heldout)
    assert feedback is None and {i.template_tier for i in ts.instances} == {"unseen_templates"}
    assert len(ts.instances) == 4 and len(arms) == 1 + 12 and "base" in arms
    # results: tier x (base, grpo, tg), with the fake outcomes' Wilson rates
    assert [(r.tier, r.arm) for r in res.rows] == [(t, a) for t in pt.TIERS for a in ("base", "grpo", "tg")]
    assert res.n_instances == 4 and res.task_set == ts.name
    for r in res.rows:
        label, n = r.arm, (4 if r.arm == "base" else 8)
        idx = range(4) if label == "base" else [k + s for s in (0, 1) for k in range(4)]
        k = sum(_ok(label, None if label == "base" else r.tier, r.tier, i) for i in idx)
        assert (r.compliance.successes, r.compliance.n) == (k, n), r
        assert (r.compliance.ci_low, r.compliance.ci_high) == pytest.approx(wilson_ci(k, n))
        assert r.compliance_applicable.n == sum(1 for i in idx if i % 5)
        assert r.resolved.successes == sum(i % 2 == 1 for i in idx)
        assert r.seeds == ([] if label == "base" else [0, 1])
    tg_ask = next(r for r in res.rows if r.tier == "ask_first@v1" and r.arm == "tg")
    assert tg_ask.compliance.rate == pytest.approx(5 / 8)
    assert (tmp_path / "studies" / "behaviour_tiers.json").is_file()
    # resume: every stage is up to date
    before = {k: len(v) for k, v in fakes.items()}
    again = pt.run_behaviour_tiers(StageRunner(tmp_path, echo=lambda s: None), ctx, SIZES)
    assert {k: len(v) for k, v in fakes.items()} == before and again == res


def test_run_studies_dispatches_tiers_alone(tmp_path: Path, fakes: dict[str, list[Any]],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    assert "behaviour_tiers" in ps.STUDIES and ps.parse_studies("behaviour_tiers") == {"behaviour_tiers"}
    preset = SMOKE.model_copy(update={"tier_sizes": pt.TierSizes(seeds=(0,), tiers=("ask_first@v1",))})
    tiers_eval = stages.stage_eval  # the fixture's fake: the tier study's own eval is expected

    def no_plain_eval(run_dir: Path, *a: Any, **k: Any) -> EvalOutputs:
        if not run_dir.name.startswith("tiers_eval"):
            pytest.fail("no plain study eval without its models")
        return tiers_eval(run_dir, *a, **k)

    monkeypatch.setattr(stages, "stage_eval", no_plain_eval)
    ex = ps.run_studies(StageRunner(tmp_path, echo=lambda s: None), _ctx(tmp_path, preset), {"behaviour_tiers"})
    assert ex.behaviour_tiers is not None and ex.noisy_feedback is None and not ex.hint_probes
    assert [(r.tier, r.arm) for r in ex.behaviour_tiers.rows] == [("ask_first@v1", a) for a in ("base", "grpo", "tg")]
    assert fakes["sft"][-1][1]["hint_checkers"] == list(pt.TIERS)  # the base is taught all three tiers regardless
    with pytest.raises(ValueError, match="not tiers of this study"):
        pt.run_behaviour_tiers(StageRunner(tmp_path, echo=lambda s: None), _ctx(tmp_path / "x"),
                               pt.TierSizes(seeds=(0,), tiers=("tool_protocol@v1",)))


def test_tier_sizes_cover_presets_and_tier_configs_load() -> None:
    import random

    from harness.behaviour import get_checker
    from repro.config import load_config
    from repro.rl_setup import hint_source
    from tgsuite.pipeline.presets import PRESETS

    assert all(pt.tier_sizes(p) == p.tier_sizes for p in PRESETS.values())
    with pytest.raises(ValueError, match="no behaviour-tier sizes"):
        pt.tier_sizes(SMOKE.model_copy(update={"name": "huge", "tier_sizes": None}))
    for tier in pt.TIERS:
        for arm in ("grpo", "tg"):
            cfg = load_config(arm=arm, overrides=SMOKE.with_rl({"reward.checker": tier}).rl)
            assert cfg.reward.checker == tier
        assert hint_source(cfg)(None, 0, random.Random(0)) == get_checker(tier).hint_text  # TG's hint is the tier's
