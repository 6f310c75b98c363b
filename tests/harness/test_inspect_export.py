"""``tgsuite export inspect``: a run directory as Inspect ``.eval`` logs, read back with Inspect's own reader
(``read_eval_log``) and served by Inspect's own viewer API (what ``inspect view`` loads), with per-sample scores,
messages and tool calls; infra errors as errored samples; grade runs without behaviour scores."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("inspect_ai")

from inspect_ai.log import read_eval_log  # noqa: E402

from harness.infra import RetryPolicy  # noqa: E402
from harness.interfaces import EpisodeLimits, PolicyOutput  # noqa: E402
from harness.rundir import latest_results  # noqa: E402
from harness.runner import run_eval  # noqa: E402
from harness.schema import TaskSet  # noqa: E402
from tests.harness_fakes import FakeFactory, FixPolicy, NullFinishPolicy, make_calc_task  # noqa: E402


class BadCallPolicy:
    """Turn 0: read_file without its path (a malformed call); turn 1: finish."""

    name = "bad"

    def act(self, messages: list[Any], *, tools: list[Any], rng: Any) -> PolicyOutput:
        from harness.tools import format_tool_call

        if not any(m.role == "assistant" for m in messages):
            return PolicyOutput(text="Let me look.\n" + format_tool_call("read_file", {}))
        return PolicyOutput(text=format_tool_call("finish", {"message": "Gave up."}))


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A run with arms fix / null / bad on two seeds, and an arm whose sandbox always fails (infra); exported."""
    from tgsuite.cli import main

    tmp = tmp_path_factory.mktemp("insp")
    inst, repo = make_calc_task(tmp / "repos", "calc-1")
    inst = inst.model_copy(update={"behaviour": ["markdown@v1"]})
    ts = TaskSet(name="calc", path=str(tmp), sha256="e" * 64, instances=[inst])
    out = tmp / "run"
    lim = EpisodeLimits(max_turns=4)
    run_eval(ts, {"fix": FixPolicy(), "null": NullFinishPolicy(), "bad": BadCallPolicy()}, [0, 1], out,
             sandbox_factory=FakeFactory({"calc-1": repo}), limits=lim)
    run_eval(ts, {"broken": NullFinishPolicy()}, [0, 1], out, limits=lim, retry=RetryPolicy(max_attempts=1),
             sandbox_factory=FakeFactory({"calc-1": repo}, fail_agent_attempts={0}))
    assert main(["export", "inspect", str(out)]) == 0
    return out, out / "inspect"


def test_scores_messages_and_tool_calls_read_back_with_inspect(run: tuple[Path, Path]) -> None:
    out, logs = run
    assert sorted(p.name for p in logs.iterdir()) == ["calc_bad.eval", "calc_broken.eval", "calc_fix.eval",
                                                      "calc_null.eval"]
    results = {(r.arm, r.seed): r for r in latest_results(out).results}
    fix = read_eval_log(str(logs / "calc_fix.eval"))
    assert fix.status == "success" and fix.eval.model == "tgsuite/fix" and fix.eval.task == "calc"
    assert fix.eval.config.epochs == 2 and sorted(s.epoch for s in fix.samples) == [1, 2]
    assert {s.name: s.metrics["accuracy"].value for s in fix.results.scores} == {
        "resolved": 1.0, "behaviour": 1.0, "joint": 1.0}
    s = fix.samples[0]
    assert s.id == "calc-1" and s.input == "add() subtracts" and s.metadata["status"] == "ok"
    assert {k: v.value for k, v in s.scores.items()} == {"resolved": "C", "behaviour": "C", "joint": "C"}
    assert s.scores["behaviour"].explanation == "markdown@v1: ok"
    assert [m.role for m in s.messages] == ["system", "user", "assistant", "tool", "assistant", "tool"]
    edit, finish = s.messages[2].tool_calls[0], s.messages[4].tool_calls[0]
    assert (edit.function, edit.arguments["path"]) == ("edit_file", "calc.py") and s.messages[3].tool_call_id == edit.id
    assert finish.function == "finish" and s.messages[5].tool_call_id == finish.id != edit.id
    assert s.output.completion == "Fixed `add` in `calc.py`: it now adds its arguments."  # the finish message

    null = read_eval_log(str(logs / "calc_null.eval"))
    for smp in null.samples:
        r = results[("null", smp.epoch - 1)]
        assert smp.scores["resolved"].value == "I" and smp.metadata["status"] == "empty_patch"
        assert smp.scores["behaviour"].value == ("C" if r.behaviour_ok else "I")
        assert smp.scores["joint"].value == "I"


