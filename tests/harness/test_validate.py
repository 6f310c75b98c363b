"""Validation gate: pure decisions, and gold x3 / empty x3 with real git + pytest (fake host sandbox)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.schema import Grade, TaskSet
from harness.validate import decide_instance, load_validation, validate_task_set
from tests.harness_fakes import HIDDEN_TESTS, FakeFactory, diff_of, make_calc_task

A, S, F = "t.py::a", "t.py::s", "t.py::flaky"


def _g(f2p: dict, p2p: dict, valid: bool = True) -> Grade:
    return Grade(resolved=False, valid=valid, f2p=f2p, p2p=p2p, exit_code=1, reason="x")


def _inst(calc_instance, f2p, p2p):
    return calc_instance.model_copy(update={"FAIL_TO_PASS": f2p, "PASS_TO_PASS": p2p})


def test_decide_keeps_stable_excludes_flaky_rejects_broken(tmp_path: Path) -> None:
    inst = _inst(make_calc_task(tmp_path)[0], [A, F], [S])
    gold = [_g({A: "passed", F: "passed"}, {S: "passed"}), _g({A: "passed", F: "failed"}, {S: "passed"})]
    empty = [_g({A: "failed", F: "failed"}, {S: "passed"}), _g({A: "missing", F: "failed"}, {S: "skipped"})]
    v = decide_instance(inst, gold, empty)
    assert v.valid and v.fail_to_pass == [A] and v.pass_to_pass == [S] and v.excluded_flaky == [F]
    # F2P passing without the fix -> rejected with the reason
    v = decide_instance(inst, gold, [_g({A: "passed", F: "failed"}, {S: "passed"})] * 2)
    assert not v.valid and "passes without the fix" in v.reason
    # gold fails a P2P every time -> rejected; an invalid gold grade -> rejected
    v = decide_instance(inst, [_g({A: "passed", F: "passed"}, {S: "failed"})] * 2, empty)
    assert not v.valid and "PASS_TO_PASS" in v.reason
    v = decide_instance(inst, [_g({}, {}, valid=False)] * 2, empty)
    assert not v.valid and v.reason.startswith("gold run does not grade")
    # every F2P flaky -> rejected
    v = decide_instance(_inst(inst, [F], [S]), gold, empty)
    assert not v.valid and "no FAIL_TO_PASS test is stable" in v.reason


FLAKY = (
    "import os\n\n\ndef test_flip():\n    p = FLIP_FILE\n"
    "    n = int(open(p).read()) if os.path.exists(p) else 0\n    open(p, 'w').write(str(n + 1))\n"
    "    assert n % 2 == 0\n"
)


def test_validate_task_set_end_to_end(tmp_path: Path) -> None:
    good, repo = make_calc_task(tmp_path / "repos", "calc-good")
    flip = FLAKY.replace("FLIP_FILE", repr(str(tmp_path / "flip-counter")))
    flaky_tp = diff_of(repo, {"tests/test_calc.py": HIDDEN_TESTS, "tests/test_flip.py": flip})
    flaky = good.model_copy(update={"instance_id": "calc-flaky", "test_patch": flaky_tp,
                                    "PASS_TO_PASS": [*good.PASS_TO_PASS, "tests/test_flip.py::test_flip"]})
    broken = good.model_copy(update={"instance_id": "calc-broken", "test_patch": "not a diff\n"})
    ts = TaskSet(name="calc", path=str(tmp_path), sha256="a" * 64, instances=[good, flaky, broken])
    repos = {i.instance_id: repo for i in ts.instances}
    rep = validate_task_set(tmp_path, runs=2, sandbox_factory=FakeFactory(repos), task_set=ts, workers=2)
    by = {i.instance_id: i for i in rep.instances}
    assert by["calc-good"].valid and by["calc-good"].excluded_flaky == []
    assert len(by["calc-good"].gold) == 2 and len(by["calc-good"].empty) == 2
    assert by["calc-flaky"].valid and by["calc-flaky"].excluded_flaky == ["tests/test_flip.py::test_flip"]
    assert not by["calc-broken"].valid and "TEST_PATCH_FAILED" in by["calc-broken"].reason
    again = load_validation(tmp_path)
    assert again is not None and again.valid_ids() == {"calc-good", "calc-flaky"}
    assert again.excluded_tests() == {"calc-flaky": ["tests/test_flip.py::test_flip"]}


@pytest.mark.docker
def test_generated_heldout_instances_validate_in_docker(tmp_path: Path) -> None:
    from harness.minirepos import make_mini

    make_mini(tmp_path / "tasks", split="heldout", repos=1, tasks_per_repo=1, seed=1)
    rep = validate_task_set(tmp_path / "tasks", runs=3, sandbox="docker", workers=2)
    assert rep.isolated and rep.runs == 3
    assert not rep.rejected, [(r.instance_id, r.reason) for r in rep.rejected]
    assert all(len(i.gold) == 3 and len(i.empty) == 3 for i in rep.instances)


def test_engine_failure_rejects_with_reason_after_retries(tmp_path: Path) -> None:
    good, repo = make_calc_task(tmp_path / "repos", "calc-good")
    ts = TaskSet(name="calc", path=str(tmp_path), sha256="a" * 64, instances=[good])
    factory = FakeFactory({"calc-good": repo}, fail_agent_attempts={0, 1, 2}, fail_after=0)
    factory.open = (lambda inst, *, role, attempt, _o=factory.open: _o(inst, role="agent", attempt=attempt))  # type: ignore[method-assign]
    rep = validate_task_set(tmp_path, runs=1, sandbox_factory=factory, task_set=ts)
    assert not rep.instances[0].valid
    assert rep.instances[0].reason.startswith("could not be validated: infrastructure error EXEC_TRANSPORT")
