"""tgsuite.pipeline.probes: the hint_probes study stage with the eval stage faked (known answers, resume, errors, the
report panel), the pairing of plain and probe frames, and one run through the real runner (pairing by seed)."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import tgsuite.pipeline.studies as ps
from evalsuite.rates import StatsInputError
from evalsuite.schema import AnalysisResult, Exploratory
from evalsuite.study_tables import hint_probes_result, probe_frame, probe_pairs, whole_run
from harness.feedback_spec import parse_feedback
from harness.interfaces import PolicyOutput
from harness.probes import PROBES
from harness.schema import ArmSpec, EpisodeMetrics, EpisodeResult, Message, RunManifest
from reports.probes import hint_probes_section
from tgsuite.pipeline import stages
from tgsuite.pipeline.presets import SMOKE
from tgsuite.pipeline.probes import probe_info
from tgsuite.pipeline.records import EvalOutputs, SftReport
from tgsuite.pipeline.stage_runner import StageRunner
from tgsuite.pipeline.stages import pipeline_paths as _paths

N_INST = 6


def _episode(label: str, i: int, spec: str | None) -> tuple[bool, bool, int]:
    """(edited, resolved, steps) of the fake: plain checkpoints edit everywhere and resolve even tasks; with
    ``explain`` the tg checkpoints stop editing (and so resolve nothing); ``ask_approved`` changes nothing."""
    if spec == "probe:explain" and label == "tg":
        return False, False, 1
    return True, i % 2 == 0, 3


def _write_run(run_dir: Path, arms: dict[str, str], spec: str | None, kind: str | None) -> dict[str, Any]:
    run_dir.mkdir(parents=True, exist_ok=True)
    ids = [f"r{i % 2}__t{i}" for i in range(N_INST)]
    man = RunManifest(run_id=run_dir.name, created_at="2026-01-01T00:00:00Z", task_set_name="heldout",
                      task_set_sha256="h", instance_ids=ids, seeds=[0], sandbox="local", isolated=False,
                      arms=[ArmSpec(name=a, policy=f"hf:{p}") for a, p in arms.items()])
    (run_dir / "manifest.json").write_text(man.model_dump_json())
    for arm in arms:
        for i, iid in enumerate(ids):
            edited, code, steps = _episode(arm.rsplit("_s", 1)[0], i, spec)
            res = EpisodeResult(run_id=run_dir.name, instance_id=iid, repo=f"r{i % 2}", cluster=f"r{i % 2}", arm=arm,
                                policy=arm, seed=0, status="ok" if code else "tests_failed",
                                failure_class="none" if code else "agent", resolved=code, behaviour_ok=False,
                                joint_ok=False, feedback_kind=kind,
                                metrics=EpisodeMetrics(steps=steps, edits=2 if edited else 0))
            p = run_dir / "episodes" / iid / arm / "s0" / "a0" / "result.json"
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(res.model_dump_json())
    return EvalOutputs.model_validate({"paths": {"manifest": str(run_dir / "manifest.json")}, "finished_at": "2026-01-01T00:00:00Z",
                                       "n": len(arms) * N_INST, "scored": 0, "resolved": 0, "behaviour_ok": 0})


@pytest.fixture()
def evals(monkeypatch: pytest.MonkeyPatch) -> list[tuple[list[str], str | None]]:
    calls: list[tuple[list[str], str | None]] = []

    def fake_eval(run_dir: Path, heldout: Path, arms: dict[str, str], preset: Any, protocol_hash: Any,
                  excluded: Any, feedback: str | None = None) -> dict[str, Any]:
        calls.append((sorted(arms), feedback))
        kind = parse_feedback(feedback).kind if feedback else None  # type: ignore[union-attr]
        return _write_run(run_dir, arms, feedback, kind)

    monkeypatch.setattr(stages, "stage_eval", fake_eval)
    return calls


def _ctx(out: Path) -> ps.StudyContext:
    paths = _paths(out)
    ckpts = {"base": str(out / "sft" / "model"), **{f"{a}@s{s}": str(out / a / f"s{s}") for a in ("grpo", "tg")
                                                     for s in SMOKE.seeds}}  # fmt: skip
    return ps.StudyContext(preset=SMOKE, paths=paths, protocol_sha256="p" * 64, heldout_sha256="h" * 64,
                           sft_report=SftReport(model_dir=ckpts["base"]), ckpts=ckpts, excluded={})


def test_hint_probes_stage_known_answers_and_resume(tmp_path: Path, evals: list[Any]) -> None:
    ctx = _ctx(tmp_path)
    ex = ps.run_studies(StageRunner(tmp_path, echo=lambda s: None), ctx, {"hint_probes"})
    assert Exploratory.model_validate_json(ex.model_dump_json()) == ex
    # smoke sizes: can-do labels base and tg, seed 0; one plain eval and one eval per probe, nothing trained
    assert evals == [(["base", "tg_s0"], None), (["base", "tg_s0"], "probe:ask_approved"),
                     (["base", "tg_s0"], "probe:explain")]
    res = {(r.probe.name, r.arm): r for r in ex.hint_probes}
    assert sorted(res) == [("ask_approved", "base"), ("ask_approved", "tg"), ("explain", "base"), ("explain", "tg")]
    tg = {e.endpoint: e for e in res[("explain", "tg")].endpoints}
    assert res[("explain", "tg")].n_states == N_INST == res[("explain", "tg")].delivered
    assert (tg["edited"].plain_rate, tg["edited"].probe_rate, tg["edited"].change.c) == (1.0, 0.0, N_INST)
    assert (tg["resolved"].plain_rate, tg["resolved"].probe_rate, tg["resolved"].change.c) == (0.5, 0.0, 3)
    assert (tg["blocked"].plain_rate, tg["blocked"].probe_rate, tg["blocked"].change.b) == (0.0, 1.0, N_INST)
    assert tg["blocked"].change.mcnemar_p == pytest.approx(2 * 0.5**N_INST)
    for key in (("explain", "base"), ("ask_approved", "tg"), ("ask_approved", "base")):
        assert all(e.change.b == e.change.c == 0 for e in res[key].endpoints), key
    assert res[("ask_approved", "tg")].probe.kind == "probe:ask_approved/v1"
    rec = json.loads((tmp_path / "studies" / "studies.json").read_text())
    assert rec["errors"] == {} and {"plain", "probe_explain", "probe_ask_approved"} <= set(rec["episodes"])
    assert Path(rec["episodes"]["probe_explain"]["tg_s0"]["run_dir"]).name.startswith("study_eval_probe_explain_v1-")
    # the report panel shows it
    sec = hint_probes_section(AnalysisResult.model_construct(exploratory=ex))
    assert sec.available and len(sec.tables[0].rows) == 4 * 3
    # re-run: every stage is up to date; adding can_do reuses the plain and probe evals (same models)
    again = ps.run_studies(StageRunner(tmp_path, echo=lambda s: None), ctx, {"hint_probes"})
    assert again == ex and len(evals) == 3
    ps.run_studies(StageRunner(tmp_path, echo=lambda s: None), ctx, {"hint_probes", "can_do"})
    assert evals[3:] == [(["base", "tg_s0"], "correct@before_finish")]


def test_a_foreign_run_directory_is_an_analysis_error(tmp_path: Path, evals: list[Any],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Probe episodes carrying another hint kind (e.g. a corrective run) are refused, and the study says why."""
    fake = stages.stage_eval

    def wrong_kind(run_dir: Path, heldout: Path, arms: dict[str, str], *args: Any, **kw: Any) -> dict[str, Any]:
        out = fake(run_dir, heldout, arms, *args, **kw)
        return out if args[-1] is None else _write_run(run_dir, arms, None, "correct")

    monkeypatch.setattr(stages, "stage_eval", wrong_kind)
    ex = ps.run_studies(StageRunner(tmp_path, echo=lambda s: None), _ctx(tmp_path), {"hint_probes"})
    assert ex.hint_probes == []
    err = json.loads((tmp_path / "studies" / "studies.json").read_text())["errors"]["hint_probes"]
    assert "carry hint kind 'correct'" in err and "probe:ask_approved/v1" in err


