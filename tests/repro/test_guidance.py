"""repro.guidance: masks, token-level hint splice, position map, variants; end to end with a nano model."""

from __future__ import annotations

import functools
import math

import pytest
import torch

from repro.guidance import SpliceError, plan_guidance, splice
from repro.losses import chunked_kl_loss, kl_from_logits
from repro.models import build_model, final_hidden_states, lm_head_weight
from repro.tokenizer import ChatEncoder, train_tokenizer

pytestmark = pytest.mark.usefixtures("one_torch_thread")

HINT = "Reminder: format your reply to the user in Markdown."
CORPUS = ["I read the file and fixed the bug.", "## Summary\n- fixed `add`", "def f(x):\n    return x\n",
          HINT, "<think>\nplan\n</think>\n\n"] * 30


@functools.lru_cache(maxsize=1)
def tok():
    return train_tokenizer(CORPUS, vocab_size=360)


def messages() -> list[dict]:
    return [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": "Fix f."},
        {"role": "assistant", "content": "<think>\nplan\n</think>\n\nI read the file."},
        {"role": "tool", "content": "def f(x):\n    return x\n"},
        {"role": "assistant", "content": "<think>\nfix\n</think>\n\nI fixed the bug in f, it returned x."},
        {"role": "tool", "content": "ok"},
        {"role": "assistant", "content": "Fixed the bug."},
        {"role": "user", "content": "thanks"},
        {"role": "assistant", "content": "bye"},
    ]


def with_hints(msgs: list[dict], turns: set[int], upto: int) -> list[dict]:
    """The teacher conversation built at the MESSAGE level (hint message before each turn), cut after turn ``upto``."""
    out, k = [], 0
    for m in msgs:
        if m["role"] == "assistant":
            if k in turns:
                out.append({"role": "user", "content": HINT})
            out.append(m)
            if k == upto:
                return out
            k += 1
        else:
            out.append(m)
    return out


def test_masks_and_single_context_for_failing_turns() -> None:
    e = ChatEncoder(tok())
    enc = e.encode(messages())
    plan = plan_guidance(enc, ["PASS", "FAIL", "NA", "FAIL"], e.hint_ids(HINT))
    assert plan.guided_turns == [1, 3]
    assert plan.m_act == enc.act
    fail_turns = {enc.turn[t] for t, m in enumerate(plan.m_fail) if m}
    assert fail_turns == {1, 3}
    assert plan.m_kl == plan.m_fail  # include_thinking=True
    assert len(plan.contexts) == 1
    ctx = plan.contexts[0]
    # token-level splice == message-level rendering of the teacher conversation (and it is truncated after turn 3)
    assert ctx.ids == e.encode(with_hints(messages(), {1, 3}, upto=3)).ids
    assert ctx.kl_positions == [t for t, m in enumerate(plan.m_kl) if m]
    assert all(ctx.ids[mt] == enc.ids[t] for t, mt in zip(ctx.kl_positions, ctx.teacher_positions, strict=True))
    assert [ctx.ids[s:e2] for s, e2 in ctx.hint_spans] == [e.hint_ids(HINT)] * 2
    assert not any(s <= mt < e2 for mt in ctx.teacher_positions for s, e2 in ctx.hint_spans)
    assert ctx.student_rows == [t - 1 for t in ctx.kl_positions]


def test_no_failing_turn_means_no_teacher_forward() -> None:
    e = ChatEncoder(tok())
    plan = plan_guidance(e.encode(messages()), ["PASS", "NA", "PASS", "PASS"], e.hint_ids(HINT))
    assert plan.contexts == [] and plan.n_kl == 0 and sum(plan.m_fail) == 0


def test_include_thinking_false_drops_think_tokens() -> None:
    e = ChatEncoder(tok())
    enc = e.encode(messages())
    with_think = plan_guidance(enc, ["FAIL"] * 4, e.hint_ids(HINT))
    without = plan_guidance(enc, ["FAIL"] * 4, e.hint_ids(HINT), include_thinking=False)
    assert with_think.n_kl - without.n_kl == sum(enc.think) > 0
    assert not any(m and th for m, th in zip(without.m_kl, enc.think, strict=True))


def test_all_turns_variant_guides_every_turn() -> None:
    e = ChatEncoder(tok())
    enc = e.encode(messages())
    plan = plan_guidance(enc, ["PASS", "NA", "PASS", "PASS"], e.hint_ids(HINT), variant="all_turns")
    assert plan.guided_turns == [0, 1, 2, 3] and plan.m_kl == plan.m_act and sum(plan.m_fail) == 0
    assert plan.contexts[0].ids == e.encode(with_hints(messages(), {0, 1, 2, 3}, upto=3)).ids


