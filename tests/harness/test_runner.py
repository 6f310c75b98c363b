"""Runner: layout, seeds, resume after kill -9, infra retries, ambiguous settling, manifest, regrade, CLI."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from harness.infra import RetryPolicy
from harness.interfaces import EpisodeLimits
from harness.runner import episode_seed, plan_work, rebuild_results, run_eval, run_lock
from harness.schema import EpisodeResult, TaskSet
from tests.harness_fakes import (
    FakeFactory,
    FixPolicy,
    NullFinishPolicy,
    make_calc_task,
)

ROOT = Path(__file__).resolve().parents[2]


def _task_set(tmp: Path, n: int) -> tuple[TaskSet, dict[str, Path]]:
    insts, repos = [], {}
    for k in range(n):
        inst, repo = make_calc_task(tmp / "repos", f"calc-{k}")
        insts.append(inst)
        repos[inst.instance_id] = repo
    return TaskSet(name="calc", path=str(tmp), sha256="f" * 64, instances=insts), repos


def _results(out: Path) -> list[Path]:
    return sorted(out.glob("episodes/*/*/s*/a*/result.json"))


def test_layout_outcomes_and_manifest(tmp_path: Path) -> None:
    ts, repos = _task_set(tmp_path, 2)
    out = tmp_path / "run"
    res = run_eval(ts, {"fix": FixPolicy(), "null": NullFinishPolicy()}, [0, 1], out,
                   sandbox_factory=FakeFactory(repos), workers=2, limits=EpisodeLimits(max_turns=4))
    assert len(res) == 8
    by_arm = {a: [r for r in res if r.arm == a] for a in ("fix", "null")}
    assert all(r.resolved and r.status == "ok" and r.joint_ok for r in by_arm["fix"])
    assert all(not r.resolved and r.status == "empty_patch" and r.failure_class == "agent" for r in by_arm["null"])
    d = out / "episodes" / "calc-0" / "fix" / "s1" / "a0"
    assert {p.name for p in d.iterdir()} >= {"trajectory.jsonl", "patch.diff", "grade", "result.json", "timing.json"}
    assert (d / "grade" / "junit.xml").is_file() and "calc.py" in (d / "patch.diff").read_text()
    lines = (out / "results.jsonl").read_text().splitlines()
    assert len(lines) == 8 and EpisodeResult.model_validate_json(lines[0]).instance_id == "calc-0"
    man = json.loads((out / "manifest.json").read_text())
    assert man["task_set_sha256"] == "f" * 64 and man["seeds"] == [0, 1] and man["sandbox"] == "local"
    assert {a["name"] for a in man["arms"]} == {"fix", "null"} and man["git_commit"]


def test_arm_order_plans_all_of_one_arm_first_and_changes_no_result(tmp_path: Path) -> None:
    ts, repos = _task_set(tmp_path, 2)
    by_inst = plan_work(tmp_path / "p", ts.instances, ["fix", "null"], [0], retry=RetryPolicy())
    by_arm = plan_work(tmp_path / "p", ts.instances, ["fix", "null"], [0], retry=RetryPolicy(), order="arm")
    assert [(j.instance.instance_id, j.arm) for j in by_inst.todo] == [
        ("calc-0", "fix"), ("calc-0", "null"), ("calc-1", "fix"), ("calc-1", "null")]
    assert [(j.instance.instance_id, j.arm) for j in by_arm.todo] == [
        ("calc-0", "fix"), ("calc-1", "fix"), ("calc-0", "null"), ("calc-1", "null")]
    assert sorted(by_arm.todo, key=lambda j: (j.instance.instance_id, j.arm)) == by_inst.todo
    a = run_eval(ts, {"fix": FixPolicy(), "null": NullFinishPolicy()}, [0], tmp_path / "a",
                 sandbox_factory=FakeFactory(repos), order="arm")
    b = run_eval(ts, {"fix": FixPolicy(), "null": NullFinishPolicy()}, [0], tmp_path / "b",
                 sandbox_factory=FakeFactory(repos))
    assert [(r.instance_id, r.arm, r.resolved, r.status) for r in a] == [
        (r.instance_id, r.arm, r.resolved, r.status) for r in b]


def test_episode_seed_is_deterministic_and_arm_independent() -> None:
    assert episode_seed(0, "a", 1) == episode_seed(0, "a", 1)
    assert len({episode_seed(0, "a", 1), episode_seed(0, "a", 2), episode_seed(0, "b", 1),
                episode_seed(1, "a", 1)}) == 4


def test_engine_failure_mid_episode_is_infra_and_retried(tmp_path: Path) -> None:
    ts, repos = _task_set(tmp_path, 1)
    out = tmp_path / "run"
    factory = FakeFactory(repos, fail_agent_attempts={0}, fail_after=1)
    res = run_eval(ts, {"fix": FixPolicy()}, [0], out, sandbox_factory=factory,
                   retry=RetryPolicy(max_attempts=3, backoff_s=0.0))
    a0 = EpisodeResult.model_validate_json((out / "episodes/calc-0/fix/s0/a0/result.json").read_text())
    assert a0.status == "infra_error" and a0.failure_class == "infra" and a0.infra_kind == "EXEC_TRANSPORT"
    assert not a0.resolved and not a0.scored
    assert len(res) == 1 and res[0].attempt == 1 and res[0].resolved


def test_infra_retries_are_capped_and_never_scored(tmp_path: Path) -> None:
    ts, repos = _task_set(tmp_path, 1)
    out = tmp_path / "run"
    factory = FakeFactory(repos, fail_agent_attempts={0, 1, 2, 3}, fail_after=0)
    res = run_eval(ts, {"fix": FixPolicy()}, [0], out, sandbox_factory=factory,
                   retry=RetryPolicy(max_attempts=2, backoff_s=0.0))
    assert len(_results(out)) == 2 and res[0].failure_class == "infra" and not res[0].scored
    again = plan_work(out, ts.instances, ["fix"], [0], retry=RetryPolicy(max_attempts=2))
    assert not again.todo and len(again.exhausted) == 1
    more = plan_work(out, ts.instances, ["fix"], [0], retry=RetryPolicy(max_attempts=3))
    assert [j.attempt for j in more.todo] == [2]


def test_ambiguous_grade_settled_by_gold_control(tmp_path: Path) -> None:
    ts, repos = _task_set(tmp_path, 1)
    out = tmp_path / "run"
    # library code that hard-exits on import: no JUnit -> invalid grade -> gold control resolves -> agent failure
    res = run_eval(ts, {"exit": FixPolicy(new="import os\nos._exit(0)\n")}, [0], out,
                   sandbox_factory=FakeFactory(repos))
    assert res[0].status == "tests_failed" and res[0].failure_class == "agent" and not res[0].grade.valid
    assert len(list((out / "controls").glob("*.json"))) == 1


SCRIPT = textwrap.dedent("""
    import sys, pickle
    from pathlib import Path
    sys.path.insert(0, {root!r})
    from harness.runner import run_eval
    from tests.harness_fakes import FakeFactory, FixPolicy
    ts, repos = pickle.loads(Path({state!r}).read_bytes())
    run_eval(ts, {{"fix": FixPolicy(sleep_s={sleep})}}, [0, 1], {out!r}, sandbox_factory=FakeFactory(repos),
             workers=2)
