"""``tgsuite eval``'s lm-eval / Inspect style options: --limit, --instance globs, generation settings, the API key
from a named environment variable (never on disk), an endpoint concurrency cap, and aggregate.json."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from harness.policies import EndpointSettings, GenerationSettings, build_arm_policy
from harness.policies.openai import OpenAIPolicy
from harness.schema import Message, TaskSet
from harness.tools import format_tool_call
from tgsuite.commands.common import CLIError
from tgsuite.commands.eval import select_instances

ROOT = Path(__file__).resolve().parents[2]
SECRET = "sk-tgsuite-test-9f3a1c"


class FinishServer:
    """Chat-completions on 127.0.0.1 answering every request with a ``finish`` call after ``delay`` seconds;
    records bodies, headers and the most requests it had in flight at once."""

    def __init__(self, delay: float = 0.0) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.auth: list[str | None] = []
        self.in_flight = self.max_in_flight = 0
        lock, outer = threading.Lock(), self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                with lock:
                    outer.in_flight += 1
                    outer.max_in_flight = max(outer.max_in_flight, outer.in_flight)
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.bodies.append(body)
                outer.auth.append(self.headers.get("Authorization"))
                time.sleep(delay)
                text = format_tool_call("finish", {"message": "Nothing to change."})
                data = json.dumps({"choices": [{"index": 0, "finish_reason": "stop",
                                                "message": {"role": "assistant", "content": text}}]}).encode()
                with lock:
                    outer.in_flight -= 1
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture()
def finish_server():
    servers: list[FinishServer] = []

    def start(delay: float = 0.0) -> FinishServer:
        servers.append(FinishServer(delay))
        return servers[-1]

    yield start
    for s in servers:
        s.close()


def test_generation_settings_map_to_each_policy_kind() -> None:
    gen = GenerationSettings(temperature=0.2, top_p=0.9, max_tokens=64)
    assert gen.options_for("hf") == {"temperature": 0.2, "top_p": 0.9, "max_new_tokens": 64}
    assert gen.options_for("openai") == {"temperature": 0.2, "top_p": 0.9, "max_tokens": 64}
    assert gen.options_for("oracle") == {} and GenerationSettings(top_p=0.5).options_for("openai") == {"top_p": 0.5}
    for bad in ({"temperature": -1.0}, {"top_p": 0.0}, {"top_p": 1.5}, {"max_tokens": 0}):
        with pytest.raises(ValueError):
            GenerationSettings(**bad)  # type: ignore[arg-type]
    pol = build_arm_policy("openai:http://127.0.0.1:9/v1#m", generation=gen)
    assert isinstance(pol, OpenAIPolicy) and (pol.temperature, pol.top_p, pol.max_tokens) == (0.2, 0.9, 64)
    assert build_arm_policy("null", generation=gen).name == "null"


def test_api_key_comes_from_the_named_variable_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TGS_KEY_X", raising=False)
    with pytest.raises(ValueError, match="'TGS_KEY_X'.*not set.*export TGS_KEY_X"):
        build_arm_policy("openai:http://127.0.0.1:9/v1#m", endpoint=EndpointSettings(api_key_env="TGS_KEY_X"))
    monkeypatch.setenv("TGS_KEY_X", SECRET)
    pol = build_arm_policy("openai:http://127.0.0.1:9/v1#m", endpoint=EndpointSettings(api_key_env="TGS_KEY_X"))
    assert pol.api_key == SECRET and SECRET not in pol.spec and SECRET not in pol.name  # type: ignore[attr-defined]


@pytest.mark.parametrize("limit", [None, 1])
def test_max_concurrency_caps_requests_in_flight(finish_server, limit: int | None) -> None:
    srv = finish_server(delay=0.15)
    pol = OpenAIPolicy(srv.url, "m", max_concurrency=limit, sleep=lambda s: None)
    msgs = [Message(role="system", content="s"), Message(role="user", content="u")]
    threads = [threading.Thread(target=pol.act, args=(msgs,), kwargs={"tools": [], "rng": random.Random(i)})
               for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(srv.bodies) == 3
    assert srv.max_in_flight == (1 if limit == 1 else 3)
    with pytest.raises(ValueError, match="max_concurrency"):
        OpenAIPolicy(srv.url, "m", max_concurrency=0)


def test_instance_globs_and_unknown_patterns() -> None:
    class Inst:
        def __init__(self, iid: str) -> None:
            self.instance_id = iid

    ids = ["a__x-1", "a__x-2", "b__y-1"]
    insts = [Inst(i) for i in ids]
    assert [i.instance_id for i in select_instances(insts, ["a__x-*"], ids, "T")] == ["a__x-1", "a__x-2"]
    assert [i.instance_id for i in select_instances(insts, ["b__y-1", "a__x-2"], ids, "T")] == ["a__x-2", "b__y-1"]
    with pytest.raises(CLIError, match=r"\['c\*'\] matches no instance in T"):
        select_instances(insts, ["a*", "c*"], ids, "T")


@pytest.fixture(scope="module")
def mini(tmp_path_factory: pytest.TempPathFactory) -> TaskSet:
    from harness.minirepos import make_mini
    from harness.tasks import load_task_set

    out = tmp_path_factory.mktemp("mini") / "tasks"
    make_mini(out, split="heldout", repos=2, tasks_per_repo=2, seed=1)
    return load_task_set(out)


def _eval(args: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "tgsuite.cli", "eval", "--sandbox", "local", "--no-progress", *args]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, **(env or {})})


def test_cli_endpoint_arm_settings_key_and_aggregate(mini: TaskSet, finish_server, tmp_path: Path) -> None:
    srv = finish_server(delay=0.2)
    repo = mini.instances[0].instance_id.rsplit("-", 1)[0]
    out = tmp_path / "run"
    proc = _eval(["--tasks", mini.path, "--out", str(out), "--policy", f"ep=openai:{srv.url}#tiny",
                  "--policy", "oracle", "--instance", f"{repo}-*", "--limit", "2", "--workers", "2",
                  "--temperature", "0.3", "--top-p", "0.9", "--max-tokens", "77", "--api-key-env", "TGS_TEST_KEY",
                  "--max-concurrency", "1"], env={"TGS_TEST_KEY": SECRET, "OPENAI_API_KEY": ""})
    assert proc.returncode == 0, proc.stderr[-2000:]
    turns = [b for b in srv.bodies if b["max_tokens"] != 1]  # the first request is the preflight
    assert srv.bodies[0]["max_tokens"] == 1 and srv.bodies[0]["tools"] and len(turns) == 2
    assert srv.max_in_flight == 1 and srv.auth == [f"Bearer {SECRET}"] * 3
    assert {(b["temperature"], b["top_p"], b["max_tokens"]) for b in turns} == {(0.3, 0.9, 77)}
    for f in out.rglob("*"):
        if f.is_file():
            assert SECRET not in f.read_text(errors="replace"), f"the API key was written to {f}"
    agg = json.loads((out / "aggregate.json").read_text())
    cfg = agg["config"]
    assert agg["decision"] == "none" and (cfg["generation.ep.temperature"], cfg["generation.ep.top_p"],
                                          cfg["generation.ep.max_tokens"]) == (0.3, 0.9, 77)
    assert cfg["generation.ep.model"] == "tiny" and not any(k.startswith("generation.oracle") for k in cfg)
    assert cfg["endpoint.api_key_env"] == "TGS_TEST_KEY" and cfg["request.ep.max_concurrency"] == 1
    manifest = json.loads((out / "manifest.json").read_text())
    assert {a["name"]: a["generation"].get("temperature") for a in manifest["arms"]} == {"ep": 0.3, "oracle": None}
    again = _eval(["--tasks", mini.path, "--out", str(out), "--policy", f"ep=openai:{srv.url}#tiny",
                   "--policy", "oracle", "--instance", f"{repo}-*", "--limit", "2", "--temperature", "0.7",
                   "--top-p", "0.9", "--max-tokens", "77", "--api-key-env", "TGS_TEST_KEY"],
                  env={"TGS_TEST_KEY": SECRET})
    assert again.returncode == 2 and "temperature 0.3 -> 0.7" in again.stderr and "fix:" in again.stderr
    assert json.loads((out / "aggregate.json").read_text())["config"]["generation.ep.temperature"] == 0.3
    arms = {a["arm"]: a for a in agg["arms"]}
    assert set(arms) == {"ep", "oracle"} and arms["ep"]["n_scored"] == 2 and arms["ep"]["statuses"] == {"empty_patch": 2}
    code = {r["endpoint"]: r for r in arms["oracle"]["rates"]}["code_ok"]
    assert code["rate"] == 1.0 and code["n"] == 2 and 0.0 < code["ci_low"] < 1.0 and code["ci_high"] == 1.0
    assert arms["oracle"]["joint_table"]["neither"] + arms["oracle"]["joint_table"]["code_only"] + \
        arms["oracle"]["joint_table"]["both"] == 2
    assert list(arms["oracle"]["per_repo"]) == [mini.instances[0].repo]
    missing = _eval(["--tasks", mini.path, "--out", str(tmp_path / "r2"), "--policy", f"openai:{srv.url}#m",
                     "--api-key-env", "TGS_UNSET_VAR"], env={"TGS_UNSET_VAR": ""})
    assert missing.returncode == 2 and "TGS_UNSET_VAR" in missing.stderr and "fix:" in missing.stderr
    stray = _eval(["--tasks", mini.path, "--out", str(tmp_path / "r3"), "--policy", "null", "--max-concurrency", "2"])
    assert stray.returncode == 2 and "openai: arms" in stray.stderr
    bad_limit = _eval(["--tasks", mini.path, "--out", str(tmp_path / "r4"), "--policy", "null", "--limit", "0"])
    assert bad_limit.returncode == 2 and "--limit 0" in bad_limit.stderr


def test_the_expert_arm_is_built_by_the_runner_with_the_runs_sandboxes(mini: TaskSet) -> None:
    """The CLI hands the runner the expert's spec (not a policy object), so the runner builds it with its factory's
    scratch sandboxes: under --sandbox docker the expert's screening runs in containers, never on the host."""
    import argparse

    from tgsuite.commands.eval import build_arms

    args = argparse.Namespace(temperature=None, top_p=None, max_tokens=None, max_concurrency=None, api_key_env=None,
                              request_timeout=None, max_retries=None)
    policies, _ = build_arms(args, {"expert": "expert", "oracle": "oracle"}, mini)
    assert policies["expert"] == "expert"
    assert not isinstance(policies["oracle"], str)