def test_bad_calls_and_infra_errors_keep_their_meaning(run: tuple[Path, Path]) -> None:
    _, logs = run
    bad = read_eval_log(str(logs / "calc_bad.eval")).samples[0]
    call, answer = bad.messages[2].tool_calls[0], bad.messages[3]
    assert bad.messages[2].text == "Let me look." and call.parse_error and "missing required argument" in call.parse_error
    assert answer.error is not None and answer.tool_call_id == call.id
    broken = read_eval_log(str(logs / "calc_broken.eval"))
    assert broken.results.completed_samples == 0 and broken.results.scores == []
    assert all(s.error is not None and s.scores is None and "infra" in s.error.message for s in broken.samples)


def test_inspect_view_serves_the_logs(run: tuple[Path, Path]) -> None:
    from fastapi.testclient import TestClient
    from inspect_ai._view.fastapi_server import view_server_app

    _, logs = run
    client = TestClient(view_server_app(default_dir=logs.as_posix()))
    listed = client.get("/log-files").json()
    names = sorted(Path(f["name"]).name for f in listed["files"])
    assert names == ["calc_bad.eval", "calc_broken.eval", "calc_fix.eval", "calc_null.eval"]
    got = client.get(f"/logs/{(logs / 'calc_fix.eval').as_posix()}")
    assert got.status_code == 200
    body = got.json()
    assert body["eval"]["model"] == "tgsuite/fix" and len(body["samples"]) == 2


def test_our_importer_reads_the_export_back(run: tuple[Path, Path]) -> None:
    from harness.trajdata.inspect_log import iter_inspect_log

    recs = list(iter_inspect_log(run[1] / "calc_fix.eval", score_name="resolved"))
    assert len(recs) == 2 and all(r.outcome.resolved for r in recs)
    assert [c.name for m in recs[0].trajectory.messages for c in m.tool_calls] == ["edit_file", "finish"]


def test_a_grade_run_has_no_behaviour_score(tmp_path: Path) -> None:
    from harness.predictions import grade_predictions
    from harness.schema import Prediction
    from harness.trajdata.inspect_export import export_inspect

    inst, repo = make_calc_task(tmp_path / "repos", "calc-1")
    ts = TaskSet(name="calc", path=str(tmp_path), sha256="e" * 64, instances=[inst])
    grade_predictions(ts, [Prediction(instance_id="calc-1", model_name_or_path="m", model_patch=inst.patch)],
                      tmp_path / "g", sandbox_factory=FakeFactory({"calc-1": repo}))
    (path,) = export_inspect(tmp_path / "g", tmp_path / "logs")
    s = read_eval_log(str(path)).samples[0]
    assert {k: v.value for k, v in s.scores.items()} == {"resolved": "C"} and s.messages == []


