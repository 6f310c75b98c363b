"""``openai:`` arms speak OpenAI's wire format (against a strict OpenAI-style server on loopback), stop at the
episode's wall-clock limit while a request hangs, and fail a preflight at once on 401/404."""

from __future__ import annotations

import json
import random
import time
from pathlib import Path
from typing import Any

import pytest

from harness.agent import run_episode
from harness.interfaces import EpisodeLimits, PolicyDeadline
from harness.policies.openai import ModelEndpointError, OpenAIPolicy
from harness.policies.openai_messages import json_text, to_openai_messages
from harness.schema import Message
from harness.tools import format_tool_call, tool_schemas
from tests.harness_fakes import DirSandbox, make_calc_task
from tests.openai_fakes import HANG, StrictServer, call, check_openai_messages, completion

FIX = {"path": "calc.py", "old": "    return a - b\n\n\ndef sub", "new": "    return a + b\n\n\ndef sub"}


@pytest.fixture()
def strict():
    servers: list[StrictServer] = []

    def start(respond):
        servers.append(StrictServer(respond))
        return servers[-1]

    yield start
    for s in servers:
        s.close()


def _scripted(answers: list[dict[str, Any]]):
    """Answer the n-th chat request (preflights with max_tokens 1 get a plain 'OK') with answers[n]."""
    turn = iter(answers)

    def respond(body: dict[str, Any]) -> tuple[int, Any, float]:
        if body.get("max_tokens") == 1:
            return 200, completion("OK"), 0.0
        return 200, next(turn), 0.0
    return respond


def _policy(url: str, **kw: Any) -> OpenAIPolicy:
    kw.setdefault("sleep", lambda s: None)
    return OpenAIPolicy(url, "strict-model", api_key="sk-test", **kw)


def test_a_strict_server_accepts_every_turn_of_an_episode(strict, tmp_path: Path) -> None:
    inst, repo = make_calc_task(tmp_path)
    srv = strict(_scripted([
        completion("<think>look</think>Looking.", [call("list_files", {}, "a"), call("read_file", {"path": "calc.py"}, "b")]),
        completion(None, [call("search", '{"pattern": ', "c")]),  # malformed arguments: answered with an error
        completion("I will now edit."),  # no call: the harness nudges
        completion(None, [call("edit_file", FIX, "d")]),
        completion("Done.", [call("finish", {"message": "Fixed `add()`."}, "e")]),
    ]))
    pol = _policy(srv.url)
    pol.preflight(tool_schemas())
    with DirSandbox(repo) as sbx:
        traj = run_episode(inst, pol, sbx, EpisodeLimits(), seed=0)
    assert srv.rejected == [] and traj.finished and traj.final_message == "Fixed `add()`."
    assert len(srv.bodies) == 6  # the preflight and five turns, none refused
    last = srv.bodies[-1]["messages"]
    first = last[2]
    assert first["role"] == "assistant" and first["content"] == "Looking."
    assert [c["id"] for c in first["tool_calls"]] == ["call_0_0", "call_0_1"]
    assert [(m["role"], m.get("tool_call_id")) for m in last[3:5]] == [("tool", "call_0_0"), ("tool", "call_0_1")]
    bad = last[5]["tool_calls"][0]
    assert bad["function"]["name"] == "search"  # not JSON: sent as a JSON string holding the text as written
    assert json.loads(bad["function"]["arguments"]) == '{"name": "search", "arguments": {"pattern": }'
    assert last[6]["role"] == "tool" and last[6]["tool_call_id"] == "call_1_0" and "invalid" in last[6]["content"].lower()
    assert last[7] == {"role": "assistant", "content": "I will now edit."} and last[8]["role"] == "user"
    assert not any("<tool_call>" in (m.get("content") or "") for m in last if m["role"] == "assistant")


def test_the_checker_refuses_the_old_text_form_and_unmatched_ids() -> None:
    """The strict server's checks fail on what tgsuite used to send (Qwen markup, ids that match no call)."""
    msgs = [Message(role="system", content="s"), Message(role="user", content="u"),
            Message(role="assistant", content=format_tool_call("list_files", {}), turn=0),
            Message(role="tool", content="calc.py", turn=0)]
    old = [{"role": m.role, "content": m.content} for m in msgs[:3]] + \
        [{"role": "tool", "content": "calc.py", "tool_call_id": "call_0"}]
    assert "<tool_call>" in (check_openai_messages(old) or "")
    unmatched = to_openai_messages(msgs)
    unmatched[3] = {**unmatched[3], "tool_call_id": "call_9_9"}
    assert "does not answer" in (check_openai_messages(unmatched) or "")
    unanswered = to_openai_messages(msgs)[:3] + [{"role": "user", "content": "next"}]
    assert "must be followed by tool messages" in (check_openai_messages(unanswered) or "")
    assert check_openai_messages(to_openai_messages(msgs)) is None
    text_form = to_openai_messages(msgs, "user")
    assert text_form[2]["content"] == msgs[2].content and text_form[3]["role"] == "user"


def test_a_malformed_call_goes_back_as_arguments_vllm_can_parse(strict, tmp_path: Path) -> None:
    """vLLM's hermes parser leaves a call with broken JSON in ``content``; the harness answers it as a malformed
    call, and the next request must not be refused (vLLM json.loads every past call's arguments: a 400 there was
    an INFRA failure hiding the model's own mistake). The text goes back verbatim, as a JSON string."""
    inst, repo = make_calc_task(tmp_path)
    broken = '{"name": "search", "arguments": {"pattern": "a"b"}}'
    srv = strict(_scripted([completion(f"<tool_call>\n{broken}\n</tool_call>"),
                            completion("Done.", [call("finish", {"message": "No change."}, "e")])]))
    with DirSandbox(repo) as sbx:
        traj = run_episode(inst, _policy(srv.url), sbx, EpisodeLimits(), seed=0)
    assert srv.rejected == [] and traj.finished and traj.protocol_violations == 1
    sent = srv.bodies[-1]["messages"][2]["tool_calls"][0]["function"]
    assert sent["name"] == "search" and json.loads(sent["arguments"]) == broken
    assert json_text('{"a": 1}') == '{"a": 1}' and json.loads(json_text("")) == ""


