"""``tgsuite grade``: SWE-bench predictions → eval's grading → SWE-bench's report + results.jsonl; agrees with eval."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.predictions import arm_name, grade_predictions, load_predictions, swebench_report
from harness.rundir import read_attempt_log
from harness.runner import run_eval
from harness.schema import EpisodeResult, Prediction, SwebenchReport, TaskSet
from tests.harness_fakes import FakeFactory, make_calc_task

ROOT = Path(__file__).resolve().parents[2]
BROKEN = "diff --git a/calc.py b/calc.py\n--- a/calc.py\n+++ b/calc.py\n@@ -1,2 +1,2 @@\n-def nope():\n+def yes():\n"


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _calc(tmp: Path, n: int) -> tuple[TaskSet, dict[str, Path]]:
    insts, repos = [], {}
    for k in range(n):
        inst, repo = make_calc_task(tmp / "repos", f"calc-{k}")
        insts.append(inst)
        repos[inst.instance_id] = repo
    return TaskSet(name="calc", path=str(tmp), sha256="e" * 64, instances=insts), repos


def test_load_keeps_unknown_fields_and_names_bad_lines(tmp_path: Path) -> None:
    ok = _write(tmp_path / "p.jsonl", [{"instance_id": "a", "model_name_or_path": "org/m", "model_patch": "",
                                        "cost": 0.5}])
    (p,) = load_predictions(ok)
    assert p.extra == {"cost": 0.5} and p.model_patch == ""
    listed = tmp_path / "p.json"
    listed.write_text(json.dumps([{"instance_id": "a", "model_name_or_path": "m", "model_patch": None}]))
    assert load_predictions(listed)[0].model_patch is None
    cases = {
        "missing": ([{"model_name_or_path": "m", "model_patch": ""}], r"p\.jsonl:1: field 'instance_id'"),
        "twice": ([{"instance_id": "a", "model_name_or_path": "m"}] * 2, "predicted twice"),
        "models": ([{"instance_id": "a", "model_name_or_path": "m"},
                    {"instance_id": "b", "model_name_or_path": "n"}], "one predictions file per"),
        "patch": ([{"instance_id": "a", "model_name_or_path": "m", "model_patch": 3}], "model_patch"),
    }
    for rows, msg in cases.values():
        with pytest.raises(ValueError, match=msg):
            load_predictions(_write(tmp_path / "p.jsonl", rows))
    (tmp_path / "p.jsonl").write_text("{not json\n")
    with pytest.raises(ValueError, match=r"p\.jsonl:1: not JSON"):
        load_predictions(tmp_path / "p.jsonl")


def test_arm_name_is_a_safe_directory_name() -> None:
    assert arm_name("org/model-7b") == "org__model-7b"
    assert arm_name("my agent v2") == "my-agent-v2"
    assert arm_name("_x") == "m_x"


def _res(iid: str, status: str, fc: str, resolved: bool = False) -> EpisodeResult:
    return EpisodeResult(run_id="r", instance_id=iid, repo="x", cluster="x", arm="m", policy="m", seed=0,
                         status=status, failure_class=fc, resolved=resolved)  # type: ignore[arg-type]


def test_swebench_report_categories_follow_swebench(tmp_path: Path) -> None:
    ts, _ = _calc(tmp_path, 1)
    insts = [ts.instances[0].model_copy(update={"instance_id": i}) for i in "abcdefg"]
    ts = ts.model_copy(update={"instances": insts})
    preds = [Prediction(instance_id=i, model_name_or_path="m", model_patch="" if i == "e" else "diff") for i in "abcdef"]
    results = [_res("a", "ok", "none", True), _res("b", "tests_failed", "agent"),
               _res("c", "patch_apply_failed", "agent"), _res("d", "infra_error", "infra"),
               _res("e", "empty_patch", "agent")]  # f: no result at all (e.g. rejected by validation)
    rep = swebench_report(ts, preds, results)
    assert rep.resolved_ids == ["a"] and rep.unresolved_ids == ["b"] and rep.error_ids == ["c", "d", "f"]
    assert rep.empty_patch_ids == ["e"] and rep.incomplete_ids == ["g"] and rep.completed_ids == ["a", "b"]
    assert (rep.total_instances, rep.submitted_instances, rep.completed_instances) == (7, 6, 2)
    assert rep.schema_version == 2 and set(SwebenchReport.model_fields) >= {
        "resolved_instances", "unresolved_instances", "empty_patch_instances", "error_instances", "submitted_ids"}


def test_grade_predictions_outcomes_and_resume(tmp_path: Path) -> None:
    ts, repos = _calc(tmp_path, 3)
    gold = ts.instances[0].patch
    preds = [Prediction(instance_id="calc-0", model_name_or_path="org/m", model_patch=gold),
             Prediction(instance_id="calc-1", model_name_or_path="org/m", model_patch=""),
             Prediction(instance_id="calc-2", model_name_or_path="org/m", model_patch=BROKEN)]
    out = tmp_path / "run"
    factory = FakeFactory(repos)
    res = {r.instance_id: r for r in grade_predictions(ts, preds, out, sandbox_factory=factory, workers=2)}
    assert res["calc-0"].resolved and res["calc-0"].status == "ok" and res["calc-0"].arm == "org__m"
    assert res["calc-1"].status == "empty_patch" and res["calc-2"].status == "patch_apply_failed"
    assert all(r.scored and r.behaviour == [] and not r.behaviour_ok for r in res.values())
    d = out / "episodes" / "calc-0" / "org__m" / "s0" / "a0"
    assert (d / "grade" / "junit.xml").is_file() and (d / "patch.diff").read_text() == gold
    man = json.loads((out / "manifest.json").read_text())
    assert man["arms"] == [{"name": "org__m", "policy": "predictions:org/m", "checkpoint_sha256": None,
                            "train_seed": None, "generation": {}}]
    assert len((out / "results.jsonl").read_text().splitlines()) == 3
    n_open = len(factory.opened)
    grade_predictions(ts, preds, out, sandbox_factory=factory)
    assert len(factory.opened) == n_open  # resumed: nothing re-graded
    logged = read_attempt_log(out)  # one line per graded prediction, none added by the resume
    assert man["attempt_log"] and logged is not None and sorted(x.instance_id for x in logged) == [
        "calc-0", "calc-1", "calc-2"]


def test_infra_failure_is_retried_and_never_scored(tmp_path: Path) -> None:
    from harness.infra import RetryPolicy
    from tests.harness_fakes import DirSandbox

    ts, repos = _calc(tmp_path, 1)

    class Broken(FakeFactory):
        def open(self, instance, *, role, attempt):
            self.opened.append((instance.instance_id, role, attempt))
            return DirSandbox(self.repos[instance.instance_id], fail_after=0), instance.base_commit

    factory = Broken(repos)
    preds = [Prediction(instance_id="calc-0", model_name_or_path="m", model_patch=ts.instances[0].patch)]
    (r,) = grade_predictions(ts, preds, tmp_path / "run", sandbox_factory=factory,
                             retry=RetryPolicy(max_attempts=2, backoff_s=0.0))
    assert r.failure_class == "infra" and not r.scored and r.attempt == 1 and len(factory.opened) == 2
    assert swebench_report(ts, preds, [r]).error_ids == ["calc-0"]


# ---------------------------------------------------------------- agreement with `tgsuite eval` on the mini tasks


@pytest.fixture(scope="module")
def mini(tmp_path_factory: pytest.TempPathFactory) -> TaskSet:
    from harness.minirepos import make_mini
    from harness.tasks import load_task_set

    out = tmp_path_factory.mktemp("mini") / "tasks"
    make_mini(out, split="heldout", repos=2, tasks_per_repo=1, seed=3)
    return load_task_set(out)


def _agreement(ts: TaskSet, kind: str, tmp: Path) -> None:
    """eval (oracle + null) and then grade on the patches eval stored: the same decision per instance."""
    from harness.runner_sandbox import TaskSandboxFactory
    from harness.sandbox import SandboxSpec

    spec = SandboxSpec(env={"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"})
    with TaskSandboxFactory(ts, kind=kind, run_id=f"pytest-pred-{kind}-{tmp.name}"[:60], spec=spec) as factory:
        factory.preflight()
        evaled = run_eval(ts, {"oracle": "oracle", "null": "null"}, [0], tmp / "eval", sandbox_factory=factory,
                          workers=2)
        for arm in ("oracle", "null"):
            preds = [Prediction(instance_id=r.instance_id, model_name_or_path=arm, model_patch=(
                tmp / "eval" / "episodes" / r.instance_id / arm / "s0" / "a0" / "patch.diff").read_text())
                for r in evaled if r.arm == arm]
            graded = grade_predictions(ts, preds, tmp / f"grade-{arm}", sandbox_factory=factory, workers=2)
            want = {r.instance_id: (r.resolved, r.status, r.scored) for r in evaled if r.arm == arm}
            assert {r.instance_id: (r.resolved, r.status, r.scored) for r in graded} == want
            rep = swebench_report(ts, preds, graded)
            assert rep.resolved_ids == sorted(i for i, v in want.items() if v[0])
    assert all(r.resolved for r in evaled if r.arm == "oracle") and not any(r.resolved for r in evaled if r.arm == "null")
    assert len(rep.empty_patch_ids) == len(ts.instances)  # the null arm's patches are all empty


def test_grade_agrees_with_eval_local(mini: TaskSet, tmp_path: Path) -> None:
    _agreement(mini, "local", tmp_path)


@pytest.mark.docker
def test_grade_agrees_with_eval_docker(mini: TaskSet, tmp_path: Path) -> None:
    _agreement(mini, "docker", tmp_path)


def test_cli_grade_writes_swebench_report(mini: TaskSet, tmp_path: Path) -> None:
    rows = [{"instance_id": i.instance_id, "model_name_or_path": "org/gold", "model_patch": i.patch, "note": 1}
            for i in mini.instances]
    rows[-1]["model_patch"] = ""
    preds = _write(tmp_path / "preds.jsonl", rows)
    out = tmp_path / "g"
    cmd = [sys.executable, "-m", "tgsuite.cli", "grade", "--tasks", mini.path, "--predictions", str(preds), "--out",
           str(out), "--sandbox", "local"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rep = json.loads((out / "org__gold.g.json").read_text())
    assert rep["resolved_ids"] == sorted(r["instance_id"] for r in rows[:-1])
    assert rep["empty_patch_ids"] == [rows[-1]["instance_id"]] and rep["error_ids"] == []
    assert len((out / "results.jsonl").read_text().splitlines()) == len(rows)
    agg = json.loads((out / "aggregate.json").read_text())
    assert [a["n_scored"] for a in agg["arms"]] == [len(rows)] and agg["config"]["source"] == "predictions"
    named = subprocess.run([*cmd[:-4], "--out", str(tmp_path / "g2"), "--sandbox", "local", "--arm", "tg@s0"],
                           cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert named.returncode == 0, named.stderr[-2000:]
    assert {json.loads(ln)["arm"] for ln in (tmp_path / "g2" / "results.jsonl").read_text().splitlines()} == {"tg@s0"}
    bad_arm = subprocess.run([*cmd[:-4], "--out", str(tmp_path / "g3"), "--sandbox", "local", "--arm", "a/b"],
                             cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert bad_arm.returncode == 2 and "--arm tg@s0" in bad_arm.stderr
    _write(preds, [{**rows[0], "instance_id": "nope"}])
    bad = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "not in task set" in bad.stderr and "fix:" in bad.stderr


def test_load_reads_swe_agent_s_dict_form_as_swebench_does(tmp_path: Path) -> None:
    """SWE-bench's get_predictions_from_file reads a JSON object {instance_id: prediction} (SWE-agent's preds.json)
    as its values; pretty-printed, it was refused as 'not JSON' on line 1, on one line as a missing instance_id."""
    rows = {i: {"instance_id": i, "model_name_or_path": "org/m", "model_patch": "diff"} for i in ("a", "b")}
    for indent in (2, None):
        (tmp_path / "preds.json").write_text(json.dumps(rows, indent=indent))
        assert [p.instance_id for p in load_predictions(tmp_path / "preds.json")] == ["a", "b"]
    (tmp_path / "one.json").write_text(json.dumps(rows["a"], indent=2))  # one prediction, pretty-printed
    assert [p.instance_id for p in load_predictions(tmp_path / "one.json")] == ["a"]
    (tmp_path / "bad.json").write_text(json.dumps({"a": {"model_name_or_path": "m"}}, indent=2))
    with pytest.raises(ValueError, match=r"bad\.json\['a'\]: field 'instance_id'"):
        load_predictions(tmp_path / "bad.json")


def test_resume_with_another_patch_is_refused_not_reported_with_the_old_grade(tmp_path: Path) -> None:
    """Grading an edited predictions file into the folder of an earlier grade kept the old grade: a patch that does
    not apply was reported resolved (the gold patch graded before)."""
    ts, repos = _calc(tmp_path, 2)
    gold = [Prediction(instance_id=i.instance_id, model_name_or_path="m", model_patch=i.patch) for i in ts.instances]
    out = tmp_path / "run"
    factory = FakeFactory(repos)
    assert all(r.resolved for r in grade_predictions(ts, gold, out, sandbox_factory=factory))
    edited = [gold[0].model_copy(update={"model_patch": BROKEN}), gold[1]]
    with pytest.raises(ValueError, match=r"1 instance\(s\) were graded here with another patch.*'calc-0'.*new --out"):
        grade_predictions(ts, edited, out, sandbox_factory=factory)
    n_open = len(factory.opened)
    assert len(grade_predictions(ts, gold, out, sandbox_factory=factory)) == 2  # the same file resumes
    assert len(factory.opened) == n_open


def _swebench_report_keys() -> list[str]:
    """The keys of the report swebench's ``make_run_report`` writes (without a docker client), read from its source
    (importing it needs docker and unidiff)."""
    import ast
    import importlib.util

    spec = importlib.util.find_spec("swebench")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("swebench is not installed")
    src = Path(list(spec.submodule_search_locations)[0], "harness", "reporting.py").read_text()
    (node,) = [n.value for n in ast.walk(ast.parse(src)) if isinstance(n, ast.Assign) and isinstance(n.value, ast.Dict)
               and any(isinstance(t, ast.Name) and t.id == "report" for t in n.targets)]
    return [k.value for k in node.keys if isinstance(k, ast.Constant)]


def test_swebench_report_has_swebench_s_keys_and_errors(tmp_path: Path) -> None:
    """Same keys, in the same order, as swebench 5.0.2's report (infra/ambiguous failures and failure_reasons were
    missing); a whitespace-only patch does not apply in SWE-bench (an error), it was reported unresolved/completed."""
    ts, _ = _calc(tmp_path, 1)
    ts = ts.model_copy(update={"instances": [ts.instances[0].model_copy(update={"instance_id": i}) for i in "abcdef"]})
    preds = [Prediction(instance_id=i, model_name_or_path="m", model_patch="\n" if i == "a" else "diff") for i in "abcde"]
    results = [_res("a", "empty_patch", "agent"), _res("b", "tests_failed", "agent"),
               _res("c", "infra_error", "infra").model_copy(update={"infra_kind": "DISK_FULL"}),
               _res("d", "invalid_instance", "invalid_instance")]  # e: not graded (rejected by validation)
    rep = swebench_report(ts, preds, results).model_dump(mode="json")
    assert list(rep) == _swebench_report_keys()
    assert rep["error_ids"] == ["a", "c", "d", "e"] and rep["unresolved_ids"] == ["b"] and rep["completed_ids"] == ["b"]
    assert rep["infra_failure_ids"] == ["c", "d", "e"] and rep["ambiguous_failure_ids"] == []
    assert rep["failure_reasons"] == {"c": "infra_error: DISK_FULL", "d": "invalid_instance", "e": "not_graded"}
    assert (rep["infra_failure_instances"], rep["error_instances"]) == (3, 4)


def test_cli_grade_of_only_rejected_instances_makes_a_run_that_resumes(mini: TaskSet, tmp_path: Path) -> None:
    """Every predicted instance rejected by validation.json: the report was written into a folder without a
    manifest, so the documented resume (the same command again) was refused as 'not a tgsuite run'."""
    import shutil

    from harness.validate import InstanceValidation, ValidationReport

    tasks = tmp_path / "tasks"
    shutil.copytree(mini.path, tasks)
    (tasks / "validation.json").write_text(ValidationReport(
        task_set_name=mini.name, task_set_sha256=mini.sha256, created_at="t", runs=3, sandbox="local",
        isolated=False, instances=[InstanceValidation(instance_id=i.instance_id, valid=False, reason="gold fails")
                                   for i in mini.instances]).model_dump_json())
    preds = _write(tmp_path / "preds.jsonl", [{"instance_id": i.instance_id, "model_name_or_path": "m",
                                               "model_patch": i.patch} for i in mini.instances])
    cmd = [sys.executable, "-m", "tgsuite.cli", "grade", "--tasks", str(tasks), "--predictions", str(preds), "--out",
           str(tmp_path / "g"), "--sandbox", "local"]
    for _ in range(2):
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
    rep = json.loads((tmp_path / "g" / "m.g.json").read_text())
    assert rep["error_ids"] == rep["infra_failure_ids"] == sorted(i.instance_id for i in mini.instances)
    assert (tmp_path / "g" / "manifest.json").is_file() and (tmp_path / "g" / "results.jsonl").read_text() == ""