""")


def test_kill_minus_9_then_resume_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    import pickle

    ts, repos = _task_set(tmp_path, 3)
    state = tmp_path / "state.pkl"
    state.write_bytes(pickle.dumps((ts, repos)))
    out = tmp_path / "run"
    code = SCRIPT.format(root=str(ROOT), state=str(state), out=str(out), sleep=0.2)
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while len(_results(out)) < 2 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()
    before = {p: p.read_bytes() for p in _results(out)}
    assert 2 <= len(before) < 6, "the kill must land mid-run"
    res = run_eval(ts, {"fix": FixPolicy()}, [0, 1], out, sandbox_factory=FakeFactory(repos), workers=2)
    after = _results(out)
    assert len(res) == 6 and all(r.resolved for r in res)
    assert len(after) == 6, "exactly one result per episode: nothing duplicated"
    assert all(p.read_bytes() == b for p, b in before.items()), "finished episodes are kept untouched"
    assert len((out / "results.jsonl").read_text().splitlines()) == 6


def test_resume_refuses_other_task_set_and_rebuild_results(tmp_path: Path) -> None:
    ts, repos = _task_set(tmp_path, 1)
    out = tmp_path / "run"
    run_eval(ts, {"null": NullFinishPolicy()}, [0], out, sandbox_factory=FakeFactory(repos))
    other = ts.model_copy(update={"sha256": "0" * 64})
    with pytest.raises(ValueError, match="task set"):
        run_eval(other, {"null": NullFinishPolicy()}, [0], out, sandbox_factory=FakeFactory(repos))
    (out / "results.jsonl").unlink()
    assert len(rebuild_results(out)) == 1 and (out / "results.jsonl").is_file()
    with run_lock(out), pytest.raises(ValueError, match="another tgsuite run .eval or grade. is running"):
        run_eval(ts, {"null": NullFinishPolicy()}, [0], out, sandbox_factory=FakeFactory(repos))


def test_resume_refuses_another_run_seed(tmp_path: Path) -> None:
    """Another --run-seed would give the arm added on resume other episode seeds than the finished arm (unpaired)."""
    ts, repos = _task_set(tmp_path, 1)
    out = tmp_path / "run"
    run_eval(ts, {"a": NullFinishPolicy()}, [0], out, sandbox_factory=FakeFactory(repos), run_seed=3)
    assert json.loads((out / "manifest.json").read_text())["run_seed"] == 3
    with pytest.raises(ValueError, match=r"--run-seed 3, now 7; fix: resume with --run-seed 3"):
        run_eval(ts, {"a": NullFinishPolicy(), "b": NullFinishPolicy()}, [0], out, sandbox_factory=FakeFactory(repos),
                 run_seed=7)
    run_eval(ts, {"a": NullFinishPolicy(), "b": NullFinishPolicy()}, [0], out, sandbox_factory=FakeFactory(repos),
             run_seed=3)  # the same seed resumes, and the new arm is paired with the old one
    seeds = {json.loads(next(out.rglob(f"{arm}/s0/a0/trajectory.jsonl")).read_text().splitlines()[0])["seed"]
             for arm in "ab"}
    assert seeds == {episode_seed(3, ts.instances[0].instance_id, 0)}


def test_resume_on_fewer_instances_keeps_every_instance_in_the_manifest(tmp_path: Path) -> None:
    """A resume with --instance/--limit must not narrow the manifest: the analysis reads it as the cells the run owns,
    and a narrowed one let a second run's episodes replace the deleted ones of this run without a clash."""
    ts, repos = _task_set(tmp_path, 3)
    out = tmp_path / "run"
    run_eval(ts, {"null": NullFinishPolicy()}, [0], out, sandbox_factory=FakeFactory(repos))
    one = ts.model_copy(update={"instances": ts.instances[2:]})
    run_eval(one, {"null": NullFinishPolicy()}, [0], out, sandbox_factory=FakeFactory(repos))
    man = json.loads((out / "manifest.json").read_text())
    assert man["instance_ids"] == ["calc-0", "calc-1", "calc-2"]
    first = ts.model_copy(update={"instances": ts.instances[:1]})
    fresh = tmp_path / "grow"
    run_eval(first, {"null": NullFinishPolicy()}, [0], fresh, sandbox_factory=FakeFactory(repos))
    run_eval(ts, {"null": NullFinishPolicy()}, [0], fresh, sandbox_factory=FakeFactory(repos))
    assert json.loads((fresh / "manifest.json").read_text())["instance_ids"] == ["calc-0", "calc-1", "calc-2"]