def test_not_a_run_dir_names_the_fix(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tgsuite.cli import main

    assert main(["export", "inspect", str(tmp_path)]) == 2
    assert "manifest.json: not found; fix: pass the --out directory" in capsys.readouterr().err


def test_data_import_reads_the_zstd_export_in_a_process_without_inspect_loaded(run: tuple[Path, Path],
                                                                                tmp_path: Path) -> None:
    """Inspect writes .eval members zstd-compressed; `tgsuite data import` (a fresh process: inspect_ai not yet
    imported, so zipfile not patched) must read them, and without inspect_ai say what to install."""
    import subprocess
    import sys
    import zipfile

    root = Path(__file__).resolve().parents[2]
    log = run[1] / "calc_fix.eval"
    assert {i.compress_type for i in zipfile.ZipFile(log).infolist()} == {93}  # zstd
    got = subprocess.run([sys.executable, "-m", "tgsuite.cli", "data", "import", str(log), "--out",
                          str(tmp_path / "ds"), "--score", "resolved"], cwd=root, capture_output=True, text=True)
    assert got.returncode == 0, got.stderr
    assert "imported 2 records" in got.stdout
    code = ("import sys; sys.modules['inspect_ai'] = None\n"
            "from harness.trajdata.common import RecordError\n"
            "from harness.trajdata.importer import import_source\n"
            f"try:\n    import_source({str(log)!r}, score_name='resolved')\n"
            "except RecordError as exc:\n    print(exc)\n")
    got = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True)
    assert got.returncode == 0, got.stderr
    assert "calc_fix.eval" in got.stdout and "zstd" in got.stdout and "pip install 'tgsuite[inspect]'" in got.stdout


def test_thinking_is_reasoning_content_and_survives_the_round_trip(tmp_path: Path) -> None:
    """A turn's <think> block is an Inspect ContentReasoning part (not only buried in metadata.raw), so Inspect
    shows it and `tgsuite data import` of the .eval gets it back."""
    from inspect_ai.log import EvalLog, EvalSpec, write_eval_log
    from inspect_ai.model import ContentReasoning

    from harness.schema import Message, Trajectory
    from harness.tools import format_tool_call, parse_tool_calls
    from harness.trajdata.inspect_export import chat_messages
    from harness.trajdata.inspect_log import iter_inspect_log

    text = "<think>\nThe bug is in add().\n</think>\n\nLooking.\n" + format_tool_call("read_file", {"path": "calc.py"})
    traj = Trajectory(instance_id="calc-1", policy="p", seed=0, messages=[
        Message(role="system", content="sys"), Message(role="user", content="add() subtracts"),
        Message(role="assistant", content=text, tool_calls=parse_tool_calls(text)),
        Message(role="tool", content="def add(a, b): return a - b", tool_name="read_file")])
    msgs = chat_messages(traj)
    parts = msgs[2].content
    assert isinstance(parts, list) and isinstance(parts[0], ContentReasoning)
    assert parts[0].reasoning == "The bug is in add()." and msgs[2].text == "Looking."
    from inspect_ai.log import EvalSample

    log = EvalLog(eval=EvalSpec(created="2026-01-01T00:00:00Z", task="t", model="tgsuite/p", dataset={}, config={}),
                  samples=[EvalSample(id="calc-1", epoch=1, input="add() subtracts", target="", messages=msgs)])
    write_eval_log(log, str(tmp_path / "t.eval"))
    (rec,) = iter_inspect_log(tmp_path / "t.eval")
    got = rec.trajectory.messages[2].content
    assert got.startswith("<think>\nThe bug is in add().\n</think>\nLooking.\n<tool_call>"), got


