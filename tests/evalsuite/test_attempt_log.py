"""Re-rolled episodes inside one run directory (``attempts.jsonl``, ``harness.attempt_log``,
``evalsuite.integrity.attempt_log``): an episode folder deleted and resumed is sampled again as a fresh ``a0``; with
a stochastic agent that re-rolls failures until they pass. The log of every finished attempt refuses it; legitimate
infra retries, resumes that add seeds or arms, and regrades still pass."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from evalsuite import integrity
from evalsuite.analyze import analyze
from evalsuite.outcomes import EvalDataError
from harness.attempt_log import append_record, attempt_record
from harness.infra import RetryPolicy
from harness.rundir import ATTEMPT_LOG_FILE, load_run, read_attempt_log, read_manifest, result_sha256
from harness.runner import run_eval
from harness.runner_regrade import regrade_run
from harness.schema import EpisodeResult, RunManifest, TaskSet
from protocols.freeze import freeze_plan
from protocols.schema import FrozenProtocol, Protocol
from tests.harness_fakes import FakeFactory, FixPolicy, NullFinishPolicy, calc_task_set

SHA = "d" * 64
EP = "episodes/calc-0/tg@s0/s0"


class CoinPolicy(FixPolicy):
    """A stochastic agent, as seen from the run directory: it fails (finishes without a change) until ``lucky``."""

    name = spec = "coin"

    def __init__(self) -> None:
        super().__init__()
        self.lucky = False

    def act(self, messages, *, tools, rng):  # noqa: ANN001, ANN201
        return super().act(messages, tools=tools, rng=rng) if self.lucky else NullFinishPolicy().act(
            messages, tools=tools, rng=rng)


class Null(NullFinishPolicy):
    spec = "null"


@pytest.fixture
def tasks(tmp_path: Path) -> tuple[TaskSet, dict[str, Path]]:
    return calc_task_set(tmp_path, SHA)


@pytest.fixture
def rec() -> FrozenProtocol:
    return _rec(episodes_per_task=1)


def _rec(*, episodes_per_task: int) -> FrozenProtocol:
    plan = Protocol.model_validate({
        "name": "t", "question": "q", "estimand": "artifact", "analysis_seed": 1,
        "arms": [{"name": "tg", "role": "treatment", "artifact_seed": 0},
                 {"name": "grpo", "role": "baseline", "artifact_seed": 0}],
        "task_set": {"name": "calc", "sha256": SHA},
        "design": {"seeds_per_arm": 1, "n_tasks": 2, "n_repositories": 1, "episodes_per_task": episodes_per_task},
        "endpoints": [{"id": "code_ok", "role": "primary"}],
        "criteria": [{"endpoint": "code_ok", "kind": "noninferiority", "margin": 0.2}], "coverage_threshold": 0.9,
    })  # fmt: skip
    return freeze_plan(plan, now="2026-01-01T00:00:00Z")


def _eval(tasks: tuple[TaskSet, dict[str, Path]], out: Path, rec: FrozenProtocol, coin: CoinPolicy, *,
          seeds: tuple[int, ...] = (0,), extra: dict | None = None, factory: FakeFactory | None = None) -> None:
    ts, repos = tasks
    run_eval(ts, {"tg@s0": coin, "grpo@s0": Null(), **(extra or {})}, list(seeds), out,
             sandbox_factory=factory or FakeFactory(repos), protocol_hash=rec.sha256,
             retry=RetryPolicy(backoff_s=0.0))


@pytest.fixture
def run(tmp_path: Path, tasks: tuple[TaskSet, dict[str, Path]], rec: FrozenProtocol) -> Path:
    """A finished run: the treatment failed every episode (its coin came up tails)."""
    out = tmp_path / "run"
    _eval(tasks, out, rec, CoinPolicy())
    return out


def test_a_finished_run_logs_each_attempt_once_and_is_accepted(run: Path, rec: FrozenProtocol) -> None:
    manifest = read_manifest(run)
    assert manifest is not None and manifest.attempt_log
    lines = read_attempt_log(run)
    assert lines is not None and len(lines) == 4 and {x.event for x in lines} == {"finish"}
    assert {x.run_id for x in lines} == {manifest.run_id}
    for x in lines:
        data = (run / "episodes" / x.instance_id / x.arm / f"s{x.seed}" / f"a{x.attempt}" / "result.json").read_bytes()
        assert x.result_sha256 == result_sha256(data) and x.scored and x.failure_class == "agent"
    assert analyze(rec, [run]).decision.verdict in ("SHIP", "NO_SHIP", "INCONCLUSIVE")


def test_an_episode_deleted_and_resumed_is_refused(run: Path, rec: FrozenProtocol, tasks) -> None:  # noqa: ANN001
    """The audit's hole: delete the failed episode's folder, resume with the agent's luck changed, and the new
    sample passed as a first attempt."""
    shutil.rmtree(run / EP)
    coin = CoinPolicy()
    coin.lucky = True
    _eval(tasks, run, rec, coin)
    counted = next(r for r in load_run(run).results if (r.instance_id, r.arm) == ("calc-0", "tg@s0"))
    assert counted.attempt == 0 and counted.resolved  # on disk it reads as a first, passing attempt
    run_id = read_manifest(run).run_id  # type: ignore[union-attr]
    with pytest.raises(EvalDataError, match=rf"run {run_id} .*{EP}/a0 finished 2 times .*fix: .*new run directory"):
        analyze(rec, [run])


def test_an_episode_deleted_is_refused_even_before_the_resume(run: Path, rec: FrozenProtocol) -> None:
    shutil.rmtree(run / EP)
    with pytest.raises(EvalDataError, match=rf"{EP}/a0 finished as agent \(empty_patch\) but no attempt of it is on"):
        analyze(rec, [run])


def test_a_result_edited_after_it_was_written_is_refused(run: Path, rec: FrozenProtocol) -> None:
    p = run / EP / "a0" / "result.json"
    r = EpisodeResult.model_validate_json(p.read_text())
    p.write_text(r.model_copy(update={"status": "ok", "failure_class": "none", "resolved": True,
                                      "joint_ok": r.behaviour_ok}).model_dump_json())
    with pytest.raises(EvalDataError, match=rf"{EP}/a0/result.json .* is not the result logged for it .*--regrade"):
        analyze(rec, [run])


def test_a_deleted_log_is_refused_by_analyze_and_by_resume(run: Path, rec: FrozenProtocol, tasks) -> None:  # noqa: ANN001
    (run / ATTEMPT_LOG_FILE).unlink()
    with pytest.raises(EvalDataError, match=r"attempts.jsonl is missing, but the manifest says this run keeps"):
        analyze(rec, [run])
    with pytest.raises(ValueError, match=r"attempts.jsonl: missing, but this run keeps a log .*fix: restore"):
        _eval(tasks, run, rec, CoinPolicy())
    assert not (run / ATTEMPT_LOG_FILE).exists()  # the resume did not start a new log that would hide the old one


def test_an_infra_retry_is_accepted(tmp_path: Path, rec: FrozenProtocol, tasks) -> None:  # noqa: ANN001
    out = tmp_path / "run"
    _eval(tasks, out, rec, CoinPolicy(), factory=FakeFactory(tasks[1], fail_agent_attempts={0}))
    lines = read_attempt_log(out)
    assert lines is not None and sorted((x.attempt, x.failure_class) for x in lines if x.arm == "tg@s0") == [
        (0, "infra"), (0, "infra"), (1, "agent"), (1, "agent")]
    assert load_run(out).superseded == 4
    analyze(rec, [out])


def test_a_resume_that_adds_seeds_and_arms_is_accepted(tmp_path: Path, tasks) -> None:  # noqa: ANN001
    rec = _rec(episodes_per_task=2)
    out = tmp_path / "run"
    _eval(tasks, out, rec, CoinPolicy())
    _eval(tasks, out, rec, CoinPolicy(), seeds=(0, 1), extra={"base@s0": Null()})
    lines = read_attempt_log(out)
    assert lines is not None and len(lines) == 4 + 2 * 2 + 2 * 2 and {x.event for x in lines} == {"finish"}
    integrity.attempt_log([load_run(out)])
    analyze(rec, [out])


def test_a_regrade_is_logged_and_accepted(run: Path, rec: FrozenProtocol, tasks) -> None:  # noqa: ANN001
    """A regrade rewrites result.json from the attempt's artifacts and logs it: accepted, and it is the fix for
    a result edited by hand."""
    p = run / EP / "a0" / "result.json"
    p.write_text(EpisodeResult.model_validate_json(p.read_text()).model_copy(update={"error": "edited"})
                 .model_dump_json())  # fmt: skip
    with pytest.raises(EvalDataError, match="changed after it was written"):
        analyze(rec, [run])
    regrade_run(run, tasks[0])
    lines = read_attempt_log(run)
    assert lines is not None and [x.event for x in lines] == ["finish"] * 4 + ["regrade"] * 4
    assert lines[-4:][0].result_sha256 == result_sha256(
        (run / "episodes" / lines[-4].instance_id / lines[-4].arm / "s0" / "a0" / "result.json").read_bytes())
    analyze(rec, [run])


def test_an_attempt_a_stopped_run_did_not_log_is_adopted_on_resume(run: Path, rec: FrozenProtocol,
                                                                   tasks) -> None:  # noqa: ANN001
    """Killed between writing result.json and its line: analyze says how to fix it; the resume logs it."""
    log = run / ATTEMPT_LOG_FILE
    lines = log.read_text().splitlines(keepends=True)
    log.write_text("".join(lines[:-1]))
    with pytest.raises(EvalDataError, match=r"result.json has no line in attempts.jsonl; fix: .*run the same"):
        analyze(rec, [run])
    _eval(tasks, run, rec, CoinPolicy())
    assert [x.event for x in read_attempt_log(run) or []][-1] == "adopted"
    analyze(rec, [run])


def test_a_run_begun_without_the_log_keeps_the_old_checks(run: Path, rec: FrozenProtocol, tasks) -> None:  # noqa: ANN001
    """A manifest written before the log existed (no ``attempt_log``) reads as "no log": not checked by it, and
    a resume does not start claiming one."""
    raw = json.loads((run / "manifest.json").read_text())
    raw.pop("attempt_log")
    (run / "manifest.json").write_text(json.dumps(raw))
    assert not RunManifest.model_validate(raw).attempt_log
    (run / ATTEMPT_LOG_FILE).unlink()
    shutil.rmtree(run / EP)
    _eval(tasks, run, rec, CoinPolicy())
    assert not read_manifest(run).attempt_log  # type: ignore[union-attr]
    analyze(rec, [run])


def test_a_line_torn_by_a_stopped_writer_does_not_glue_to_the_next(tmp_path: Path) -> None:
    res = EpisodeResult(run_id="r", instance_id="i", repo="r", cluster="r", arm="a", policy="p", seed=0,
                        status="ok", failure_class="none", resolved=True)
    (tmp_path / ATTEMPT_LOG_FILE).write_bytes(attempt_record(res, b"x", "finish").model_dump_json().encode())
    append_record(tmp_path, attempt_record(res, b"y", "regrade"))
    assert [x.event for x in read_attempt_log(tmp_path) or []] == ["finish", "regrade"]