def _frame(kinds: list[str | None], edited: list[bool], steps: list[int], label: str = "tg") -> pd.DataFrame:
    return pd.DataFrame({"runner_arm": f"{label}_s0", "label": label, "seed": 0,
                         "instance_id": [f"t{i}" for i in range(len(kinds))], "episode_seed": 0,
                         "resolved": False, "edited": edited, "steps": steps, "feedback_kind": kinds})


def test_probe_pairs_pair_by_state_and_drop_unknown_edits() -> None:
    p = probe_info(PROBES["explain"])
    plain = _frame([None] * 4, [True] * 4, [3, 3, 0, 3])
    probed = _frame([p.kind, p.kind, p.kind, None], [False, True, False, False], [2, 2, 2, 0]).iloc[[0, 1, 2]]
    pairs, dropped = probe_pairs(plain, probed, p)
    assert dropped == 1 and list(pairs["state_id"]) == ["t0/train_s0/ep0", "t1/train_s0/ep0"]  # t2: plain steps 0
    assert list(pairs["probe_edited"]) == [False, True] and pairs["plain_edited"].all() and pairs["delivered"].all()
    (r,) = hint_probes_result(plain, {"explain": probed}, {"explain": p})
    assert r.n_states == 2 and any("1 pair(s) dropped" in n for n in r.notes)
    assert any("2 paired states of 3 scored probe episodes and 4 scored plain" in n for n in r.notes)
    with pytest.raises(StatsInputError, match="plain run has hinted episodes"):
        probe_pairs(_frame(["correct"] * 4, [True] * 4, [3] * 4), probed, p)
    with pytest.raises(StatsInputError, match="expected 'probe:explain/v1'"):
        probe_pairs(plain, _frame(["probe:explain/v0"], [True], [3]), p)