def test_resume_refuses_other_weights_and_other_limits(tmp_path: Path) -> None:
    """Finished episodes are kept on resume, so a resume must not mix them with another checkpoint or other limits."""
    ts, repos = _task_set(tmp_path, 1)
    out = tmp_path / "run"

    class Weighted(NullFinishPolicy):
        def __init__(self, sha: str) -> None:
            super().__init__()
            self.checkpoint_sha256 = sha

    run_eval(ts, {"m": Weighted("a" * 64)}, [0], out, sandbox_factory=FakeFactory(repos),
             limits=EpisodeLimits(max_turns=4))
    run_eval(ts, {"m": Weighted("a" * 64)}, [0], out, sandbox_factory=FakeFactory(repos),
             limits=EpisodeLimits(max_turns=4))  # the same: resumes
    with pytest.raises(ValueError, match=r"arm 'm' was evaluated with checkpoint aaaaaaaaaaaa, now bbbbbbbbbbbb"):
        run_eval(ts, {"m": Weighted("b" * 64)}, [0], out, sandbox_factory=FakeFactory(repos),
                 limits=EpisodeLimits(max_turns=4))
    with pytest.raises(ValueError, match=r"other limits \(finish_notice_turns 0.0 -> 2.0\).*--finish-notice"):
        run_eval(ts, {"m": Weighted("a" * 64)}, [0], out, sandbox_factory=FakeFactory(repos),
                 limits=EpisodeLimits(max_turns=4, finish_notice_turns=2))
    with pytest.raises(ValueError, match=r"other limits \(format_retries 0.0 -> 3.0\).*--format-retries"):
        run_eval(ts, {"m": Weighted("a" * 64)}, [0], out, sandbox_factory=FakeFactory(repos),
                 limits=EpisodeLimits(max_turns=4, format_retries=3))
    # a manifest written before a limit existed: the missing limit counts as its default
    man = json.loads((out / "manifest.json").read_text())
    del man["limits"]["finish_notice_turns"]
    (out / "manifest.json").write_text(json.dumps(man))
    run_eval(ts, {"m": Weighted("a" * 64)}, [0], out, sandbox_factory=FakeFactory(repos),
             limits=EpisodeLimits(max_turns=4))