def test_cli_preflight_fails_at_once_and_a_hung_endpoint_is_cut_at_wall_s(mini: TaskSet, tmp_path: Path) -> None:
    """A 404 stops `tgsuite eval` after one request, before any sandbox or run directory; an endpoint that answers
    the preflight and then hangs ends each episode at --wall-s (the request timeout is far above it)."""
    from tests.openai_fakes import HANG, StrictServer, completion

    bad = StrictServer(lambda body: (404, {"error": {"message": "model 'nope' does not exist"}}, 0.0))
    hung = StrictServer(lambda body: (200, completion("OK"), 0.0 if body["max_tokens"] == 1 else HANG))
    try:
        t0 = time.monotonic()
        out = tmp_path / "r404"
        proc = _eval(["--tasks", mini.path, "--out", str(out), "--policy", f"openai:{bad.url}#nope", "--limit", "1"])
        assert proc.returncode == 2 and len(bad.bodies) == 1 and not out.exists()
        assert f"{bad.url}/chat/completions: HTTP 404" in proc.stderr and "fix: check the base URL" in proc.stderr
        assert time.monotonic() - t0 < 30
        out = tmp_path / "hung"
        t0 = time.monotonic()
        proc = _eval(["--tasks", mini.path, "--out", str(out), "--policy", f"h=openai:{hung.url}#m", "--limit", "1",
                      "--wall-s", "3", "--request-timeout", "300", "--max-retries", "0"])
        took = time.monotonic() - t0
        assert proc.returncode == 0, proc.stderr[-2000:]
        episode = next(out.glob("episodes/*/h/s0/a0"))
        assert json.loads((episode / "result.json").read_text())["failure_class"] != "infra"
        traj = json.loads((episode / "trajectory.jsonl").read_text().splitlines()[0])
        assert traj["limit_hit"]["kind"] == "wall_time" and traj["limit_hit"]["limit"] == 3.0
        assert took < 120 and "not below --wall-s" in proc.stderr
    finally:
        bad.close()
        hung.close()


def test_show_prompt_prints_what_a_model_arm_gets_without_other_arguments() -> None:
    from harness.agent import NUDGE_TEXT, system_prompt
    from harness.tools import tool_schemas

    proc = subprocess.run([sys.executable, "-m", "tgsuite.cli", "eval", "--show-prompt"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert system_prompt() in proc.stdout and NUDGE_TEXT in proc.stdout
    tools = proc.stdout.split("OpenAI function schemas)", 1)[1]
    tools = tools[tools.index("\n") + 1: tools.index("\n\n#")]
    assert json.loads(tools) == tool_schemas()