def test_calls_after_finish_are_not_sent_unanswered() -> None:
    two = format_tool_call("finish", {"message": "x"}) + "\n" + format_tool_call("list_files", {})
    msgs = [Message(role="user", content="u"), Message(role="assistant", content=two, turn=0),
            Message(role="tool", content="ok", turn=0)]
    out = to_openai_messages(msgs)
    assert [c["function"]["name"] for c in out[1]["tool_calls"]] == ["finish"]
    assert check_openai_messages(out) is None


def test_a_hung_endpoint_is_cut_at_the_wall_limit(strict, tmp_path: Path) -> None:
    inst, repo = make_calc_task(tmp_path)
    srv = strict(lambda body: (200, completion("late"), HANG))
    pol = _policy(srv.url, timeout_s=120.0)
    t0 = time.monotonic()
    with DirSandbox(repo) as sbx:
        traj = run_episode(inst, pol, sbx, EpisodeLimits(wall_s=1.5), seed=0)
    took = time.monotonic() - t0
    assert 1.4 <= took < 4.0, took
    assert traj.limit_hit is not None and traj.limit_hit.kind == "wall_time" and not traj.finished
    assert [m.role for m in traj.messages] == ["system", "user"] and len(srv.bodies) == 1
    assert traj.timings["policy_s"] >= 1.4  # the time spent waiting is the policy's
    with pytest.raises(PolicyDeadline):
        pol.act([Message(role="user", content="u")], tools=[], rng=random.Random(0), time_left_s=0.3)


def test_a_request_timeout_below_the_wall_makes_a_hang_an_infra_failure(strict, tmp_path: Path) -> None:
    inst, repo = make_calc_task(tmp_path)
    srv = strict(lambda body: (200, completion("late"), HANG))
    t0 = time.monotonic()
    with DirSandbox(repo) as sbx, pytest.raises(ModelEndpointError, match="2 attempts") as info:
        run_episode(inst, _policy(srv.url, timeout_s=0.3, max_retries=1), sbx, EpisodeLimits(wall_s=30), seed=0)
    assert time.monotonic() - t0 < 3.0 and info.value.kind == "MODEL_ENDPOINT"
    # the wall also ends retries: an endpoint that already failed is infrastructure, not the agent's time
    with pytest.raises(ModelEndpointError, match="wall-clock limit ended the retries"):
        _policy(srv.url, timeout_s=0.3, max_retries=50).act([Message(role="user", content="u")], tools=[],
                                                            rng=random.Random(0), time_left_s=1.0)


@pytest.mark.parametrize(("status", "fix"), [(401, "API key"), (404, "base URL")])
def test_preflight_fails_at_once_naming_the_endpoint(strict, status: int, fix: str) -> None:
    srv = strict(lambda body: (status, {"error": {"message": "nope"}}, 0.0))
    t0 = time.monotonic()
    with pytest.raises(ModelEndpointError) as info:
        _policy(srv.url, max_retries=4).preflight(tool_schemas())
    assert len(srv.bodies) == 1 and time.monotonic() - t0 < 1.0
    assert srv.url in str(info.value) and f"HTTP {status}" in str(info.value) and fix in str(info.value)
    assert info.value.status == status


def test_generation_settings_are_what_is_sent(strict) -> None:
    srv = strict(_scripted([completion("hi")]))
    pol = _policy(srv.url, temperature=0.4, top_p=0.8, max_tokens=99)
    pol.act([Message(role="user", content="u")], tools=[], rng=random.Random(0))
    sent, rec = srv.bodies[0], pol.generation_settings()
    assert (sent["temperature"], sent["top_p"], sent["max_tokens"]) == (rec["temperature"], rec["top_p"],
                                                                         rec["max_tokens"]) == (0.4, 0.8, 99)
    assert rec["model"] == "strict-model" and rec["endpoint"] == srv.url + "/chat/completions"
    assert "sk-test" not in repr(rec) and pol.request_settings()["request_timeout_s"] == 120.0


@pytest.mark.parametrize("message", [
    "This model's maximum context length is 32768 tokens. However, your request has 40000 input tokens.",
    "The decoder prompt (length 40000) is longer than the maximum model length of 32768. Make sure that "
    "`max_model_len` is no smaller than the number of text tokens.",  # vLLM's engine, answered as a 400
])
def test_a_full_context_is_the_agents_limit_not_infra(strict, message: str) -> None:
    srv = strict(lambda body: (400, {"error": {"message": message, "type": "BadRequestError"}}, 0.0))
    out = _policy(srv.url).act([Message(role="user", content="u")], tools=[], rng=random.Random(0))
    assert out.finish_reason == "context" and len(srv.bodies) == 1


def test_another_400_is_infra_and_its_fix_does_not_blame_the_url_or_key(strict) -> None:
    auto = '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'
    srv = strict(lambda body: (400, {"error": {"message": auto, "type": "BadRequestError"}}, 0.0))
    with pytest.raises(ModelEndpointError) as info:
        _policy(srv.url).preflight(tool_schemas())
    assert len(srv.bodies) == 1 and "tool choice requires" in str(info.value) and "API key" not in str(info.value)
    assert "refused the request as invalid" in str(info.value)