def test_regrade_redecides_from_stored_output(tmp_path: Path) -> None:
    from harness.runner_regrade import regrade_run

    ts, repos = _task_set(tmp_path, 1)
    out = tmp_path / "run"
    first = run_eval(ts, {"fix": FixPolicy()}, [0], out, sandbox_factory=FakeFactory(repos))
    assert first[0].resolved
    stricter = ts.model_copy(update={"instances": [ts.instances[0].model_copy(
        update={"FAIL_TO_PASS": [*ts.instances[0].FAIL_TO_PASS, "tests/test_calc.py::test_nope"]})]})
    again = regrade_run(out, stricter)
    assert not again[0].resolved and again[0].status == "tests_failed"
    assert again[0].grade.f2p["tests/test_calc.py::test_nope"] == "missing"
    assert len(_results(out)) == 1  # rewritten in place, nothing added
    assert regrade_run(out, ts)[0].resolved  # and back


def test_cli_argument_helpers(tmp_path: Path) -> None:
    from tgsuite.commands.common import CLIError
    from tgsuite.commands.eval import _protocol_hash, parse_arms, parse_seeds

    assert parse_seeds("0,1,2") == [0, 1, 2]
    for bad in ("", "0,0", "a"):
        with pytest.raises(CLIError):
            parse_seeds(bad)
    assert parse_arms(["oracle", "tg=hf:runs/x/step_5", "hf:runs/y/step_9/"]) == {
        "oracle": "oracle", "tg": "hf:runs/x/step_5", "hf-step_9": "hf:runs/y/step_9/"}
    assert parse_arms(["openai:http://127.0.0.1:8000/v1#Qwen/Qwen3-8B"]) == {
        "openai-Qwen3-8B": "openai:http://127.0.0.1:8000/v1#Qwen/Qwen3-8B"}
    with pytest.raises(CLIError):
        parse_arms(["null", "null"])
    frozen = tmp_path / "frozen.json"
    frozen.write_text(json.dumps({"sha256": "ab" * 32}))
    assert _protocol_hash(str(frozen)) == "ab" * 32
    frozen.write_text("{}")
    with pytest.raises(CLIError, match="sha256"):
        _protocol_hash(str(frozen))