def test_an_episode_without_trajectory_is_a_counted_skip_after_the_round_trip(tmp_path: Path) -> None:
    """An infra episode that failed before the agent ran: the export does not claim it graded a patch made
    elsewhere, and importing the .eval counts it as a skip, as importing the run directory does."""
    from harness.trajdata.importer import import_source
    from harness.trajdata.inspect_export import export_inspect

    inst, repo = make_calc_task(tmp_path / "repos", "calc-1")
    ts = TaskSet(name="calc", path=str(tmp_path), sha256="e" * 64, instances=[inst])
    out = tmp_path / "run"
    run_eval(ts, {"broken": NullFinishPolicy()}, [0], out, limits=EpisodeLimits(max_turns=4),
             retry=RetryPolicy(max_attempts=1), sandbox_factory=FakeFactory({"calc-1": repo}, fail_agent_attempts={0}))
    (out / "episodes/calc-1/broken/s0/a0/trajectory.jsonl").unlink(missing_ok=True)  # failed at sandbox start
    (path,) = export_inspect(out, tmp_path / "logs")
    s = read_eval_log(str(path)).samples[0]
    assert s.error is not None and s.scores is None and s.messages == []
    assert "graded a patch made elsewhere" not in s.input
    from_run = import_source(out)[1]
    recs, summary = import_source(path)
    assert recs == [] and [k.count for k in summary.skipped] == [1] == [k.count for k in from_run.skipped]


def test_hint_messages_stay_hints_after_the_round_trip(tmp_path: Path) -> None:
    """A hint (``is_hint``, what the tokenizer's hint mask and SFT read) is exported as metadata.hint and imported
    back as a hint, not as an ordinary user message."""
    from inspect_ai.log import EvalLog, EvalSample, EvalSpec, write_eval_log

    from harness.schema import Message, Trajectory
    from harness.tools import format_tool_call, parse_tool_calls
    from harness.trajdata.inspect_export import chat_messages
    from harness.trajdata.inspect_log import iter_inspect_log

    fin = format_tool_call("finish", {"message": "## Done"})
    traj = Trajectory(instance_id="calc-1", policy="p", seed=0, messages=[
        Message(role="system", content="sys"), Message(role="user", content="add() subtracts"),
        Message(role="user", content="Reply in Markdown.", is_hint=True),
        Message(role="assistant", content=fin, tool_calls=parse_tool_calls(fin)),
        Message(role="tool", content="finished", tool_name="finish")])
    log = EvalLog(eval=EvalSpec(created="2026-01-01T00:00:00Z", task="t", model="tgsuite/p", dataset={}, config={}),
                  samples=[EvalSample(id="calc-1", epoch=1, input="x", target="", messages=chat_messages(traj))])
    write_eval_log(log, str(tmp_path / "t.eval"))
    (rec,) = iter_inspect_log(tmp_path / "t.eval")
    assert [m.is_hint for m in rec.trajectory.messages] == [False, False, True, False, False]


class LooperPolicy:
    """Reads a file every turn and never finishes: the episode ends at the turn limit."""

    name = "looper"

    def act(self, messages: list[Any], *, tools: list[Any], rng: Any) -> PolicyOutput:
        from harness.tools import format_tool_call

        return PolicyOutput(text=format_tool_call("read_file", {"path": "calc.py"}))


def test_a_turn_limit_is_inspect_s_turn_limit_and_truncates_on_import(tmp_path: Path) -> None:
    """An episode stopped by --max-turns is an Inspect ``turn`` limit of that many turns (it was a ``message``
    limit, which Inspect counts in messages: "message limit 3" on a sample of 8 messages), and imports truncated."""
    from harness.trajdata.inspect_export import export_inspect
    from harness.trajdata.inspect_log import iter_inspect_log

    inst, repo = make_calc_task(tmp_path / "repos", "calc-1")
    ts = TaskSet(name="calc", path=str(tmp_path), sha256="e" * 64, instances=[inst])
    out = tmp_path / "run"
    run_eval(ts, {"looper": LooperPolicy()}, [0], out, limits=EpisodeLimits(max_turns=3),
             sandbox_factory=FakeFactory({"calc-1": repo}))
    (path,) = export_inspect(out, tmp_path / "logs")
    s = read_eval_log(str(path)).samples[0]
    assert s.metadata["status"] == "limit_turns"
    assert (s.limit.type, s.limit.limit) == ("turn", 3)
    assert sum(m.role == "assistant" for m in s.messages) == 3
    (rec,) = iter_inspect_log(path, score_name="resolved")
    assert rec.outcome.truncated == "turn limit 3.0"