class AskingPolicy:
    """Solves the calc task (read, edit, finish), with a random note from the policy stream in every turn; when the
    conversation holds the ask-before-editing probe it asks instead and finishes without editing."""

    name = "asking"

    def act(self, messages: list[Message], *, tools: list[dict[str, Any]], rng: random.Random) -> PolicyOutput:
        from harness.tools import format_tool_call as fc

        n = sum(m.role == "assistant" for m in messages)
        note = f"note {rng.randrange(10**9)}\n"
        if any(m.is_hint and "Ask before editing" in m.content for m in messages):
            return PolicyOutput(note + fc("finish", {"message": "May I edit calc.py?"}))
        if n == 0:
            return PolicyOutput(note + fc("read_file", {"path": "calc.py"}))
        if n == 1:
            return PolicyOutput(note + fc("edit_file", {"path": "calc.py", "old": "return a - b\n\n\ndef sub",
                                                        "new": "return a + b\n\n\ndef sub"}))
        return PolicyOutput(note + fc("finish", {"message": "Fixed add."}))


def test_real_runner_pairs_probe_and_plain_episodes_by_seed(tmp_path: Path) -> None:
    """The real runner, metrics and analysis: the probe and plain episodes of one (arm, task, seed) share the
    episode seed (so the first turn, written before the policy can react, is identical) and the blocked side
    effect is measured."""
    from harness.metrics import RepoIndex, compute_metrics
    from harness.rundir import read_trajectory
    from harness.runner import run_eval
    from harness.schema import TaskSet
    from tests.harness_fakes import FakeFactory, make_calc_task

    inst, repo = make_calc_task(tmp_path / "repos", "calc-0")
    ts = TaskSet(name="calc", path=str(tmp_path), sha256="f" * 64, instances=[inst])
    index = RepoIndex.from_dir(repo)
    arms = ps.study_arms({"tg_s0": ps.StudyModel("tg_s0", "tg", 0, "unused")})
    dirs = {}
    for name, spec in (("plain", None), ("probe", "probe:ask_approved")):
        dirs[name] = tmp_path / name
        fb = parse_feedback(spec) if spec else None
        run_eval(ts, {"tg_s0": AskingPolicy()}, [0, 1], dirs[name], sandbox_factory=FakeFactory({"calc-0": repo}),
                 run_seed=3, feedback=fb, metrics_for=lambda t, i: compute_metrics(t, index))
    trajs = {k: [read_trajectory(d / "episodes" / "calc-0" / "tg_s0" / f"s{s}" / "a0" / "trajectory.jsonl")
                 for s in (0, 1)] for k, d in dirs.items()}
    for plain, probed in zip(trajs["plain"], trajs["probe"], strict=True):
        assert plain.seed == probed.seed and probed.hint_turns == [0] and plain.hint_turns == []
        first = [next(m.content for m in t.messages if m.role == "assistant") for t in (plain, probed)]
        assert first[0].split("\n")[0] == first[1].split("\n")[0]  # the same random note: same policy stream
    assert trajs["plain"][0].seed != trajs["plain"][1].seed
    (r,) = hint_probes_result(probe_frame(whole_run(dirs["plain"], arms), arms),
                              {"ask_approved": probe_frame(whole_run(dirs["probe"], arms), arms)},
                              {"ask_approved": probe_info(PROBES["ask_approved"])})
    ep = {e.endpoint: e for e in r.endpoints}
    assert (r.n_states, r.delivered) == (2, 2)
    assert (ep["edited"].plain_rate, ep["edited"].probe_rate) == (1.0, 0.0)
    assert (ep["resolved"].plain_rate, ep["resolved"].probe_rate) == (1.0, 0.0)
    assert (ep["blocked"].change.b, ep["blocked"].change.c) == (2, 0)
