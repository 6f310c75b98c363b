"""Importing logged trajectories: OpenAI chat JSONL, Inspect .json / .eval logs; errors name file, place, field, fix."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

from harness.tools import parse_tool_calls
from harness.trajdata.common import RecordError
from harness.trajdata.importer import import_source

CHAT = {
    "messages": [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": [{"type": "text", "text": "Fix add() in calc.py"}]},
        {"role": "assistant", "content": None, "reasoning_content": "look first",
         "tool_calls": [{"id": "c1", "type": "function",
                         "function": {"name": "read_file", "arguments": "{\"path\": \"calc.py\"}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "def add(a, b):\n    return a - b\n"},
        {"role": "assistant", "content": "Fixed.",
         "tool_calls": [{"id": "c2", "type": "function",
                         "function": {"name": "finish", "arguments": "{\"message\": \"Fixed add.\"}"}}]},
    ],
    "metadata": {"instance_id": "calc-1", "resolved": True, "reward": 1.0, "user_feedback": 0.5, "model": "m1"},
}


def _jsonl(path: Path, rows: list[object]) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def test_openai_chat_normalised_to_the_trajectory_schema(tmp_path: Path) -> None:
    records, summary = import_source(_jsonl(tmp_path / "chat.jsonl", [CHAT]))
    assert summary.records == 1 and summary.source_format == "openai_jsonl" and not summary.skipped
    r = records[0]
    t = r.trajectory
    assert t.instance_id == "calc-1" and t.policy == "m1" and t.finished and t.final_message == "Fixed add."
    assert [m.role for m in t.messages] == ["system", "user", "assistant", "tool", "assistant"]
    assert [m.turn for m in t.messages] == [0, 0, 0, 0, 1]
    first = t.messages[2]
    assert first.content.startswith("<think>\nlook first\n</think>")
    # the tool call is rendered in this project's format, so it parses back to the same call
    assert [(c.name, c.arguments) for c in parse_tool_calls(first.content)] == [("read_file", {"path": "calc.py"})]
    assert t.messages[3].tool_name == "read_file"
    assert (r.outcome.resolved, r.outcome.reward, r.outcome.feedback_rating) == (True, 1.0, 0.5)
    assert r.provenance.locator == "line 1" and len(r.provenance.source_sha256) == 64
    again, _ = import_source(tmp_path / "chat.jsonl")
    assert again[0].record_id == r.record_id  # stable across re-imports


def test_bad_records_error_or_are_counted(tmp_path: Path) -> None:
    bad_args = json.loads(json.dumps(CHAT))
    bad_args["messages"][2]["tool_calls"][0]["function"]["arguments"] = "{\"path\": "
    no_id = {"messages": CHAT["messages"]}
    image = {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}],
             "instance_id": "x"}
    src = _jsonl(tmp_path / "mixed.jsonl", [CHAT, bad_args, "{not json", no_id, image])
    with pytest.raises(RecordError, match=r"mixed.jsonl \(line 3\): field `\(line\)`: not valid JSON.*fix:"):
        import_source(src)
    records, summary = import_source(src, skip_invalid=True)
    assert len(records) == 2  # a malformed tool call is a valid record (the filter removes it, counted)
    assert not records[1].trajectory.messages[2].tool_calls[0].valid
    skipped = {s.reason: s.count for s in summary.skipped}
    assert skipped == {"invalid (line)": 1, "invalid metadata.instance_id": 1, "invalid messages[0].content[0]": 1}
    assert any("--instance-id" in e for s in summary.skipped for e in s.examples)
    records, _ = import_source(src, skip_invalid=True, default_instance_id="calc-9")
    assert [r.trajectory.instance_id for r in records] == ["calc-1", "calc-1", "calc-9"]


def _inspect_sample(sid: str, value: object, **extra: object) -> dict:
    return {"id": sid, "epoch": 1, "input": "Fix it", "target": "",
            "messages": [
                {"role": "system", "content": "sys"},
                {"role": "user", "content": "Fix add() in calc.py"},
                {"role": "assistant", "content": [{"type": "reasoning", "reasoning": "hmm"},
                                                  {"type": "text", "text": "reading"}],
                 "tool_calls": [{"id": "t1", "function": "bash", "arguments": {"cmd": "cat attachment://abc"}}]},
                {"role": "tool", "content": "", "tool_call_id": "t1", "function": "bash",
                 "error": {"type": "timeout", "message": "took too long"}},
            ],
            "scores": {"verify": {"value": value}}, "metadata": {"instance_id": f"task-{sid}"},
            "attachments": {"abc": "calc.py"}, **extra}


def test_inspect_json_and_eval_logs(tmp_path: Path) -> None:
    samples = [_inspect_sample("1", "C"), _inspect_sample("2", 0.0, limit={"type": "message", "limit": 30}),
               _inspect_sample("3", "I", error={"message": "sandbox died", "traceback": "", "traceback_ansi": ""})]
    log = {"version": 2, "status": "success", "eval": {"task": "swe", "model": "openai/gpt-x"}, "samples": samples}
    (tmp_path / "log.json").write_text(json.dumps(log))
    with zipfile.ZipFile(tmp_path / "log.eval", "w") as zf:
        zf.writestr("header.json", json.dumps({"version": 2, "eval": log["eval"]}))
        for s in samples:
            zf.writestr(f"samples/{s['id']}_epoch_1.json", json.dumps(s))
    for name in ("log.json", "log.eval"):
        records, summary = import_source(tmp_path / name)
        assert summary.source_format == ("inspect_eval" if name.endswith(".eval") else "inspect_json")
        assert [r.trajectory.instance_id for r in records] == ["task-1", "task-2", "task-3"]
        r1, r2, r3 = records
        assert r1.trajectory.policy == "openai/gpt-x" and r1.outcome.resolved is True and r1.outcome.reward == 1.0
        call = r1.trajectory.messages[2].tool_calls[0]
        assert call.valid and call.arguments == {"cmd": "cat calc.py"}  # attachment resolved
        assert r1.trajectory.messages[2].content.startswith("<think>\nhmm\n</think>\nreading")
        assert r1.trajectory.messages[3].content.startswith("ERROR: timeout: took too long")
        assert r2.outcome.resolved is False and r2.outcome.truncated == "message limit 30"
        assert r3.outcome.infra_error == "sandbox died" and r3.provenance.locator == "sample 3 epoch 1"


def test_inspect_score_choice_and_missing_samples(tmp_path: Path) -> None:
    s = _inspect_sample("1", "C")
    s["scores"]["other"] = {"value": 0.5}
    (tmp_path / "two.json").write_text(json.dumps({"eval": {}, "samples": [s]}))
    with pytest.raises(RecordError, match=r"several scores \(other, verify\).*--score"):
        import_source(tmp_path / "two.json")
    records, _ = import_source(tmp_path / "two.json", score_name="other")
    assert records[0].outcome.resolved is None and records[0].outcome.reward == 0.5
    (tmp_path / "empty.json").write_text(json.dumps({"eval": {}, "status": "success"}))
    with pytest.raises(RecordError, match="holds no samples.*log_samples"):
        import_source(tmp_path / "empty.json")
    (tmp_path / "chat.json").write_text(json.dumps([{"role": "user", "content": "hi"}]))  # not an Inspect log
    with pytest.raises(RecordError, match=r"chat.json.*not an Inspect log.*--format openai"):
        import_source(tmp_path / "chat.json")
    (tmp_path / "notzip.eval").write_text("x")
    with pytest.raises(RecordError, match="not a zip archive"):
        import_source(tmp_path / "notzip.eval")


def test_truncation_and_roles_read_from_chat_logs(tmp_path: Path) -> None:
    row = {"messages": [{"role": "developer", "content": "sys"}, {"role": "user", "content": "go"},
                        {"role": "assistant", "content": "partial", "finish_reason": "length"}],
           "instance_id": "i", "truncated": "max_tokens"}
    (r,), _ = import_source(_jsonl(tmp_path / "t.jsonl", [row]))
    assert [m.role for m in r.trajectory.messages] == ["system", "user", "assistant"]
    assert r.trajectory.messages[2].truncated and r.outcome.truncated == "max_tokens"
    legacy = {"messages": [{"role": "function", "content": "x"}], "instance_id": "i"}
    with pytest.raises(RecordError, match=r"field `messages\[0\].role`.*rewrite them as 'tool'"):
        import_source(_jsonl(tmp_path / "f.jsonl", [legacy]))


def test_data_cli_refuses_to_overwrite_and_names_the_fix(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from tgsuite.cli import main

    src = _jsonl(tmp_path / "chat.jsonl", [CHAT])
    assert main(["data", "import", str(src), "--out", str(tmp_path / "ds")]) == 0
    assert main(["data", "import", str(src), "--out", str(tmp_path / "ds")]) == 2
    assert "already holds a dataset" in capsys.readouterr().err
    bad = _jsonl(tmp_path / "bad.jsonl", ["{oops"])
    assert main(["data", "import", str(bad), "--out", str(tmp_path / "ds2")]) == 2
    assert "bad.jsonl (line 1)" in capsys.readouterr().err
    assert main(["data", "filter", str(tmp_path / "ds"), "--out", str(tmp_path / "f"), "--near-dup-threshold", "2"]) == 2
    assert "near_dup_threshold" in capsys.readouterr().err


def test_user_feedback_thumbs_and_min_reward_reads_the_logged_reward(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    """Canary logs write thumbs ("up"/"down"); --min-reward compares the logged reward unless told to recompute."""
    from tgsuite.cli import main

    def chat(iid: str, reward: float, feedback: object) -> dict:
        row = json.loads(json.dumps(CHAT))
        row["metadata"] = {**row["metadata"], "instance_id": iid, "reward": reward, "user_feedback": feedback}
        row["messages"][1]["content"] = f"Fix add() in calc.py ({iid})"  # not duplicates of each other
        return row

    src = _jsonl(tmp_path / "chat.jsonl", [chat("a", 0.0, "up"), chat("b", 0.9, "down"), chat("c", 0.7, 0.25)])
    records, _ = import_source(src)
    assert [r.outcome.feedback_rating for r in records] == [1.0, -1.0, 0.25]
    with pytest.raises(RecordError, match=r"user_feedback.*'meh'.*\"up\""):
        import_source(_jsonl(tmp_path / "bad.jsonl", [chat("d", 1.0, "meh")]))
    assert main(["data", "import", str(src), "--out", str(tmp_path / "raw")]) == 0
    capsys.readouterr()
    assert main(["data", "filter", str(tmp_path / "raw"), "--out", str(tmp_path / "kept"), "--no-near-dup",
                 "--min-reward", "0.5"]) == 0
    printed = capsys.readouterr().out
    assert "compared the reward logged with each record" in printed and "kept 2 of 3" in printed
    from harness.trajdata.dataset import read_dataset

    kept, card = read_dataset(tmp_path / "kept")
    assert sorted(r.trajectory.instance_id for r in kept) == ["b", "c"]  # a was logged at 0.0
    assert "logged reward 0.000 < 0.5" in " ".join(f.examples[0] for f in card.filters if f.name == "min_reward")
    assert main(["data", "filter", str(tmp_path / "raw"), "--out", str(tmp_path / "x"), "--reward-from-arm",
                 "base"]) == 2  # without --min-reward it would choose nothing
