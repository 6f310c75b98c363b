"""repro.sft: assistant-only loss, training reduces it, config validation, and a tiny end-to-end run."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from pydantic import ValidationError

from repro.models import build_model
from repro.sft import SFTConfig, sft_loss, sft_train
from repro.tokenizer import ChatEncoder, train_tokenizer

pytestmark = pytest.mark.usefixtures("one_torch_thread")

CONVS = [
    [{"role": "user", "content": f"Fix bug {i} in mod{i}.py"},
     {"role": "assistant", "content": f'<tool_call>\n{{"name": "read_file", "arguments": {{"path": "mod{i}.py"}}}}'
                                      "\n</tool_call>"},
     {"role": "tool", "content": f"def f{i}(x):\n    return x - {i}\n"},
     {"role": "assistant", "content": f"Fixed f{i} in mod{i}.py."}]
    for i in range(4)
]


def _data():
    tok = train_tokenizer([json.dumps(c) for c in CONVS] * 10, vocab_size=320, min_frequency=1)
    enc = ChatEncoder(tok)
    return tok, [(e.ids, e.act) for e in (enc.encode(c) for c in CONVS)]


def test_loss_counts_assistant_tokens_only() -> None:
    tok, ex = _data()
    model = build_model("nano", len(tok), seed=0)
    ids, act = ex[0]
    nll, n = sft_loss(model, ids, act)
    logits = model(input_ids=torch.tensor([ids])).logits[0]
    logp = F.log_softmax(logits[:-1].float(), -1).gather(1, torch.tensor(ids[1:])[:, None]).squeeze(1)
    m = torch.tensor(act[1:], dtype=torch.bool)
    assert n == int(m.sum()) and 0 < n < len(ids) - 1
    torch.testing.assert_close(nll, -logp[m].sum(), rtol=1e-5, atol=1e-4)
    all_nll, n_all = sft_loss(model, ids, [1] * len(ids))
    torch.testing.assert_close(all_nll / n_all, model(input_ids=torch.tensor([ids]), labels=torch.tensor([ids])).loss,
                               rtol=1e-5, atol=1e-5)
    assert sft_loss(model, ids, [0] * len(ids))[1] == 0


def test_context_losses_split_every_next_token_by_the_assistant_mask() -> None:
    from repro.sft import sft_losses

    tok, ex = _data()
    model = build_model("nano", len(tok), seed=0)
    ids, act = ex[1]
    a, n_a, c, n_c = sft_losses(model, ids, act, context=True)
    logits = model(input_ids=torch.tensor([ids])).logits[0]
    logp = F.log_softmax(logits[:-1].float(), -1).gather(1, torch.tensor(ids[1:])[:, None]).squeeze(1)
    m = torch.tensor(act[1:], dtype=torch.bool)
    assert (n_a, n_c) == (int(m.sum()), int((~m).sum())) and n_a > 0 and n_c > n_a
    torch.testing.assert_close(a, -logp[m].sum(), rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(c, -logp[~m].sum(), rtol=1e-5, atol=1e-4)
    a0, n0, c0, nc0 = sft_losses(model, ids, act)  # default: assistant tokens only, context part empty
    torch.testing.assert_close(a0, a)
    assert (n0, float(c0), nc0) == (n_a, 0.0, 0)


def test_context_weight_trains_the_observations_too(tmp_path: Path) -> None:
    """With context_weight = 0 the non-assistant tokens get no gradient; with 1 their loss falls as well."""
    from repro.sft import sft_losses

    tok, ex = _data()

    def ctx_mean(model) -> float:
        return sum(float(sft_losses(model, i, a, context=True)[2]) for i, a in ex) / sum(
            sft_losses(model, i, a, context=True)[3] for i, a in ex)

    res = {}
    for w in (0.0, 1.0):
        model = build_model("nano", len(tok), seed=1)
        before = ctx_mean(model)
        cfg = SFTConfig(train_tasks="unused", epochs=10, batch_tokens=64, lr=5e-3, warmup_steps=2, context_weight=w)
        sft_train(model, ex, cfg, tmp_path / f"m{w}.jsonl")
        res[w] = ctx_mean(model) / before
        logged = [json.loads(x)["loss/context"] for x in (tmp_path / f"m{w}.jsonl").read_text().splitlines()]
        assert all(x is None for x in logged) if w == 0 else all(x > 0 for x in logged)
    assert res[1.0] < 0.5 and res[1.0] < res[0.0] - 0.2, res


def test_training_reduces_the_loss_and_logs_steps(tmp_path: Path) -> None:
    tok, ex = _data()
    model = build_model("nano", len(tok), seed=1)
    before = sum(float(sft_loss(model, i, a)[0]) for i, a in ex) / sum(sum(a) for _, a in ex)
    cfg = SFTConfig(train_tasks="unused", epochs=15, batch_tokens=64, lr=5e-3, warmup_steps=2, seed=0)
    stats = sft_train(model, ex, cfg, tmp_path / "metrics.jsonl")
    after = sum(float(sft_loss(model, i, a)[0]) for i, a in ex) / sum(sum(a) for _, a in ex)
    lines = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert len(lines) == stats["steps"] > 10 and all(math.isfinite(x["loss/sft"]) for x in lines)
    assert after < 0.5 * before, (before, after)


def test_config_rejects_unknown_keys() -> None:
    with pytest.raises(ValidationError):
        SFTConfig(train_tasks="x", epoch=3)  # type: ignore[call-arg]
    with pytest.raises(ValidationError):
        SFTConfig(train_tasks="x", hint_share=1.5)


@pytest.mark.slow
def test_run_sft_end_to_end_on_a_tiny_task_set(tmp_path: Path) -> None:
    from harness.minirepos import make_mini
    from repro.sft import run_sft

    make_mini(tmp_path / "train", split="train", repos=1, tasks_per_repo=2, seed=0)
    make_mini(tmp_path / "heldout", split="heldout", repos=1, tasks_per_repo=1, seed=0)
    cfg = SFTConfig(train_tasks=str(tmp_path / "train"), heldout_tasks=str(tmp_path / "heldout"), preset="nano",
                    vocab_size=600, episodes=2, hint_share=0.5, epochs=1, batch_tokens=256, eval_instances=1,
                    eval_max_new_tokens=32, eval_max_turns=2, workers=1, torch_threads=1)
    rep = run_sft(cfg, tmp_path / "out")
    assert rep.n_trajectories == 2 and rep.train_act_tokens > 0 and math.isfinite(rep.final_loss)
    assert (tmp_path / "out" / "model" / "tokenizer.json").is_file()
    assert [e.condition for e in rep.eval] == ["unprompted", "hinted"]
    assert all(e.n + e.infra_errors == 1 for e in rep.eval)
    from repro.tokenizer import load_tokenizer

    assert len(load_tokenizer(tmp_path / "out" / "model")) == rep.vocab
    # continuing from the saved model reuses its tokenizer and the cached expert data
    cont = run_sft(cfg.model_copy(update={"init": str(tmp_path / "out" / "model"), "heldout_tasks": None}),
                   tmp_path / "out")
    assert cont.vocab == rep.vocab and cont.n_trajectories == 2 and cont.eval == []
    assert cont.wall_s["expert"] < rep.wall_s["expert"]
    # LoRA (SFTConfig.lora): the same continuation trains adapters only; model/ holds merged weights + adapter/
    from safetensors.torch import load_file

    from repro.config import LoraCfg

    init = load_file(str(tmp_path / "out" / "model" / "model.safetensors"))
    (tmp_path / "lora").mkdir()
    (tmp_path / "lora" / "expert.jsonl").write_text((tmp_path / "out" / "expert.jsonl").read_text())  # reuse the data
    lo = run_sft(cfg.model_copy(update={"init": str(tmp_path / "out" / "model"), "heldout_tasks": None,
                                        "lora": LoraCfg(enabled=True, r=2)}), tmp_path / "lora")
    merged = load_file(str(tmp_path / "lora" / "model" / "model.safetensors"))
    assert (tmp_path / "lora" / "model" / "adapter" / "adapter_model.safetensors").is_file() and lo.steps > 0
    assert all(torch.equal(merged[k], init[k]) for k in init if "_proj." not in k)
    assert any(not torch.equal(merged[k], init[k]) for k in init if "_proj." in k)


def test_summary_probe_reports_both_conditions() -> None:
    from harness.schema import Message, Trajectory
    from repro.sft import summary_probe

    tok, _ = _data()
    model = build_model("nano", len(tok), seed=2)
    msgs = [Message(role="system", content="agent"), Message(role="user", content="Fix mod1.py"),
            Message(role="assistant", content=CONVS[1][1]["content"]), Message(role="tool", content="ok"),
            Message(role="user", content="Reminder: Markdown", is_hint=True),
            Message(role="assistant", content='<tool_call>\n{"name": "finish", "arguments": {"message": "done"}}'
                                              "\n</tool_call>")]
    trajs = [Trajectory(instance_id=f"i{i}", policy="expert", seed=i, messages=msgs) for i in range(2)]
    res = summary_probe(model, tok, trajs, max_new_tokens=8)
    assert [r.condition for r in res] == ["unprompted", "hinted"] and all(r.n == 2 for r in res)
    assert all(0.0 <= r.finish_rate <= 1.0 for r in res)


def test_eval_summary_reads_the_markdown_checker_the_tasks_name() -> None:
    """The held-out summary judges Markdown with whichever markdown@ version the episodes were judged by (the mini
    tasks name markdown@v2 since the gate judges replies), and counts infrastructure errors apart."""
    from harness.schema import BehaviourResult, EpisodeMetrics, EpisodeResult
    from repro.sft import eval_summary

    def ep(i: int, verdicts: list[str], *, status: str = "ok", fc: str = "none", resolved: bool = True):
        beh = [BehaviourResult(checker="markdown@v2", ok="FAIL" not in verdicts, turn_verdicts=verdicts),
               BehaviourResult(checker="tool_protocol@v1", ok=True, turn_verdicts=["PASS"] * len(verdicts))]
        return EpisodeResult(run_id="r", instance_id=f"t{i}", repo="r", cluster="r", arm="sft", policy="sft", seed=0,
                             status=status, failure_class=fc, resolved=resolved, behaviour=beh,
                             metrics=EpisodeMetrics(steps=2, tool_call_validity=1.0))

    res = [ep(0, ["NA", "PASS"]), ep(1, ["NA", "FAIL"]), ep(2, ["NA", "NA"], status="limit_turns", fc="agent",
                                                           resolved=False),
           ep(3, ["NA"], status="infra_error", fc="infra", resolved=False)]
    s = eval_summary("unprompted", res)
    assert (s.n, s.n_applicable, s.n_na, s.infra_errors) == (3, 2, 1, 1)
    assert s.compliance == 0.5 and s.resolved_rate == 2 / 3 and s.finish_rate == 2 / 3
