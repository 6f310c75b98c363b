"""tgsuite.pipeline.studies: study stages with fake training and evaluation (no Docker, no model), checked end to end
through the real run-directory reader, the real evalsuite study analyses and the real stage runner."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import evalsuite.study_tables as ST
import tgsuite.pipeline.studies as ps
from evalsuite.schema import Exploratory
from evalsuite.study_tables import ArmEpisodes
from harness.feedback_spec import parse_feedback
from harness.schema import ArmSpec, EpisodeMetrics, EpisodeResult, RunManifest
from repro.checkpoint import CheckpointInfo
from tgsuite.pipeline import stages
from tgsuite.pipeline.presets import SMOKE
from tgsuite.pipeline.records import CheckpointFiles, EvalOutputs, SftReport, TrainOutputs
from tgsuite.pipeline.stage_runner import StageRunner
from tgsuite.pipeline.stages import pipeline_paths as _paths

N_INST = 6
FLOPS_PER_STEP = {"grpo": 100.0, "tg": 150.0}  # TG's extra 50 = the teacher forward


def _write_ckpt(run_dir: Path, arm: str, seed: int, steps: int, tag: str) -> str:
    d = run_dir / "checkpoints" / f"step_{steps}"
    d.mkdir(parents=True, exist_ok=True)
    per = FLOPS_PER_STEP["tg" if arm.startswith("tg") else "grpo"]
    compute = {"tokens": {"rollout": 10 * steps, "teacher": (5 * steps if arm.startswith("tg") else 0),
                          "trainer": 10 * steps}, "wall_s": {"rollout": 1.0 * steps, "trainer": 0.5 * steps},
               "flops_total": per * steps, "peak_rss_bytes": 2**30, "peak_cuda_bytes": None}
    info = CheckpointInfo(path=str(d), step=steps, sha256=f"{tag}-{arm}-{seed}-{steps}", config_sha256="c", arm=arm,
                          seed=seed, compute=compute)
    (d / "checkpoint.json").write_text(info.model_dump_json())
    return str(d)


def _outcome(label: str, i: int, corrective: bool) -> tuple[bool, bool]:
    code = i % 3 == 0
    if corrective:
        return True, code
    beh = {"base": False, "grpo": i % 3 == 0, "tg": i % 2 == 0}.get(label, i % 4 == 0)
    return beh, code


def _write_run(run_dir: Path, arms: dict[str, str], corrective: bool, kind: str | None = None) -> EvalOutputs:
    run_dir.mkdir(parents=True, exist_ok=True)
    ids = [f"r{i % 2}__t{i}" for i in range(N_INST)]
    man = RunManifest(run_id=run_dir.name, created_at="2026-01-01T00:00:00Z", task_set_name="heldout",
                      task_set_sha256="h", instance_ids=ids, arms=[ArmSpec(name=a, policy=f"hf:{p}") for a, p in arms.items()],
                      seeds=[0], sandbox="local", isolated=False)
    (run_dir / "manifest.json").write_text(man.model_dump_json())
    for arm in arms:
        label = arm.split("@")[0].rsplit("_s", 1)[0]  # tg_s0 (a study's name) or tg@s0 (the main evaluation's)
        for i, iid in enumerate(ids):
            beh, code = _outcome(label, i, corrective)
            res = EpisodeResult(run_id=run_dir.name, instance_id=iid, repo=f"r{i % 2}", cluster=f"r{i % 2}", arm=arm,
                                policy=arm, seed=0, status="ok" if code else "tests_failed",
                                failure_class="none" if code else "agent", resolved=code, behaviour_ok=beh,
                                joint_ok=beh and code, feedback_kind=kind,
                                metrics=EpisodeMetrics(steps=2, edits=int(code)))
            p = run_dir / "episodes" / arm / iid / "s0" / "a0" / "result.json"
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(res.model_dump_json())
    return EvalOutputs.model_validate({"paths": {"manifest": str(run_dir / "manifest.json")}, "finished_at": "2026-01-01T00:00:00Z",
                                       "n": len(arms) * N_INST, "scored": 0, "resolved": 0, "behaviour_ok": 0})


@pytest.fixture()
def fakes(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[Any]]:
    calls: dict[str, list[Any]] = {"train": [], "eval": [], "eval_fb": [], "loop": []}

    def fake_train(run_dir: Path, paths: dict[str, Path], preset: Any, arm: str, seed: int,
                   protocol_hash: str | None = None) -> TrainOutputs:
        calls["train"].append((run_dir, arm, seed, dict(preset.rl)))
        ckpt = _write_ckpt(run_dir, arm, seed, int(preset.rl["run.steps"]), run_dir.parent.name)
        return TrainOutputs(paths=CheckpointFiles(checkpoint=ckpt))

    def fake_eval(run_dir: Path, heldout: Path, arms: dict[str, str], preset: Any, protocol_hash: Any,
                  excluded: Any, feedback: str | None = None) -> EvalOutputs:
        if feedback is None:
            calls["eval"].append(sorted(arms))
        else:
            calls["eval_fb"].append((sorted(arms), feedback))
        kind = getattr(parse_feedback(feedback), "kind", None) if feedback else None  # probe:NAME -> probe kind
        return _write_run(run_dir, arms, corrective=feedback is not None, kind=kind)

    def fake_loop(run_dir: Path, paths: dict[str, Path], preset: Any, arm: str, seed: int,
                  protocol_hash: str | None = None, loop: dict[str, Any] | None = None) -> TrainOutputs:
        calls["loop"].append((run_dir, arm, seed, dict(loop or {})))
        ckpt = _write_ckpt(run_dir, arm, seed, int(preset.rl["run.steps"]), "loop")
        return TrainOutputs(paths=CheckpointFiles(checkpoint=ckpt))

    monkeypatch.setattr(stages, "stage_train", fake_train)
    monkeypatch.setattr(stages, "stage_loop", fake_loop)
    monkeypatch.setattr(stages, "stage_eval", fake_eval)
    return calls


def _ctx(out: Path, **kw: Any) -> ps.StudyContext:
    paths = _paths(out)
    (out / "sft" / "model").mkdir(parents=True)
    ckpts = {"base": str(out / "sft" / "model")}
    for arm in ("grpo", "tg"):
        for seed in SMOKE.seeds:
            ckpts[f"{arm}@s{seed}"] = _write_ckpt(paths.train / arm / f"s{seed}", arm, seed, 2, "main")
    return ps.StudyContext(preset=SMOKE, paths=paths, protocol_sha256="p" * 64, heldout_sha256="h" * 64,
                           sft_report=SftReport(model_dir=ckpts["base"]), ckpts=ckpts, excluded={}, **kw)


def test_parse_studies() -> None:
    assert ps.parse_studies("all") == set(ps.STUDIES)
    assert ps.parse_studies("none") == set() == ps.parse_studies("")
    assert ps.parse_studies("can_do, ablations") == {"can_do", "ablations"}
    with pytest.raises(ValueError, match="unknown study noisy.*comma list"):
        ps.parse_studies("noisy,can_do")


def test_matched_steps() -> None:
    assert ps.matched_steps([150.0, 150.0], [100.0, 100.0], 2) == 3
    assert ps.matched_steps([300.0], [100.0], 2) == 6  # exact ratio: no extra step from float noise
    assert ps.matched_steps([50.0], [100.0], 4) == 4  # never fewer steps than the baseline ran
    with pytest.raises(ValueError, match="positive baseline FLOPs"):
        ps.matched_steps([1.0], [0.0], 2)


def test_study_sizes_name_real_arms_and_mixes_load() -> None:
    from repro.config import arm_names, load_config
    from tgsuite.pipeline.presets import PRESETS

    for sizes in [p.study_sizes for p in PRESETS.values()]:
        assert sizes is not None
        assert set(sizes.ablations) <= set(arm_names())
        for mix in sizes.noisy_mixes.values():
            sets = [f"{k}={json.dumps(v)}" for k, v in ps.mix_overrides(mix).items()]
            cfg = load_config(arm="tg", sets=sets)
            assert cfg.guidance.feedback == "mixture" and cfg.guidance.feedback_mix == mix
    with pytest.raises(ValueError, match="all correct"):
        ps.StudySizes(seeds=(0,), noisy_mixes={"c": {"correct": 1.0}}, ablations=())
    with pytest.raises(ValueError, match="summing to 1"):
        ps.StudySizes(seeds=(0,), noisy_mixes={"x": {"correct": 0.5, "bogus": 0.5}}, ablations=())


def test_noisy_frame_separates_mixes_with_equal_scores() -> None:
    frame = pd.DataFrame({"label": ["tg", "tg_mix_a", "tg_mix_b"], "behaviour_ok": [True, False, True],
                          "code_ok": [True] * 3, "joint_ok": [True, False, True]})
    df, display = ST.noisy_frame(frame, {"a": {"correct": 0.5, "irrelevant": 0.5}, "b": {"correct": 0.75, "wrong": 0.25}})
    assert sorted(df["arm"].unique()) == ["tg[a]", "tg[b]"]
    assert sorted(df.loc[df["arm"] == "tg[a]", "feedback_kind"]) == ["correct", "wrong=0.25"]
    assert display[("tg[a]", "correct")] == display[("tg[b]", "correct")] == "train:correct=1"
    assert display[("tg[a]", "wrong=0.25")] == "train:correct=0.5,irrelevant=0.5"
    assert display[("tg[b]", "wrong=0.25")] == "train:correct=0.75,wrong=0.25"


def test_can_do_rows_pair_only_matching_states() -> None:
    cols = dict(label="tg", seed=0, repo="r", code_ok=False, joint_ok=False, hinted=True)
    plain = pd.DataFrame([{**cols, "runner_arm": "tg_s0", "instance_id": i, "episode_seed": 0, "behaviour_ok": False}
                          for i in ("a", "b")])
    corr = pd.DataFrame([{**cols, "runner_arm": "tg_s0", "instance_id": i, "episode_seed": 0, "behaviour_ok": True}
                         for i in ("b", "c")])
    rows = ST.can_do_rows(plain, corr)
    assert [r.state_id for r in rows] == ["b/train_s0/ep0"]
    assert not rows[0].plain_behaviour_ok and rows[0].corrective_behaviour_ok


# behaviour_tiers trains its own base and needs task sets on disk: tests/tgsuite/test_pipeline_tiers.py covers it
STUDIES_HERE = set(ps.STUDIES) - {"behaviour_tiers"}


def test_run_studies_end_to_end_and_resume(tmp_path: Path, fakes: dict[str, list[Any]]) -> None:
    ctx = _ctx(tmp_path)
    ex = ps.run_studies(StageRunner(tmp_path, echo=lambda s: None), ctx, STUDIES_HERE)
    assert Exploratory.model_validate_json(ex.model_dump_json()) == ex
    # training: two hint mixes, GRPO at matched FLOPs (2 steps x 150/100 -> 3), one ablation; seed 0 only
    trained = {(d.parent.name, arm, rl.get("run.steps"), rl.get("guidance.feedback")) for d, arm, _, rl in fakes["train"]}
    assert trained == {("tg_mix_half_irrelevant", "tg", 2, "mixture"), ("tg_mix_quarter_wrong", "tg", 2, "mixture"),
                       ("grpo_eqc", "grpo", 3, None), ("tg_no_fmt_reward", "tg_no_fmt_reward", 2, None)}
    assert [c for c in fakes["eval_fb"] if not c[1].startswith("probe:")] == [(["base", "tg_s0"], "correct@before_finish")]
    # hint probes: one eval per probe on the can-do models; the fake's probe episodes edit exactly as the plain ones
    assert sorted(f for _, f in fakes["eval_fb"] if f.startswith("probe:")) == ["probe:ask_approved", "probe:explain"]
    assert {(r.probe.name, r.arm) for r in ex.hint_probes} == {(p, a) for p in ("ask_approved", "explain")
                                                                for a in ("base", "tg")}
    assert all(e.change.b == e.change.c == 0 and r.delivered == N_INST for r in ex.hint_probes for e in r.endpoints)
    # noisy feedback: the main tg runs (behaviour on even instances: 3/6) vs each mix (i % 4 == 0: 2/6)
    rates = {(r.arm, r.feedback_kind): r.rate for r in ex.noisy_feedback.rows if r.endpoint == "behaviour_ok"}
    assert rates[("tg[quarter_wrong]", "train:correct=1")].successes == 3
    assert rates[("tg[quarter_wrong]", "train:correct=0.75,wrong=0.25")].successes == 2
    assert rates[("tg[half_irrelevant]", "train:correct=0.5,irrelevant=0.5")].n == N_INST
    assert {t.arm for t in ex.noisy_feedback.trends} == {"tg[half_irrelevant]", "tg[quarter_wrong]"}
    # equal compute: tg (2 x 150) vs grpo_eqc (3 x 100) at 300 FLOPs; grpo listed for reference
    ec = ex.equal_compute
    assert {r.arm for r in ec.compute} == {"tg", "grpo", "grpo_eqc"}
    assert any("achieved FLOPs ratio tg / grpo_eqc = 1.000" in n for n in ec.notes)
    assert ec.ratios["flops"] == pytest.approx(1.0) and ec.totals["tg"]["teacher_forward_tokens"] == 10
    joint = next(c for c in ec.comparisons if c.endpoint == "behaviour_ok")
    assert joint.budget == 300.0 and joint.treatment_rate == pytest.approx(3 / 6)
    assert joint.baseline_rate == pytest.approx(2 / 6)  # grpo_eqc is not a main label: i % 4 == 0
    # can do: base never complies unprompted and always with the corrective hint
    cd = {c.arm: c for c in ex.can_do_vs_does_do}
    base_b = next(ch for ch in cd["base"].changes if ch.endpoint == "behaviour_ok")
    assert (cd["base"].n_states, base_b.b, base_b.c, base_b.estimate) == (N_INST, N_INST, 0, 1.0)
    assert "delivered in 6 of 6 corrective episodes" in cd["base"].notes[-1]
    code = next(ch for ch in cd["tg"].changes if ch.endpoint == "code_ok")
    assert code.b == code.c == 0
    # the report's study sections render it (tables and figures)
    from evalsuite.schema import AnalysisResult
    from reports.studies import can_do_section, equal_compute_section, noisy_section

    a = AnalysisResult.model_construct(exploratory=ex, arms={"treatment": "tg", "baseline": "grpo"})
    assert [len(s.tables) for s in (noisy_section(a), equal_compute_section(a), can_do_section(a))] == [2, 3, 1]
    rec = json.loads((tmp_path / "studies" / "studies.json").read_text())
    assert rec["ablations"]["tg_no_fmt_reward"]["behaviour_ok"]["successes"] == 2 and rec["errors"] == {}
    # ablations and the production loop: per-label held-out rates beside the main tg runs (the reference)
    (loop_call,) = fakes["loop"]
    assert loop_call[0].parent.name == "loop" and loop_call[1:3] == ("tg", 0)
    assert SMOKE.study_sizes is not None
    assert loop_call[3] == SMOKE.study_sizes.loop and loop_call[3]["distill.steps"] == 1
    got = {(r.study, r.label, r.reference): {x.endpoint: (x.successes, x.n) for x in r.rates} for r in ex.label_rates}
    assert set(got) == {("ablations", "tg", True), ("ablations", "tg_no_fmt_reward", False),
                        ("production_loop", "tg", True), ("production_loop", "loop", False)}
    assert got[("production_loop", "tg", True)]["behaviour_ok"] == (3, N_INST)  # even instances
    assert got[("production_loop", "loop", False)]["behaviour_ok"] == (2, N_INST)  # i % 4 == 0
    assert all(x.se_clustered is not None for r in ex.label_rates for x in r.rates)
    from reports.studies import label_rates_section

    sec = label_rates_section(a)
    assert sec.available and len(sec.tables[0].rows) == 4
    assert "reference" in sec.tables[0].rows[0][2].text and "2 / 6" in sec.tables[0].rows[3][3].text
    # re-run: every stage is up to date, nothing trains or evaluates again, same result
    n = {k: len(v) for k, v in fakes.items()}
    again = ps.run_studies(StageRunner(tmp_path, echo=lambda s: None), ctx, STUDIES_HERE)
    assert {k: len(v) for k, v in fakes.items()} == n and again == ex


def test_adding_a_study_only_runs_what_it_needs(tmp_path: Path, fakes: dict[str, list[Any]]) -> None:
    ctx = _ctx(tmp_path)
    assert ps.run_studies(StageRunner(tmp_path, echo=lambda s: None), ctx, set()) == Exploratory()
    ex = ps.run_studies(StageRunner(tmp_path, echo=lambda s: None), ctx, {"can_do"})
    assert fakes["train"] == [] and ex.noisy_feedback is None and ex.equal_compute is None
    assert fakes["eval"] == [["base", "tg_s0"]]
    ps.run_studies(StageRunner(tmp_path, echo=lambda s: None), ctx, {"can_do", "ablations"})
    assert [a for _, a, _, _ in fakes["train"]] == ["tg_no_fmt_reward"]
    # only the new model is evaluated; base and tg_s0 are read from the first plain evaluation
    assert fakes["eval"][1:] == [["tg_no_fmt_reward_s0"]] and len(fakes["eval_fb"]) == 1
    before = json.loads((tmp_path / "studies" / "studies.json").read_text())["episodes"]
    plain_dir = {k: v["run_dir"] for k, v in before["plain"].items()}
    assert plain_dir["base"] == plain_dir["tg_s0"] != plain_dir["tg_no_fmt_reward_s0"]
    # tg retrained in place (same path, new weights): tg alone is evaluated again, in a fresh directory, never
    # mixing episodes of the old weights
    _write_ckpt(ctx.paths.train / "tg" / "s0", "tg", 0, 2, "retrained")
    ps.run_studies(StageRunner(tmp_path, echo=lambda s: None), ctx, {"can_do", "ablations"})
    after = json.loads((tmp_path / "studies" / "studies.json").read_text())["episodes"]
    assert fakes["eval"][2:] == [["tg_s0"]] and [a for a, _ in fakes["eval_fb"]] == [["base", "tg_s0"], ["tg_s0"]]
    assert all(after[k]["tg_s0"] != before[k]["tg_s0"] and after[k]["base"] == before[k]["base"]
               for k in ("plain", "corrective"))


def test_a_damaged_index_names_the_file_and_the_fix(tmp_path: Path, fakes: dict[str, list[Any]]) -> None:
    ctx = _ctx(tmp_path)
    ps.run_studies(StageRunner(tmp_path, echo=lambda s: None), ctx, {"can_do"})
    (index,) = (tmp_path / "eval" / "studies").glob("study_eval_plain-*/study_models.json")
    index.write_text("{}")
    with pytest.raises(ValueError, match=r"study_models.json: not a study evaluation index.*fix: delete this file"):
        ps.run_studies(StageRunner(tmp_path, echo=lambda s: None), ctx, {"can_do"})
    index.unlink()  # the fix: the finished stage writes the index again
    ps.run_studies(StageRunner(tmp_path, echo=lambda s: None), ctx, {"can_do"})
    assert index.is_file() and fakes["eval"] == [["base", "tg_s0"]]


def test_plain_evaluations_read_the_main_evaluation(tmp_path: Path, fakes: dict[str, list[Any]]) -> None:
    """The main evaluation already holds the unhinted episodes of the SFT start and the arms' checkpoints (under
    the names ``base`` and ``tg@s0``): the studies' plain evaluation reads them and evaluates only new models;
    hinted evaluations still run every model."""
    main = _ctx(tmp_path)
    ckpts = main.ckpts
    _write_run(tmp_path / "eval" / "base", {"base": ckpts["base"]}, corrective=False)
    _write_run(tmp_path / "eval" / "arms", {k: v for k, v in ckpts.items() if k != "base"}, corrective=False)
    episodes = {p: ArmEpisodes(tmp_path / "eval" / ("base" if k == "base" else "arms"), k) for k, p in ckpts.items()}
    ctx = replace(main, main_episodes=episodes)
    ex = ps.run_studies(StageRunner(tmp_path, echo=lambda s: None), ctx, {"can_do", "noisy_feedback"})
    assert sorted(sum(fakes["eval"], [])) == ["tg_mix_half_irrelevant_s0", "tg_mix_quarter_wrong_s0"]
    assert fakes["eval_fb"] == [(["base", "tg_s0"], "correct@before_finish")]
    rec = json.loads((tmp_path / "studies" / "studies.json").read_text())["episodes"]["plain"]
    assert rec["tg_s0"] == {"run_dir": str(tmp_path / "eval" / "arms"), "arm": "tg@s0"}
    # the same answers as when the study evaluates them itself (the fake's outcomes depend on the label only)
    alone = ps.run_studies(StageRunner(tmp_path / "alone", echo=lambda s: None), _ctx(tmp_path / "alone"),
                           {"can_do", "noisy_feedback"})
    assert ex == alone


def test_missing_main_checkpoint_names_the_fix(tmp_path: Path, fakes: dict[str, list[Any]]) -> None:
    assert SMOKE.study_sizes is not None
    sizes = SMOKE.study_sizes.model_copy(update={"seeds": (5,)})
    with pytest.raises(ValueError, match=r"tg@s5.*did not train.*subset of the preset's seeds"):
        ps.run_studies(StageRunner(tmp_path, echo=lambda s: None), _ctx(tmp_path, sizes=sizes), {"noisy_feedback"})
    with pytest.raises(ValueError, match="unknown studies"):
        ps.run_studies(StageRunner(tmp_path, echo=lambda s: None), _ctx(tmp_path / "x"), {"hints"})


@pytest.mark.slow
def test_can_do_with_the_real_runner_and_scripted_expert(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Integration (local sandbox, no model): the scripted expert's plain summary fails markdown@v1; with the
    corrective hint before finish it passes. Both evals go through the real runner: tgsuite.pipeline.stages.stage_eval for
    the plain answers and (with the corrective hint) for the corrective ones, then the real pairing and can_do_study."""
    from harness.minirepos import make_mini
    from harness.policies import make_policy
    from harness.rundir import load_run

    def expert(model_dir: str, preset: Any) -> Any:
        return make_policy("expert")

    monkeypatch.setattr(stages, "eval_policy", expert)
    paths = _paths(tmp_path)
    make_mini(paths.heldout_tasks, split="heldout", repos=1, tasks_per_repo=1, seed=0)
    preset = SMOKE.model_copy(update={"eval": SMOKE.eval.model_copy(update={"sandbox": "local", "max_turns": 8}), "workers": 1})
    ctx = ps.StudyContext(preset=preset, paths=paths, protocol_sha256="p" * 64, heldout_sha256="h",
                          sft_report=SftReport(model_dir="unused"),
                          ckpts={"base": "unused"}, excluded={})
    models = {"base": ps.StudyModel("base", "base", -1, "unused")}
    runner = StageRunner(tmp_path, echo=lambda s: None)
    plain_src = ps.eval_models(runner, ctx, "plain", models, None)
    corr_src = ps.eval_models(runner, ctx, "corr", models, "correct@before_finish")
    corr_dir = corr_src["base"].run_dir
    assert plain_src["base"].run_dir.parent == corr_dir.parent == paths.eval / "studies"
    arms = ps.study_arms(models)
    plain, corr = ST.study_frame(plain_src, arms), ST.study_frame(corr_src, arms)
    assert list(corr["runner_arm"]) == ["base"] and "correct" in {r.feedback_kind for r in load_run(corr_dir).results}
    assert len(plain) == len(corr) == 1 and bool(plain["code_ok"].iloc[0]) and bool(corr["code_ok"].iloc[0])
    (res,) = ST.can_do_result(plain, corr, "correct@before_finish")
    assert "delivered in 1 of 1" in res.notes[-1]
    beh = next(c for c in res.changes if c.endpoint == "behaviour_ok")
    assert (beh.a, beh.b, beh.c, beh.d) == (0, 1, 0, 0)