# ---------------------------------------------------------------- end to end on the generated mini task family


@pytest.fixture(scope="module")
def mini_heldout(tmp_path_factory: pytest.TempPathFactory):
    from harness.minirepos import make_mini
    from harness.tasks import load_task_set

    out = tmp_path_factory.mktemp("mini") / "tasks"
    make_mini(out, split="heldout", repos=2, tasks_per_repo=1, seed=0)
    return load_task_set(out)


def _oracle_null(ts: TaskSet, kind: str, out: Path) -> list[EpisodeResult]:
    from harness.runner_sandbox import TaskSandboxFactory
    from harness.sandbox import SandboxSpec

    spec = SandboxSpec(env={"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"})  # the venv's plugins only slow startup
    with TaskSandboxFactory(ts, kind=kind, run_id=f"pytest-{kind}-{out.parent.name}"[:60], spec=spec) as factory:
        factory.preflight()
        return run_eval(ts, {"oracle": "oracle", "null": "null"}, [0], out, sandbox_factory=factory, workers=2)


def test_oracle_resolves_and_null_does_not_local(mini_heldout: TaskSet, tmp_path: Path) -> None:
    res = _oracle_null(mini_heldout, "local", tmp_path / "run")
    assert len(res) == 2 * len(mini_heldout.instances)
    assert all(r.resolved for r in res if r.arm == "oracle"), [r.error for r in res if r.arm == "oracle"]
    assert not any(r.resolved for r in res if r.arm == "null")
    assert all(r.scored for r in res)
    man = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert man["isolated"] is False and man["sandbox"] == "local"
    assert man["disk_limit"]["mode"] == "rlimit-fsize"


@pytest.mark.docker
def test_oracle_resolves_and_null_does_not_docker(mini_heldout: TaskSet, tmp_path: Path) -> None:
    res = _oracle_null(mini_heldout, "docker", tmp_path / "run")
    assert all(r.resolved for r in res if r.arm == "oracle"), [r.error for r in res if r.arm == "oracle"]
    assert not any(r.resolved for r in res if r.arm == "null") and all(r.scored for r in res)
    man = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert man["isolated"] is True and man["image_digests"].get("base", "").startswith("sha256:")
    assert man["disk_limit"]["mode"] in ("storage-opt", "tmpfs") and man["disk_limit"]["bytes"] == 2 << 30


