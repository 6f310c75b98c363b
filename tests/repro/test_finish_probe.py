"""The P(heading) probe at finish contexts (repro.finish_probe): where the context is cut, the hinted (teacher's)
view, and the sum over token paths that spell a heading."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from harness.tools import tool_schemas
from repro.finish_probe import FinishContext, HeadingVocab, finish_context, heading_probability, probe_headings
from repro.tokenizer import ChatEncoder, load_tokenizer

MINI_TOKENIZER = Path(__file__).resolve().parents[2] / "assets" / "base" / "mini"
FINISH = ('<think>\nthe tests pass now\n</think>\n<tool_call>\n{"name": "finish", "arguments": {"message": '
          '"The bug was in `add`."}}\n</tool_call>')
MESSAGES = [
    {"role": "system", "content": "You are a coding agent."},
    {"role": "user", "content": "Fix the bug in calc.py."},
    {"role": "assistant", "content": '<tool_call>\n{"name": "run_tests", "arguments": {}}\n</tool_call>'},
    {"role": "tool", "content": "1 passed"},
    {"role": "assistant", "content": FINISH},
]


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer(MINI_TOKENIZER)


def test_context_ends_at_the_token_before_the_message(tok) -> None:
    enc = ChatEncoder(tok)
    ctx = finish_context("t1", MESSAGES, enc, tool_schemas(), "Reminder: use Markdown.")
    full = enc.encode(MESSAGES, tool_schemas()).ids
    assert full[:len(ctx.ids)] == ctx.ids  # a prefix of the episode as training encodes it
    cut_text = tok.decode(ctx.ids)
    # what follows the cut is `rest` and then the message itself
    assert cut_text.endswith('"message":') and ctx.rest == ' "'  # the quote token may carry "##
    # the teacher's view: the hint block right before the finish turn's assistant header, nothing else changed
    hint = enc.hint_ids("Reminder: use Markdown.")
    head = len(enc.encode(MESSAGES[:4], tool_schemas()).ids)
    assert ctx.hinted_ids == ctx.ids[:head] + hint + ctx.ids[head:]


def test_no_finish_call_is_refused(tok) -> None:
    with pytest.raises(ValueError, match="no assistant turn with a finish call"):
        finish_context("t2", MESSAGES[:4], ChatEncoder(tok), tool_schemas(), "hint")


def test_heading_probability_sums_the_token_paths(tok) -> None:
    vocab = HeadingVocab(tok)
    tid = {t: tok.convert_tokens_to_ids(tok.tokenize(t))[0] for t in (' "##', ' "', "##")}
    assert tok.decode([tid[' "##']]) == ' "##' and tok.decode([tid[' "']]) == ' "'
    one_hash = tok.convert_tokens_to_ids(tok.tokenize("# x"))[0]
    assert tok.decode([one_hash]) == "#"
    n = len(tok)

    def next_probs(ids: list[int]) -> torch.Tensor:
        p = torch.zeros(n)
        if ids[-1] == tid[' "']:  # after the quote: '#' 0.4, '##' 0.1, anything else 0.5
            p[one_hash], p[tid["##"]], p[0] = 0.4, 0.1, 0.5
        else:  # at the cut: ' "##' 0.2, ' "' 0.5, other 0.3
            p[tid[' "##']], p[tid[' "']], p[0] = 0.2, 0.5, 0.3
        return p

    assert heading_probability(next_probs, vocab, [7], ' "') == pytest.approx(0.2 + 0.5 * 0.5)
    assert heading_probability(next_probs, vocab, [tid[' "']], "") == pytest.approx(0.5)
    # paths below the floor are not followed
    assert heading_probability(next_probs, vocab, [7], ' "', floor=0.6) == pytest.approx(0.2)


def test_probe_headings_on_a_model(tok) -> None:
    from repro.models import build_model

    model = build_model("nano", len(tok), seed=0)
    enc = ChatEncoder(tok)
    ctx = finish_context("t1", MESSAGES, enc, tool_schemas(), "Reminder: use Markdown.")
    out = probe_headings(model, tok, [ctx, FinishContext.from_json(ctx.to_json())])
    for view in ("unprompted", "hinted"):
        vals = out[view]["values"]
        assert len(vals) == 2 and vals[0] == pytest.approx(vals[1]) and 0 < vals[0] < 1
    assert out["unprompted"]["values"][0] != pytest.approx(out["hinted"]["values"][0], rel=1e-9)


def test_the_cut_does_not_depend_on_how_the_message_starts(tok) -> None:
    enc = ChatEncoder(tok)
    md = [*MESSAGES[:4], {"role": "assistant", "content": FINISH.replace('"The bug', '"## Summary\\n\\nThe bug')}]
    a = finish_context("t1", MESSAGES, enc, tool_schemas(), "h")
    b = finish_context("t1", md, enc, tool_schemas(), "h")
    assert (a.ids, a.rest) == (b.ids, b.rest)


def test_prefix_cache_gives_the_full_forward(tok) -> None:
    from repro.finish_probe import PrefixLM
    from repro.models import build_model

    model = build_model("nano", len(tok), seed=1).eval()
    ctx = finish_context("t1", MESSAGES, ChatEncoder(tok), tool_schemas(), "Reminder: use Markdown.")
    full = PrefixLM(model)  # no prefix: every call runs in full
    lm = PrefixLM(model)
    lm.set_prefix(ctx.ids[:40])
    for ids in (ctx.ids, ctx.ids + [5], ctx.hinted_ids, ctx.ids):  # the cache is cropped back after each call
        assert torch.allclose(lm(ids), full(ids), atol=1e-5)