def test_per_turn_context_variant() -> None:
    e = ChatEncoder(tok())
    enc = e.encode(messages())
    hints = {1: e.hint_ids(HINT), 2: e.hint_ids("Use bullets.")}
    plan = plan_guidance(enc, ["PASS", "FAIL", "FAIL", "PASS"], hints, variant="per_turn_ctx")
    assert [c.turns for c in plan.contexts] == [[1], [2]]
    assert plan.contexts[0].ids == e.encode(with_hints(messages(), {1}, upto=1)).ids
    assert sum(len(c.kl_positions) for c in plan.contexts) == plan.n_kl
    assert plan.contexts[1].ids[plan.contexts[1].hint_spans[0][0]:plan.contexts[1].hint_spans[0][1]] == hints[2]
    with pytest.raises(KeyError, match="turn 3"):
        plan_guidance(enc, ["PASS", "FAIL", "FAIL", "FAIL"], hints, variant="per_turn_ctx")


def test_bad_inputs_raise_with_fix() -> None:
    e = ChatEncoder(tok())
    enc = e.encode(messages())
    with pytest.raises(ValueError, match="one PASS/FAIL/NA per"):
        plan_guidance(enc, ["FAIL"], e.hint_ids(HINT))
    with pytest.raises(ValueError, match="unknown verdicts"):
        plan_guidance(enc, ["FAIL", "ok", "NA", "NA"], e.hint_ids(HINT))
    # a "KL token" on the assistant header's first token is displaced by the hint: the splice check catches it
    with pytest.raises(SpliceError):
        splice(enc, {1: e.hint_ids(HINT)}, [enc.header_starts[1]], truncate_after_turn=1)


def test_end_to_end_kl_on_a_nano_model_matches_message_level_reference() -> None:
    """Gathered rows + chunked KL == full-logit KL where the teacher sequence is rendered from messages."""
    t = tok()
    e = ChatEncoder(t)
    enc = e.encode(messages())
    plan = plan_guidance(enc, ["NA", "FAIL", "PASS", "FAIL"], e.hint_ids(HINT))
    ctx = plan.contexts[0]
    model = build_model("nano", len(t), seed=0)
    s_ids = torch.tensor([enc.ids])
    hs = final_hidden_states(model, s_ids)[0]
    with torch.no_grad():
        ht = final_hidden_states(model, torch.tensor([ctx.ids]))[0]
    rows_s, rows_t = torch.tensor(ctx.student_rows), torch.tensor(ctx.teacher_rows)
    w = torch.full((len(rows_s),), 1.0 / len(rows_s))
    res = chunked_kl_loss(hs[rows_s], ht[rows_t], lm_head_weight(model), w, chunk_size=7, kappa=math.inf)
    # reference: full logits, teacher from the message-level conversation
    ref_ids = e.encode(with_hints(messages(), {1, 3}, upto=3)).ids
    zs = model(input_ids=s_ids).logits[0]
    with torch.no_grad():
        zt = model(input_ids=torch.tensor([ref_ids])).logits[0]
    per = kl_from_logits(zs[rows_s], zt[rows_t])
    torch.testing.assert_close(res.per_token, per.detach(), rtol=1e-4, atol=1e-6)
    assert float(per.detach().mean()) > 1e-6, "the hint must change the teacher distribution"
    # before any hint, teacher == student (causality): the first row of each context is identical
    pre = enc.header_starts[1]
    torch.testing.assert_close(hs[:pre].detach(), ht[:pre], rtol=1e-5, atol=1e-5)


def test_the_default_gate_guides_replies_not_broken_tool_calls() -> None:
    """Issue #13.3: with the default checker (``RewardCfg().checker``), a turn whose text is a broken tool call is
    not a failing Markdown turn, so the gate guides only the real reply to the user (v1 guided both)."""
    from harness.behaviour import get_checker, turn_verdicts
    from harness.schema import Message
    from harness.tools import parse_tool_calls
    from repro.config import RewardCfg

    texts = ['{"name": "read_file", "arguments": {"path": "calc_utils/add_sub.py"}} read it first',  # no tags
             "I fixed the bug in calc_utils/add_sub.py where add() subtracted, and the tests pass now."]  # a reply
    msgs = [Message(role="system", content="s"), Message(role="user", content="Fix f.")]
    for i, t in enumerate(texts):
        msgs += [Message(role="assistant", content=t, tool_calls=parse_tool_calls(t), turn=i),
                 Message(role="user", content="no call", turn=i)]
    checker = RewardCfg().checker
    assert checker == "markdown@v3"
    verdicts = turn_verdicts(get_checker(checker), msgs)
    assert verdicts == ["NA", "FAIL"] and turn_verdicts(get_checker("markdown@v1"), msgs) == ["FAIL", "FAIL"]
    assert turn_verdicts(get_checker("tool_protocol@v2"), msgs)[0] == "FAIL"
    enc = ChatEncoder(tok())
    plan = plan_guidance(enc.encode([m.model_dump() for m in msgs]), verdicts, enc.hint_ids(HINT))
    assert plan.guided_turns == [1] and {enc.encode([m.model_dump() for m in msgs]).turn[t]
                                         for t, m in enumerate(plan.m_kl) if m} == {1}
