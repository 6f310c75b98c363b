"""evalsuite.study_tables: the exploratory studies' tables, built from run directories without torch or docker —
the highest attempt counts, unscored (infra) episodes and unknown arms are left out, labels and seeds come from
the ``StudyArms`` mapping, and the tier frame refuses an episode its checkers did not judge."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from evalsuite.rates import StatsInputError
from evalsuite.schema import CheckpointEval, ProbeInfo
from evalsuite.study_tables import (
    ArmEpisodes,
    equal_compute_result,
    probe_frame,
    probe_pairs,
    study_frame,
    successes,
    tier_frame,
    whole_run,
)
from harness.schema import ArmSpec, BehaviourResult, EpisodeMetrics, EpisodeResult, RunManifest

ARMS = {"tg_s0": ("tg", 0), "base": ("base", -1)}
TIERS = ("tool_args@v1", "markdown@v1")


def _result(arm: str, iid: str, *, resolved: bool, failure: str = "agent", kind: str | None = None,
            tiers: tuple[str, ...] = TIERS, edits: int = 0) -> EpisodeResult:
    beh = [BehaviourResult(checker=t, ok=resolved, turn_verdicts=["PASS" if resolved else "NA"]) for t in tiers]
    return EpisodeResult(run_id="r", instance_id=iid, repo="repo-a", cluster="c1", arm=arm, policy=arm, seed=0,
                         status="ok" if resolved else "tests_failed", failure_class="none" if resolved else failure,
                         resolved=resolved, behaviour_ok=resolved, joint_ok=resolved, feedback_kind=kind,
                         behaviour=beh, metrics=EpisodeMetrics(steps=2, edits=edits))


def _run(tmp: Path, results: list[tuple[int, EpisodeResult]]) -> Path:
    man = RunManifest(run_id="r", created_at="2026-01-01T00:00:00Z", task_set_name="heldout", task_set_sha256="h",
                      instance_ids=sorted({r.instance_id for _, r in results}),
                      arms=[ArmSpec(name=a, policy="scripted:x")
                            for a in sorted({"tg_s0", "base", "other", *(r.arm for _, r in results)})],
                      seeds=[0], sandbox="local", isolated=False)
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "manifest.json").write_text(man.model_dump_json())
    for attempt, r in results:
        p = tmp / "episodes" / r.instance_id / r.arm / "s0" / f"a{attempt}" / "result.json"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(r.model_dump_json())
    return tmp


def test_study_frame_takes_the_highest_attempt_and_leaves_out_unscored_and_unknown_arms(tmp_path: Path) -> None:
    run = _run(tmp_path / "run", [
        (0, _result("tg_s0", "t1", resolved=False)), (1, _result("tg_s0", "t1", resolved=True)),
        (0, _result("base", "t1", resolved=False, failure="infra")),
        (0, _result("base", "t2", resolved=False, kind="correct")),
        (0, _result("other", "t1", resolved=True)),
    ])
    frame = study_frame(whole_run(run, ARMS), ARMS)
    rows = {(r["runner_arm"], r["instance_id"]): r for r in frame.to_dict("records")}
    assert set(rows) == {("tg_s0", "t1"), ("base", "t2")}
    assert rows[("tg_s0", "t1")]["code_ok"] and rows[("tg_s0", "t1")]["label"] == "tg"
    assert rows[("base", "t2")]["seed"] == -1 and rows[("base", "t2")]["hinted"] and rows[("base", "t2")]["repo"] == "c1"
    assert successes(frame, "tg_s0", "ckpt") == ({"behaviour_ok": 1, "code_ok": 1, "joint_ok": 1}, 1)
    with pytest.raises(ValueError, match=r"no scored held-out episode for base_s9 \(ckpt/x\)"):
        successes(frame, "base_s9", "ckpt/x")


def test_study_frame_reads_each_model_where_its_episodes_are(tmp_path: Path) -> None:
    """A model's episodes may sit in another run under another arm name (the main evaluation's ``tg@s0``): the
    frame names it as the study does, reads only that arm there, and refuses to count one arm twice."""
    main = _run(tmp_path / "main", [(0, _result("tg@s0", "t1", resolved=True)), (0, _result("base", "t1", resolved=False))])
    study = _run(tmp_path / "study", [(0, _result("base", "t2", resolved=True)), (0, _result("tg_s0", "t2", resolved=True))])
    sources = {"tg_s0": ArmEpisodes(main, "tg@s0"), "base": ArmEpisodes(study, "base")}
    rows = {(r["runner_arm"], r["instance_id"]) for r in study_frame(sources, ARMS).to_dict("records")}
    assert rows == {("tg_s0", "t1"), ("base", "t2")}
    with pytest.raises(StatsInputError, match=r"'tg_s0' and 'base' both read arm 'tg@s0'"):
        study_frame({"tg_s0": ArmEpisodes(main, "tg@s0"), "base": ArmEpisodes(main, "tg@s0")}, ARMS)


def test_tier_frame_columns_and_unjudged_episode_error(tmp_path: Path) -> None:
    run = _run(tmp_path / "run", [(0, _result("tg_s0", "t1", resolved=True)), (0, _result("base", "t1", resolved=False))])
    frame = tier_frame(run, ARMS, {"tg_s0": "markdown@v1", "base": None}, TIERS)
    assert list(frame.columns)[-4:] == ["ok:tool_args@v1", "ok:markdown@v1", "applicable:tool_args@v1",
                                        "applicable:markdown@v1"]
    by = {r["runner_arm"]: r for r in frame.to_dict("records")}
    assert by["tg_s0"]["tier_trained"] == "markdown@v1" and by["tg_s0"]["applicable:markdown@v1"]
    assert pd.isna(by["base"]["tier_trained"]) and not by["base"]["applicable:markdown@v1"]
    bad = _run(tmp_path / "bad", [(0, _result("tg_s0", "t1", resolved=True, tiers=("markdown@v1",)))])
    with pytest.raises(ValueError, match=r"not judged by \['tool_args@v1'\]"):
        tier_frame(bad, ARMS, {"tg_s0": "markdown@v1"}, TIERS)


def test_probe_frame_and_pairs_from_run_directories(tmp_path: Path) -> None:
    info = ProbeInfo(name="explain", kind="probe:explain/v1", placement="first_turn", text="Explain.", asks="a",
                     side_effect="s")
    plain = probe_frame(whole_run(_run(tmp_path / "plain", [(0, _result("tg_s0", "t1", resolved=True, edits=1))]),
                                  ARMS), ARMS)
    probed = probe_frame(whole_run(_run(tmp_path / "probe", [(0, _result("tg_s0", "t1", resolved=False,
                                                                        kind=info.kind))]), ARMS), ARMS)
    pairs, dropped = probe_pairs(plain, probed, info)
    assert dropped == 0 and list(pairs["state_id"]) == ["t1/train_s0/ep0"]
    assert bool(pairs["plain_edited"].iloc[0]) and not bool(pairs["probe_edited"].iloc[0])


def test_equal_compute_result_budget_is_the_larger_final_flops() -> None:
    def ev(arm: str, seed: int, flops: float, wins: int) -> CheckpointEval:
        return CheckpointEval(arm=arm, seed=seed, step=4, rollout_tokens=1, teacher_forward_tokens=0,
                              trainer_tokens=1, flops=flops, wall_s=1.0, peak_memory_bytes=1, tuning_trials=1,
                              successes={"behaviour_ok": wins, "code_ok": wins, "joint_ok": wins}, n=10)

    evals = [ev("tg", s, 150.0, 6 + s) for s in (0, 1)] + [ev("grpo_eqc", s, 160.0, 4 + s) for s in (0, 1)]
    res = equal_compute_result(evals, steps=6, trials=1)
    assert any("GRPO trained for 6 steps" in n for n in res.notes)
    assert res.ratios["flops"] == pytest.approx(150.0 / 160.0)


def test_study_tables_load_without_torch_or_docker() -> None:
    code = ("import sys, evalsuite.study_tables; bad = {'torch', 'docker'} & set(sys.modules); "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)
