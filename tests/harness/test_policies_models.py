"""Model policies: HFPolicy (tiny random Qwen3 + a tokenizer trained here), OpenAIPolicy (against a fake
chat-completions server on loopback), sampling math, and ``make_policy`` spec parsing. Everything offline."""

from __future__ import annotations

import json
import math
import random
import socket
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

from harness.agent import run_episode
from harness.interfaces import EpisodeLimits
from harness.policies import make_policy, parse_policy_spec
from harness.policies.hf import HFPolicy, sample_token
from harness.policies.openai import ModelEndpointError, OpenAIPolicy, render_tool_call, response_text
from harness.sandbox import SandboxUnavailable
from harness.schema import Message, TaskSet
from harness.tools import format_tool_call, parse_tool_calls, tool_schemas
from tests.harness_fakes import DirSandbox, make_calc_task

CHATML = (
    "{% if tools %}{{ '<|im_start|>system\\n' }}{% if messages[0].role == 'system' %}"
    "{{ messages[0].content + '\\n\\n' }}{% endif %}{{ '# Tools\\n<tools>' }}"
    "{% for t in tools %}{{ '\\n' + (t | tojson) }}{% endfor %}{{ '\\n</tools><|im_end|>\\n' }}"
    "{% elif messages[0].role == 'system' %}{{ '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}"
    "{% endif %}{% for m in messages %}{% if m.role == 'tool' %}"
    "{{ '<|im_start|>user\\n<tool_response>\\n' + m.content + '\\n</tool_response><|im_end|>\\n' }}"
    "{% elif not (loop.first and m.role == 'system') %}"
    "{{ '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
MSGS = [Message(role="system", content="You fix bugs."), Message(role="user", content="add() subtracts; fix it.")]


@pytest.fixture(scope="module")
def tiny() -> tuple[Qwen3ForCausalLM, PreTrainedTokenizerFast]:
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    special = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>", "<think>", "</think>"]
    corpus = ["def add(a, b):\n    return a + b\n", "Fix the bug in calc.py.", json.dumps(tool_schemas())] * 5
    bpe.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=3000, special_tokens=special,
                                                        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    tok.chat_template = CHATML
    cfg = Qwen3Config(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, head_dim=16, max_position_embeddings=2048)
    torch.manual_seed(0)
    return Qwen3ForCausalLM(cfg).eval(), tok


# --- HFPolicy ------------------------------------------------------------------------------------------------------


def test_hf_render_uses_chat_template_with_tools(tiny) -> None:
    model, tok = tiny
    pol = HFPolicy(model, tok)
    text = tok.decode(pol.render(MSGS, tool_schemas()))
    assert text.startswith("<|im_start|>system\nYou fix bugs.\n\n# Tools\n<tools>")
    assert '"name": "edit_file"' in text and text.endswith("<|im_start|>assistant\n")


def test_hf_act_ids_logprobs_match_a_full_forward(tiny) -> None:
    model, tok = tiny
    pol = HFPolicy(model, tok, max_new_tokens=24, temperature=0.7)
    out = pol.act(MSGS, tools=tool_schemas(), rng=random.Random(1))
    assert out.token_ids and out.logprobs and len(out.token_ids) == len(out.logprobs)
    assert out.finish_reason in ("stop", "length") and all(lp <= 0 for lp in out.logprobs)
    body = out.token_ids[:-1] if out.finish_reason == "stop" else out.token_ids
    assert out.text == tok.decode(body, skip_special_tokens=False)
    prompt = pol.render(MSGS, tool_schemas())
    with torch.no_grad():
        logits = model(torch.tensor([prompt + out.token_ids])).logits[0].float()
    ref = torch.log_softmax(logits[len(prompt) - 1 : -1] / 0.7, dim=-1)
    ref_lp = ref.gather(1, torch.tensor(out.token_ids)[:, None])[:, 0]
    assert torch.allclose(ref_lp, torch.tensor(out.logprobs), atol=1e-4)  # the KV-cached loop is exact


def test_hf_seeded_sampling_is_reproducible(tiny) -> None:
    model, tok = tiny
    pol = HFPolicy(model, tok, max_new_tokens=6)
    a = pol.act(MSGS, tools=[], rng=random.Random(3)).token_ids
    assert a == pol.act(MSGS, tools=[], rng=random.Random(3)).token_ids
    assert a != pol.act(MSGS, tools=[], rng=random.Random(4)).token_ids


def test_hf_stop_token_and_context_limit(tiny) -> None:
    model, tok = tiny
    assert tok.convert_tokens_to_ids("<|endoftext|>") == 0
    zeroed = Qwen3ForCausalLM(model.config).eval()
    with torch.no_grad():
        zeroed.lm_head.weight.zero_()  # uniform logits: greedy picks id 0 = <|endoftext|>, a stop id
    out = HFPolicy(zeroed, tok, temperature=0).act(MSGS, tools=[], rng=random.Random(0))
    assert out.finish_reason == "stop" and out.token_ids == [0] and out.text == ""
    assert out.logprobs == pytest.approx([-math.log(len(tok))], abs=1e-5)
    small = HFPolicy(model, tok, max_context=10)
    ctx = small.act(MSGS, tools=[], rng=random.Random(0))
    assert ctx.finish_reason == "context" and ctx.token_ids == []
    n_prompt = len(small.render(MSGS, []))
    near = HFPolicy(model, tok, max_context=n_prompt + 3, max_new_tokens=50, temperature=1.0)
    out3 = near.act(MSGS, tools=[], rng=random.Random(0))
    assert len(out3.token_ids) <= 3 and out3.finish_reason in ("stop", "context")


def test_hf_bad_config_refused(tiny) -> None:
    model, tok = tiny
    with pytest.raises(ValueError, match="top_p"):
        HFPolicy(model, tok, top_p=0.0)
    no_template = PreTrainedTokenizerFast(tokenizer_object=tok.backend_tokenizer, eos_token="<|im_end|>")
    with pytest.raises(ValueError, match="chat_template"):
        HFPolicy(model, no_template)


def test_sample_token_distribution_and_filters() -> None:
    logits = torch.tensor([2.0, 1.0, 0.5, 0.0, -1.0])
    n = 2_000
    for kw, support in (({"top_p": 0.8}, [0, 1, 2]), ({"top_k": 2}, [0, 1]), ({}, [0, 1, 2, 3, 4])):
        gen = torch.Generator().manual_seed(0)
        counts: Counter[int] = Counter()
        lps: dict[int, float] = {}
        for _ in range(n):
            t, lp = sample_token(logits, gen, temperature=1.5, **kw)
            counts[t] += 1
            lps[t] = lp
        p = torch.softmax(logits[support] / 1.5, dim=-1)
        assert set(counts) == set(support), (kw, counts)
        for i, tok_id in enumerate(support):
            se = math.sqrt(p[i] * (1 - p[i]) / n)
            assert abs(counts[tok_id] / n - float(p[i])) < 4 * se + 1e-9, (kw, tok_id)
            assert lps[tok_id] == pytest.approx(math.log(float(p[i])), abs=1e-5)
    gen = torch.Generator().manual_seed(0)
    assert sample_token(logits, gen, temperature=0) == (0, pytest.approx(float(torch.log_softmax(logits, 0)[0])))
    raw = sample_token(logits, gen, temperature=0.5, top_k=1, logprobs_mode="raw")
    assert raw == (0, pytest.approx(float(torch.log_softmax(logits, 0)[0])))


def test_hf_save_load_and_episode(tiny, tmp_path: Path) -> None:
    model, tok = tiny
    ckpt = tmp_path / "ckpt"
    model.save_pretrained(ckpt)
    tok.save_pretrained(ckpt)
    pol = make_policy(f"hf:{ckpt}", max_new_tokens=8, device="cpu")
    assert isinstance(pol, HFPolicy) and pol.name == pol.spec == f"hf:{ckpt}" and not pol.thread_safe
    with pytest.raises(FileNotFoundError, match="save_pretrained"):
        make_policy(f"hf:{tmp_path / 'nothing'}")
    inst, repo = make_calc_task(tmp_path)
    with DirSandbox(repo) as sbx:
        traj = run_episode(inst, pol, sbx, EpisodeLimits(max_turns=2), seed=0)
    turns = [m for m in traj.messages if m.role == "assistant"]
    assert len(turns) == 2 and traj.limit_hit is not None and traj.limit_hit.kind == "turns"
    assert all(m.token_ids and m.logprobs and len(m.token_ids) == len(m.logprobs) for m in turns)
    assert traj.n_tokens == sum(len(m.token_ids or []) for m in turns)


def test_hf_arm_records_its_checkpoint_hash_and_a_retrained_directory_is_not_resumed(tiny, tmp_path: Path) -> None:
    """HARNESS §6: other weights behind an arm (a directory trained again) refuse a resume."""
    from harness.runner import run_eval
    from tests.harness_fakes import FakeFactory

    model, tok = tiny
    ckpt = tmp_path / "ckpt"
    model.save_pretrained(ckpt)
    tok.save_pretrained(ckpt)
    inst, repo = make_calc_task(tmp_path)
    ts = TaskSet(name="one", path=str(tmp_path), sha256="f" * 64, instances=[inst])
    out, limits = tmp_path / "run", EpisodeLimits(max_turns=1)
    run_eval(ts, {"m": f"hf:{ckpt}"}, [0], out, sandbox_factory=FakeFactory({inst.instance_id: repo}), limits=limits)
    sha = json.loads((out / "manifest.json").read_text())["arms"][0]["checkpoint_sha256"]
    assert sha is not None and len(sha) == 64
    with torch.no_grad():
        next(model.parameters()).add_(1.0)
    model.save_pretrained(ckpt)  # trained again into the same directory
    with pytest.raises(ValueError, match="the weights changed"):
        run_eval(ts, {"m": f"hf:{ckpt}"}, [1], out, sandbox_factory=FakeFactory({inst.instance_id: repo}),
                 limits=limits)


# --- OpenAIPolicy against a fake server -----------------------------------------------------------------------------


class FakeServer:
    """A chat-completions server on 127.0.0.1 (ephemeral port) answering from a script of (status, body, delay)."""

    def __init__(self, script: list[tuple[int, Any, float]]) -> None:
        self.script = list(script)
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                n = int(self.headers["Content-Length"])
                outer.requests.append(json.loads(self.rfile.read(n)))
                outer.headers.append(dict(self.headers))
                status, body, delay = outer.script.pop(0) if len(outer.script) > 1 else outer.script[0]
                time.sleep(delay)
                if status == 0:  # drop the connection without an answer (client sees RemoteDisconnected)
                    self.close_connection = True
                    return
                data = (body if isinstance(body, str) else json.dumps(body)).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def ok(content: str | None, *, tool_calls: list | None = None, reasoning: str | None = None,
       logprobs: list[float] | None = None, token_ids: list[int] | None = None, finish: str = "stop") -> dict:
    msg: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls is not None:
        msg["tool_calls"] = tool_calls
    if reasoning is not None:
        msg["reasoning_content"] = reasoning
    choice: dict[str, Any] = {"index": 0, "message": msg, "finish_reason": finish}
    if logprobs is not None:
        toks = [f"token_id:{t}" for t in token_ids] if token_ids else ["x"] * len(logprobs)
        choice["logprobs"] = {"content": [{"token": t, "logprob": lp} for t, lp in zip(toks, logprobs, strict=True)]}
    return {"id": "c", "object": "chat.completion", "choices": [choice], "usage": {"completion_tokens": 3}}


@pytest.fixture()
def server():
    servers: list[FakeServer] = []

    def start(script):
        s = FakeServer(script)
        servers.append(s)
        return s

    yield start
    for s in servers:
        s.close()


def _policy(url: str, **kw: Any) -> OpenAIPolicy:
    kw.setdefault("sleep", lambda s: None)
    return OpenAIPolicy(url, "tiny-qwen3", api_key="sk-test", **kw)


def test_openai_request_and_response(server) -> None:
    srv = server([(200, ok("hello", logprobs=[-0.1, -0.2, -0.3], token_ids=[5, 6, 7]), 0.0)])
    pol = _policy(srv.url, return_token_ids=True, temperature=0.6)
    msgs = [*MSGS, Message(role="assistant", content=format_tool_call("list_files", {})),
            Message(role="tool", content="calc.py", turn=0)]
    out = pol.act(msgs, tools=tool_schemas(), rng=random.Random(9))
    assert out.text == "hello" and out.token_ids == [5, 6, 7] and out.logprobs == [-0.1, -0.2, -0.3]
    req = srv.requests[0]
    assert req["model"] == "tiny-qwen3" and req["temperature"] == 0.6 and req["logprobs"] is True
    assert req["seed"] == random.Random(9).getrandbits(31) and req["tools"] == tool_schemas()
    assert [m["role"] for m in req["messages"]] == ["system", "user", "assistant", "tool"]
    assert req["messages"][2]["tool_calls"][0]["id"] == req["messages"][3]["tool_call_id"] == "call_0_0"
    assert req["messages"][2]["content"] is None and req["return_token_ids"] is True
    assert srv.headers[0]["Authorization"] == "Bearer sk-test"
    user_mode = _policy(srv.url, tool_role="user")._messages(msgs)
    assert user_mode[-1] == {"role": "user", "content": "<tool_response>\ncalc.py\n</tool_response>"}


def test_openai_structured_tool_calls_become_qwen3_blocks(server) -> None:
    calls = [{"id": "1", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "calc.py"}'}},
             {"id": "2", "type": "function", "function": {"name": "search", "arguments": '{"pattern": '}}]
    srv = server([(200, ok(None, tool_calls=calls, reasoning="look first", finish="tool_calls"), 0.0)])
    out = _policy(srv.url).act(MSGS, tools=[], rng=random.Random(0))
    assert out.text.startswith("<think>\nlook first\n</think>") and out.finish_reason == "stop"
    parsed = parse_tool_calls(out.text)
    assert parsed[0].valid and parsed[0].arguments == {"path": "calc.py"}
    assert not parsed[1].valid and "invalid JSON" in (parsed[1].error or "")  # malformed stays malformed
    assert out.token_ids is None and out.logprobs is None
    assert render_tool_call("finish", {"message": "é"}) == format_tool_call("finish", {"message": "é"})
    assert response_text({"content": "plain"}) == "plain"


def test_openai_retries_then_succeeds(server) -> None:
    srv = server([(503, {"error": "busy"}, 0.0), (429, {"error": "slow down"}, 0.0), (200, "not json", 0.0),
                  (0, "", 0.0), (200, ok("done"), 0.0)])
    waits: list[float] = []
    pol = _policy(srv.url, backoff_s=0.5, max_retries=4, max_backoff_s=3.0, sleep=waits.append)
    assert pol.act(MSGS, tools=[], rng=random.Random(0)).text == "done"
    assert len(srv.requests) == 5 and waits == [0.5, 1.0, 2.0, 3.0]  # exponential, capped


def test_openai_gives_up_with_an_infra_error(server) -> None:
    srv = server([(500, {"error": "boom"}, 0.0)])
    with pytest.raises(ModelEndpointError) as info:
        _policy(srv.url, max_retries=2).act(MSGS, tools=[], rng=random.Random(0))
    assert isinstance(info.value, SandboxUnavailable) and info.value.kind == "MODEL_ENDPOINT"
    assert info.value.attempts == 3 and len(srv.requests) == 3 and "HTTP 500" in str(info.value)


def test_openai_timeout_and_refused_connection(server) -> None:
    srv = server([(200, ok("late"), 1.0)])
    t0 = time.perf_counter()
    with pytest.raises(ModelEndpointError, match="2 attempts"):
        _policy(srv.url, timeout_s=0.2, max_retries=1).act(MSGS, tools=[], rng=random.Random(0))
    assert time.perf_counter() - t0 < 1.5
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again when the block ends: nobody listens there
    with pytest.raises(ModelEndpointError, match="is the server up"):
        _policy(f"http://127.0.0.1:{port}/v1", max_retries=1).act(MSGS, tools=[], rng=random.Random(0))


def test_openai_non_retryable_and_context_errors(server) -> None:
    srv = server([(401, {"error": "bad key"}, 0.0)])
    with pytest.raises(ModelEndpointError, match="HTTP 401") as info:
        _policy(srv.url).act(MSGS, tools=[], rng=random.Random(0))
    assert info.value.status == 401 and len(srv.requests) == 1
    srv2 = server([(400, {"error": {"message": "This model's maximum context length is 4096 tokens"}}, 0.0)])
    out = _policy(srv2.url).act(MSGS, tools=[], rng=random.Random(0))
    assert out.finish_reason == "context" and out.text == ""


def test_openai_policy_runs_an_episode(server, tmp_path: Path) -> None:
    inst, repo = make_calc_task(tmp_path)
    fix = {"path": "calc.py", "old": "    return a - b\n\n\ndef sub", "new": "    return a + b\n\n\ndef sub"}
    calls = [{"id": "1", "type": "function", "function": {"name": "edit_file", "arguments": json.dumps(fix)}}]
    srv = server([(200, ok("Fixing.", tool_calls=calls, logprobs=[-0.5, -0.5], token_ids=[1, 2]), 0.0),
                  (200, ok(format_tool_call("finish", {"message": "Fixed `add()`."})), 0.0)])
    with DirSandbox(repo) as sbx:
        traj = run_episode(inst, _policy(srv.url, return_token_ids=True), sbx, EpisodeLimits(), seed=0)
        assert (sbx.root / "calc.py").read_text().startswith("def add(a, b):\n    return a + b")
    assert traj.finished and traj.final_message == "Fixed `add()`." and traj.protocol_violations == 0
    assert traj.messages[2].token_ids == [1, 2] and traj.messages[2].logprobs == [-0.5, -0.5]
    assert srv.requests[1]["messages"][-1]["role"] == "tool"  # the observation went back to the model


# --- make_policy ------------------------------------------------------------------------------------------------------


def test_policy_specs() -> None:
    assert parse_policy_spec("openai:http://127.0.0.1:8000/v1#Qwen/Qwen3-8B") == (
        "openai", {"base_url": "http://127.0.0.1:8000/v1", "model": "Qwen/Qwen3-8B"})
    assert parse_policy_spec("hf:runs/x/step_3") == ("hf", {"path": "runs/x/step_3"})
    assert parse_policy_spec("oracle") == ("oracle", {})
    for bad in ("gpt", "hf:", "openai:http://x/v1", "openai:#m"):
        with pytest.raises(ValueError, match="use one of"):
            parse_policy_spec(bad)
    pol = make_policy("openai:http://127.0.0.1:9/v1#m", temperature=0.2)
    assert isinstance(pol, OpenAIPolicy) and pol.name == pol.spec == "openai:http://127.0.0.1:9/v1#m"
    assert pol.temperature == 0.2 and pol.thread_safe
    with pytest.raises(ValueError, match="http://"):
        OpenAIPolicy("127.0.0.1:8000/v1", "m")
    # scripted policies come from harness.policies.scripted, options passed through
    assert make_policy("null").name == "null"
    expert = make_policy("expert", think=True)
    assert expert.name == "expert" and expert.think is True  # type: ignore[attr-defined]


def test_hf_render_with_the_real_qwen3_template(tiny) -> None:
    """Our messages through Qwen3's own chat template (TRL's copy): tools in the system turn, assistant
    ``<tool_call>`` markup verbatim and exactly once, tool results as ``<tool_response>`` user turns."""
    trl = pytest.importorskip("trl")
    template = Path(trl.__file__).parent / "chat_templates" / "qwen3.jinja"
    if not template.is_file():
        pytest.skip(f"{template} not shipped by this trl version")
    model, tok = tiny
    qtok = PreTrainedTokenizerFast(tokenizer_object=tok.backend_tokenizer, eos_token="<|im_end|>")
    qtok.chat_template = template.read_text()
    call = format_tool_call("read_file", {"path": "calc.py"})
    msgs = [*MSGS, Message(role="assistant", content="<think>\nlook\n</think>\n\n" + call),
            Message(role="tool", content="def add(a, b): ...", turn=0),
            Message(role="user", content="Reminder: use Markdown.", is_hint=True, turn=1)]
    text = qtok.decode(HFPolicy(model, qtok).render(msgs, tool_schemas()))
    assert text.startswith("<|im_start|>system\nYou fix bugs.\n\n# Tools\n")
    assert text.count('{"name": "read_file", "arguments": {"path": "calc.py"}}') == 1
    assert "<|im_start|>user\n<tool_response>\ndef add(a, b): ...\n</tool_response><|im_end|>\n" in text
    assert text.endswith("<|im_start|>user\nReminder: use Markdown.<|im_end|>\n<|im_start|>assistant\n")


def test_hf_policy_generates_through_the_engine_protocol(tiny) -> None:
    """``HFPolicy`` samples through a ``RolloutEngine`` (``HFChatEngine``): the policy's output is the engine's
    ``TokenResult`` for the request it built, with the engine's version stamp as ``policy_version``; a budget cut
    short by ``max_context`` is reported as ``context``."""
    from harness.policies.engine_protocol import RolloutEngine, TokenRequest
    from harness.policies.hf_engine import HFChatEngine

    model, tok = tiny
    pol = HFPolicy(model, tok, max_new_tokens=5, temperature=0.8, version=3)
    assert isinstance(pol.engine, HFChatEngine) and isinstance(pol.engine, RolloutEngine)
    out = pol.act(MSGS, tools=[], rng=random.Random(2))
    assert out.policy_version == 3
    pol.engine.set_version(9)
    again = pol.act(MSGS, tools=[], rng=random.Random(2))
    assert again.policy_version == 9 and again.token_ids == out.token_ids and again.logprobs == out.logprobs
    req = TokenRequest(pol.render(MSGS, []), 5, stop_ids=tuple(sorted(pol.stop_ids)), temperature=0.8)
    gen = torch.Generator().manual_seed(random.Random(2).getrandbits(63))
    res = pol.engine.generate([req], generator=gen)[0]
    assert (res.ids, res.logprobs, res.version) == (out.token_ids, out.logprobs, 9)
    assert res.finish_reason == out.finish_reason and (res.finish_reason == "stop") == (res.ids[-1] in pol.stop_ids)
    n_prompt = len(req.prompt_ids)
    near = HFPolicy(model, tok, max_context=n_prompt + 2, max_new_tokens=50, temperature=1.0)
    near.stop_ids = {-1}  # nothing stops: the 2-token budget is spent, which is the context window's limit
    cut = near.act(MSGS, tools=[], rng=random.Random(0))
    assert cut.finish_reason == "context" and len(cut.token_ids) == 2 and cut.policy_version == 0


def test_hf_episode_records_finish_reason_and_version(tiny, tmp_path: Path) -> None:
    model, tok = tiny
    pol = HFPolicy(model, tok, max_new_tokens=4, version=5)
    inst, repo = make_calc_task(tmp_path)
    with DirSandbox(repo) as sbx:
        traj = run_episode(inst, pol, sbx, EpisodeLimits(max_turns=2), seed=0)
    turns = [m for m in traj.messages if m.role == "assistant"]
    assert len(turns) == 2 and all(m.policy_version == 5 for m in turns)
    assert all(m.finish_reason == ("stop" if m.token_ids[-1] in pol.stop_ids else "length") for m in turns)