def test_cli_eval_then_resume_then_regrade(mini_heldout: TaskSet, tmp_path: Path) -> None:
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "tgsuite.cli", "eval", "--tasks", mini_heldout.path, "--policy", "oracle",
           "--policy", "nothing=null", "--seeds", "0", "--out", str(out), "--sandbox", "local", "--workers", "2",
           "--no-progress"]
    first = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr[-2000:]
    assert "oracle" in first.stdout and "nothing" in first.stdout
    before = {p: p.read_bytes() for p in _results(out)}
    again = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0 and "0 episodes to run" in again.stderr
    assert {p: p.read_bytes() for p in _results(out)} == before
    regrade = subprocess.run([sys.executable, "-m", "tgsuite.cli", "eval", "--tasks", mini_heldout.path, "--out",
                              str(out), "--regrade"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert regrade.returncode == 0, regrade.stderr[-2000:]
    bad_cmd = [c if c != "0" else "0,0" for c in cmd]  # the seed list
    bad = subprocess.run(bad_cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "--seeds '0,0'" in bad.stderr and "fix:" in bad.stderr


class _HintOnce:
    def hint_for(self, instance, messages, turn, rng):
        from harness.interfaces import Hint

        return Hint(text="Please answer in Markdown.", kind="correct") if turn == 0 else None


def test_feedback_per_arm(tmp_path: Path) -> None:
    from harness.rundir import read_trajectory

    ts, repos = _task_set(tmp_path, 1)
    out = tmp_path / "run"
    run_eval(ts, {"hinted": NullFinishPolicy(), "plain": NullFinishPolicy()}, [0], out,
             sandbox_factory=FakeFactory(repos), feedback={"hinted": _HintOnce()})
    hinted = read_trajectory(out / "episodes/calc-0/hinted/s0/a0/trajectory.jsonl")
    plain = read_trajectory(out / "episodes/calc-0/plain/s0/a0/trajectory.jsonl")
    assert hinted.hint_turns == [0] and any(m.is_hint for m in hinted.messages)
    assert plain.hint_turns == [] and not any(m.is_hint for m in plain.messages)


class _ZapGitPolicy:
    """Fixes the bug, then deletes the repository's .git through a test it writes and runs."""

    name = "zap"
    ZAP = "import shutil\n\n\ndef test_zap():\n    shutil.rmtree('.git')\n"

    def act(self, messages, *, tools, rng):
        from harness.interfaces import PolicyOutput
        from tests.harness_fakes import _call, _n_assistant

        turn = _n_assistant(messages)
        if turn == 0:
            return PolicyOutput(_call("edit_file", path="calc.py", old="return a - b\n\n\ndef sub",
                                      new="return a + b\n\n\ndef sub"))
        if turn == 1:
            return PolicyOutput(_call("edit_file", path="tests/test_zap.py", old="", new=self.ZAP))
        if turn == 2:
            return PolicyOutput(_call("run_tests", tests=["tests/test_zap.py"]))
        return PolicyOutput(_call("finish", message="Fixed `add`."))


def test_agent_deleting_git_is_graded_not_infra(tmp_path: Path) -> None:
    ts, repos = _task_set(tmp_path, 1)
    out = tmp_path / "run"
    res = run_eval(ts, {"zap": _ZapGitPolicy()}, [0], out, sandbox_factory=FakeFactory(repos),
                   limits=EpisodeLimits(max_turns=6))
    traj = (out / "episodes/calc-0/zap/s0/a0/trajectory.jsonl").read_text()
    assert "1 passed" in traj, "the zap test must have run"
    assert res[0].failure_class == "none" and res[0].resolved and res[0].attempt == 0
    assert res[0].grade.tests_touched  # it added a test file


class _VersionedPolicy:
    """Fixes the bug, then finishes; reports each turn's finish reason and a policy version stamp."""

    name = "versioned"

    def act(self, messages, *, tools, rng):
        from harness.interfaces import PolicyOutput
        from tests.harness_fakes import _call, _n_assistant

        if _n_assistant(messages) == 0:
            return PolicyOutput(_call("edit_file", path="calc.py", old="return a - b\n\n\ndef sub",
                                      new="return a + b\n\n\ndef sub"), finish_reason="length", policy_version=7)
        return PolicyOutput(_call("finish", message="Fixed `add`."), finish_reason="stop", policy_version=8)


def test_trajectory_records_each_turns_finish_reason_and_policy_version(tmp_path: Path) -> None:
    from harness.rundir import read_trajectory
    from harness.schema import Message

    ts, repos = _task_set(tmp_path, 1)
    out = tmp_path / "run"
    run_eval(ts, {"v": _VersionedPolicy(), "null": NullFinishPolicy()}, [0], out,
             sandbox_factory=FakeFactory(repos), limits=EpisodeLimits(max_turns=4))
    path = out / "episodes/calc-0/v/s0/a0/trajectory.jsonl"
    raw = [json.loads(line) for line in path.read_text().splitlines()]
    raw = [m for m in raw if m["type"] == "message"]
    assert [(m["finish_reason"], m["policy_version"]) for m in raw if m["role"] == "assistant"] == [
        ("length", 7), ("stop", 8)]
    assert all(m["finish_reason"] is None and m["policy_version"] is None for m in raw if m["role"] != "assistant")
    null = read_trajectory(out / "episodes/calc-0/null/s0/a0/trajectory.jsonl")
    assert [(m.finish_reason, m.policy_version) for m in null.messages if m.role == "assistant"] == [("stop", None)]
    # trajectories recorded before these fields existed still load
    old = Message.model_validate({"role": "assistant", "content": "hi", "turn": 0})
    assert old.finish_reason is None and old.policy_version is None
