"""Tools: Qwen3 call parsing, schema validation, execution in a (fake, subprocess) sandbox, path safety."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from harness.schema import ToolCall
from harness.tools import (
    ERROR_PREFIX,
    TOOL_NAMES,
    ToolExecutor,
    cap_text,
    format_tool_call,
    hidden_test_files,
    normalize_path,
    parse_tool_calls,
    tool_schemas,
    validate_arguments,
    visible_text,
)
from tests.harness_fakes import DirSandbox, make_calc_task


@pytest.fixture()
def calc(tmp_path: Path):
    inst, repo = make_calc_task(tmp_path)
    sbx = DirSandbox(repo)
    yield inst, sbx
    sbx.close()


def _call(name: str, **args) -> ToolCall:
    (call,) = parse_tool_calls(format_tool_call(name, args))
    return call


def test_schemas_fixed_contract() -> None:
    schemas = {s["function"]["name"]: s["function"]["parameters"] for s in tool_schemas()}
    assert tuple(schemas) == TOOL_NAMES == ("list_files", "read_file", "search", "edit_file", "run_tests", "ask_user",
                                            "finish")
    assert "required" not in schemas["list_files"] and schemas["list_files"]["properties"]["path"]["default"] == "."
    assert schemas["read_file"]["required"] == ["path"]
    assert schemas["search"]["required"] == ["pattern"] and schemas["search"]["properties"]["path"]["default"] == "."
    assert schemas["edit_file"]["required"] == ["path", "old", "new"]  # "reason" is optional (tool_args@v1)
    assert set(schemas["edit_file"]["properties"]) == {"path", "old", "new", "reason"}
    assert schemas["ask_user"]["required"] == ["question"]
    assert schemas["run_tests"]["properties"]["tests"] == {"type": "array", "items": {"type": "string"}, "default": []}
    assert "required" not in schemas["run_tests"] and schemas["finish"]["required"] == ["message"]
    for s in tool_schemas():
        assert s["type"] == "function" and s["function"]["parameters"]["type"] == "object"
        assert s["function"]["description"]
    # a fresh copy each call: callers cannot corrupt the module's schemas
    tool_schemas()[0]["function"]["name"] = "hacked"
    assert tool_schemas()[0]["function"]["name"] == "list_files"


def test_parse_qwen3_calls_and_think() -> None:
    text = (
        "<think>maybe <tool_call>{\"name\": \"finish\", \"arguments\": {\"message\": \"no\"}}</tool_call></think>"
        "Let me look.\n<tool_call>\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"calc.py\"}}\n</tool_call>\n"
        "<tool_call>{\"name\": \"list_files\", \"arguments\": {}}</tool_call>"
    )
    calls = parse_tool_calls(text)
    assert [c.name for c in calls] == ["read_file", "list_files"]  # the call inside <think> is not a call
    assert all(c.valid for c in calls) and calls[0].arguments == {"path": "calc.py"}
    assert visible_text(text) == "Let me look."
    # template-opened thinking: no <think> in the completion, only </think>
    assert parse_tool_calls("a <tool_call>{}</tool_call> b </think>done") == []


@pytest.mark.parametrize(
    ("block", "needle"),
    [
        ("<tool_call>{not json}</tool_call>", "invalid JSON"),
        ("<tool_call>{\"name\": \"rm\", \"arguments\": {}}</tool_call>", "unknown tool 'rm'"),
        ("<tool_call>{\"name\": \"read_file\", \"arguments\": {}}</tool_call>", "missing required argument 'path'"),
        ("<tool_call>{\"name\": \"read_file\", \"arguments\": {\"path\": 3}}</tool_call>", "must be a string"),
        ("<tool_call>{\"name\": \"read_file\", \"arguments\": {\"path\": \"a\", \"x\": 1}}</tool_call>", "unknown argument 'x'"),
        ("<tool_call>{\"name\": \"run_tests\", \"arguments\": {\"tests\": \"a\"}}</tool_call>", "list of strings"),
        ("<tool_call>{\"name\": \"finish\", \"arguments\": \"{}\"}</tool_call>", "must be a JSON object"),
        ("<tool_call>[1, 2]</tool_call>", "must be {\"name\""),
        ("<tool_call>{\"name\": \"finish\", \"arguments\": {\"message\": \"x\"}, \"id\": 1}</tool_call>", "unexpected keys"),
        ("<tool_call>{\"name\": \"finish\", \"arguments\": {\"message\": \"x\"}}", "unclosed"),
    ],
)
def test_malformed_calls_are_invalid(block: str, needle: str) -> None:
    (call,) = parse_tool_calls(block)
    assert not call.valid and call.error is not None and needle in call.error


def test_validate_arguments_accepts_defaults_omitted() -> None:
    assert validate_arguments("search", {"pattern": "x"}) is None
    assert validate_arguments("run_tests", {}) is None


def test_normalize_path_refuses_escapes() -> None:
    assert normalize_path("a/../b.py") == "b.py"
    assert normalize_path("./src//x.py") == "src/x.py"
    for bad in ("/etc/passwd", "..", "../x", "a/../../x", "", "a\x00b"):
        assert normalize_path(bad) is None


def test_list_read_search(calc) -> None:
    inst, sbx = calc
    ex = ToolExecutor(sbx, inst, timeout=30, cap_chars=10_000)
    listed = ex.run(_call("list_files")).observation.splitlines()
    assert "calc.py" in listed and "tests/test_calc.py" in listed and not any(".git/" in p for p in listed)
    assert ex.run(_call("list_files", path="tests")).observation == "tests/test_calc.py"
    assert ex.run(_call("read_file", path="calc.py")).observation.startswith("def add(a, b):")
    hits = ex.run(_call("search", pattern=r"def (add|sub)"))
    assert not hits.error and "calc.py:1:def add(a, b):" in hits.observation and "calc.py:5:" in hits.observation
    assert "no matches" in ex.run(_call("search", pattern="zzz_nothing")).observation
    assert ex.run(_call("search", pattern="(unclosed")).error
    for res in (ex.run(_call("read_file", path="nope.py")), ex.run(_call("read_file", path="tests"))):
        assert res.error and res.observation.startswith(ERROR_PREFIX)


@pytest.mark.parametrize("path", ["/etc/passwd", "../outside.txt", "tests/../../x", "link_out/passwd", "link_file"])
def test_paths_leaving_the_repo_are_refused(calc, path: str, tmp_path: Path) -> None:
    inst, sbx = calc
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP SECRET")
    os.symlink("/etc", sbx.root / "link_out")
    os.symlink(secret, sbx.root / "link_file")
    ex = ToolExecutor(sbx, inst, timeout=30, cap_chars=10_000)
    for call in (_call("read_file", path=path), _call("edit_file", path=path, old="x", new="y"),
                 _call("list_files", path=path), _call("search", pattern="root", path=path)):
        res = ex.run(call)
        assert res.error and "outside the repository" in res.observation, (call.name, res.observation)
        assert "TOP SECRET" not in res.observation and "root:" not in res.observation
    assert secret.read_text() == "TOP SECRET"


def test_edit_file_exact_once(calc) -> None:
    inst, sbx = calc
    ex = ToolExecutor(sbx, inst, timeout=30, cap_chars=10_000)
    zero = ex.run(_call("edit_file", path="calc.py", old="return a * b", new="x"))
    assert zero.error and "not found" in zero.observation
    many = ex.run(_call("edit_file", path="calc.py", old="return a - b", new="return a + b"))
    assert many.error and "occurs 2 times" in many.observation
    assert (sbx.root / "calc.py").read_text().count("return a - b") == 2  # unchanged after errors
    ok = ex.run(_call("edit_file", path="calc.py", old="    return a - b\n\n\ndef sub", new="    return a + b\n\n\ndef sub"))
    assert not ok.error and "line 2" in ok.observation
    assert (sbx.root / "calc.py").read_text().startswith("def add(a, b):\n    return a + b\n")
    created = ex.run(_call("edit_file", path="pkg/new.py", old="", new="X = 1\n"))
    assert not created.error and (sbx.root / "pkg/new.py").read_text() == "X = 1\n"
    again = ex.run(_call("edit_file", path="pkg/new.py", old="", new="Y = 2\n"))
    assert again.error and "already exists" in again.observation


def test_edit_reason_and_ask_user(calc) -> None:
    """``reason`` is accepted and changes nothing; ask_user always gets the fixed approval (tool_args/ask_first)."""
    from harness.tools import ASK_USER_ANSWER

    inst, sbx = calc
    ex = ToolExecutor(sbx, inst, timeout=30, cap_chars=10_000)
    call = _call("edit_file", path="pkg/r.py", old="", new="Z = 3\n", reason="add a constant")
    assert call.valid and not ex.run(call).error and (sbx.root / "pkg/r.py").read_text() == "Z = 3\n"
    assert not _call("edit_file", path="a.py", old="", new="", reason=3).valid  # must be a string
    ask = ex.run(_call("ask_user", question="May I edit calc.py?"))
    assert not ask.error and ask.observation == ASK_USER_ANSWER == ex.run(_call("ask_user", question="Why?")).observation
    assert ex.run(_call("ask_user", question="  ")).error


def test_run_tests_visible_only(calc) -> None:
    inst, sbx = calc
    ex = ToolExecutor(sbx, inst, timeout=60, cap_chars=10_000)
    res = ex.run(_call("run_tests"))
    assert not res.error and "1 passed" in res.observation and "[exit code 0]" in res.observation
    # test_calc.py is only modified by the hidden patch: its visible version may run
    assert hidden_test_files(inst) == set()
    assert "1 passed" in ex.run(_call("run_tests", tests=["tests/test_calc.py::test_sub"])).observation
    # a test file the hidden patch creates is refused by name (hidden test names cannot be probed)
    new_file = "--- /dev/null\n+++ b/tests/test_hidden.py\n@@ -0,0 +1 @@\n+def test_x(): pass\n"
    ex_h = ToolExecutor(sbx, inst.model_copy(update={"test_patch": new_file}), timeout=60, cap_chars=10_000)
    refused = ex_h.run(_call("run_tests", tests=["tests/test_hidden.py::test_x"]))
    assert refused.error and "not a visible test" in refused.observation
    for bad in ("--co", "/etc/x.py", "../t.py"):
        assert ex.run(_call("run_tests", tests=[bad])).error
    custom = inst.model_copy(update={"visible_test_cmd": "python -m pytest -q tests", "test_patch": ""})
    ex2 = ToolExecutor(sbx, custom, timeout=60, cap_chars=10_000)
    out = ex2.run(_call("run_tests", tests=["tests/test_calc.py::test_sub"]))
    assert "$ python -m pytest -q tests tests/test_calc.py::test_sub" in out.observation and "1 passed" in out.observation


def test_observation_cap_and_truncation_flag(calc) -> None:
    inst, sbx = calc
    (sbx.root / "big.txt").write_text("".join(f"line {i}\n" for i in range(5000)))
    ex = ToolExecutor(sbx, inst, timeout=30, cap_chars=200)
    res = ex.run(_call("read_file", path="big.txt"))
    assert res.truncated and len(res.observation) < 300
    assert res.observation.startswith("line 0") and res.observation.rstrip().endswith("line 4999")
    assert cap_text("abc", 10) == ("abc", False)


def test_invalid_call_observation_and_finish(calc) -> None:
    inst, sbx = calc
    ex = ToolExecutor(sbx, inst, timeout=30, cap_chars=1000)
    (bad,) = parse_tool_calls("<tool_call>{oops}</tool_call>")
    res = ex.run(bad)
    assert res.error and "malformed tool call" in res.observation and "invalid JSON" in res.observation
    fin = ex.run(_call("finish", message="## Done"))
    assert fin.finished and fin.finish_message == "## Done"
    assert json.loads(format_tool_call("finish", {"message": "é"}).splitlines()[1])["arguments"]["message"] == "é"


def test_large_binary_and_unreadable_files_give_error_observations(calc, monkeypatch: pytest.MonkeyPatch) -> None:
    import harness.tools as tools_mod

    inst, sbx = calc
    (sbx.root / "blob.bin").write_bytes(b"\xff\xfe\x00abc")
    (sbx.root / "big.txt").write_text("x" * 100)
    monkeypatch.setattr(tools_mod, "EDIT_CAP_BYTES", 50)
    ex = ToolExecutor(sbx, inst, timeout=30, cap_chars=10_000)
    big = ex.run(_call("edit_file", path="big.txt", old="x", new="y"))
    assert big.error and "50 bytes or larger" in big.observation
    assert not ex.run(_call("read_file", path="blob.bin")).error  # shown with replacement characters
    edit = ex.run(_call("edit_file", path="blob.bin", old="abc", new="xyz"))
    assert edit.error and "not UTF-8" in edit.observation
    assert (sbx.root / "blob.bin").read_bytes() == b"\xff\xfe\x00abc"
    os.chmod(sbx.root / "big.txt", 0)
    if os.geteuid() != 0:  # root reads anything
        assert ex.run(_call("read_file", path="big.txt")).error


def test_option_like_paths_are_never_options(calc) -> None:
    inst, sbx = calc
    (sbx.root / "-delete").mkdir()
    (sbx.root / "-delete" / "keep.py").write_text("KEEP = 1\n")
    ex = ToolExecutor(sbx, inst, timeout=30, cap_chars=10_000)
    assert ex.run(_call("list_files", path="-delete")).observation == "-delete/keep.py"
    assert "-delete/keep.py:1:KEEP = 1" in ex.run(_call("search", pattern="KEEP", path="-delete")).observation
    assert ex.run(_call("read_file", path="-delete/keep.py")).observation == "KEEP = 1\n"
    assert (sbx.root / "calc.py").exists() and (sbx.root / "-delete" / "keep.py").exists()


def test_tools_on_the_real_local_sandbox(local_sandbox, tmp_path: Path) -> None:
    """The same contract on harness.sandbox_local.LocalSandbox (not only on the test fake)."""
    inst, repo = make_calc_task(tmp_path)
    local_sandbox.copy_in(repo, ".")
    ex = ToolExecutor(local_sandbox, inst, timeout=60, cap_chars=10_000)
    assert "calc.py" in ex.run(_call("list_files")).observation.splitlines()
    for path in ("/etc/passwd", "../x", "tests/../../x"):
        assert "outside the repository" in ex.run(_call("read_file", path=path)).observation
    fix = ex.run(_call("edit_file", path="calc.py", old="    return a - b\n\n\ndef sub",
                       new="    return a + b\n\n\ndef sub"))
    assert not fix.error
    assert "[exit code 0]" in ex.run(_call("run_tests")).observation


@pytest.mark.docker
def test_tools_in_a_docker_sandbox(docker_provider, tmp_path: Path) -> None:
    """Path escapes inside a real container (symlinks to /etc resolved in the container), edits and tests."""
    inst, repo = make_calc_task(tmp_path)
    with docker_provider.create(instance_id="tools") as box:
        box.copy_in(repo, ".")
        assert box.exec(["ln", "-s", "/etc", "link_out"], timeout=30).returncode == 0
        ex = ToolExecutor(box, inst, timeout=120, cap_chars=10_000)
        for path in ("/etc/passwd", "../x", "link_out/passwd"):
            res = ex.run(_call("read_file", path=path))
            assert res.error and "outside the repository" in res.observation and "root:" not in res.observation
        assert "calc.py:1:def add(a, b):" in ex.run(_call("search", pattern="def add")).observation
        assert not ex.run(_call("edit_file", path="calc.py", old="    return a - b\n\n\ndef sub",
                                new="    return a + b\n\n\ndef sub")).error
        out = ex.run(_call("run_tests"))
        assert "1 passed" in out.observation and "[exit code 0]" in out.observation, out.observation


def test_write_refused_by_the_sandbox_is_an_observation(calc, monkeypatch: pytest.MonkeyPatch) -> None:
    inst, sbx = calc

    def refuse(path: str, data: bytes) -> None:
        raise PermissionError(f"{path}: read-only")

    monkeypatch.setattr(sbx, "write_file", refuse)
    ex = ToolExecutor(sbx, inst, timeout=30, cap_chars=10_000)
    res = ex.run(_call("edit_file", path="calc.py", old="def add", new="def plus"))
    assert res.error and "cannot write calc.py" in res.observation
    assert ex.run(_call("edit_file", path="new.py", old="", new="x")).error


def test_a_stalled_file_operation_is_infrastructure_not_an_error_the_agent_sees(calc) -> None:
    """A path check / read / listing that times out means the sandbox stalled (seen under full machine load): it
    raises ``SandboxUnavailable`` (the runner retries the episode) instead of telling the agent 'could not resolve
    path', after which an oracle finished with no change and was scored 'the agent changed nothing'."""
    from harness.sandbox import ExecResult, SandboxUnavailable

    inst, sbx = calc

    class Stalled:
        def __getattr__(self, name):
            return getattr(sbx, name)

        def exec(self, cmd, *, timeout, **kw):
            return ExecResult(-9, "", "", True, False, timeout)

    ex = ToolExecutor(Stalled(), inst, timeout=0.5, cap_chars=10_000)
    for call in (_call("read_file", path="calc.py"), _call("list_files", path="."),
                 _call("edit_file", path="calc.py", old="a", new="b"), _call("search", pattern="def")):
        with pytest.raises(SandboxUnavailable, match="did not finish within 0.5 s") as err:
            ex.run(call)
        assert err.value.kind == "SANDBOX"
    # a test run that times out is the agent's code: an observation, as before
    out = ex.run(_call("run_tests"))
    assert "TIMED OUT" in out.observation
