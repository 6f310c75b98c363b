"""repro.tokenizer: BPE training, Qwen3 chat format (against TRL's copy of Qwen3's template), segment encoder."""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path

import pytest

from repro.tokenizer import IM_END, MARKUP_TOKENS, ChatEncoder, load_tokenizer, tool_json, train_tokenizer

CORPUS = [
    "def add(a, b):\n    return a + b\n",
    "Fix the bug in utils.py so that the tests pass.",
    "I will read the file first, then run the tests.",
    "## Summary\n- Fixed `add` in `utils.py`\n",
    '{"name": "read_file", "arguments": {"path": "utils.py"}}',
] * 40

TOOLS = [{"type": "function", "function": {"name": "read_file", "description": "Read a file.",
                                           "parameters": {"type": "object", "properties": {"path": {"type": "string"}},
                                                          "required": ["path"]}}}]


@functools.lru_cache(maxsize=1)
def tok():
    return train_tokenizer(CORPUS, vocab_size=400)


def conversation() -> list[dict]:
    call = '<tool_call>\n{"name": "read_file", "arguments": {"path": "utils.py"}}\n</tool_call>'
    return [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Fix utils.py"},
        {"role": "assistant", "content": "<think>\nRead it first.\n</think>\n\nI will read it.\n" + call},
        {"role": "tool", "content": "def add(a, b):\n    return a - b\n"},
        {"role": "tool", "content": "second result"},
        {"role": "user", "content": "Reminder: use Markdown.", "is_hint": True},
        {"role": "assistant", "content": "Done: fixed `add`."},
    ]


def test_special_and_markup_tokens_are_single_ids() -> None:
    t = tok()
    assert [t.convert_tokens_to_ids(x) for x in ("<|endoftext|>", "<|im_start|>", "<|im_end|>")] == [0, 1, 2]
    assert t.eos_token == IM_END and t.pad_token_id == 0
    for m in MARKUP_TOKENS:
        assert len(t.encode(m, add_special_tokens=False)) == 1
        assert t.decode(t.encode(f"a{m}b", add_special_tokens=False)) == f"a{m}b"


def test_byte_level_round_trip_of_unseen_text() -> None:
    text = "naïve Ünïcödé → 漢字 \t tabs\n\n  and emoji 🚀 ```python\nx = 1\n```"
    t = tok()
    assert t.decode(t.encode(text, add_special_tokens=False)) == text


def test_save_and_load_round_trip(tmp_path: Path) -> None:
    tok().save_pretrained(tmp_path)
    t2 = load_tokenizer(tmp_path)
    msgs = conversation()
    assert t2.apply_chat_template(msgs, tools=TOOLS, tokenize=False) == tok().apply_chat_template(
        msgs, tools=TOOLS, tokenize=False)
    with pytest.raises(FileNotFoundError, match="train_tokenizer"):
        load_tokenizer(tmp_path / "missing")


def test_template_renders_qwen3_format() -> None:
    s = tok().apply_chat_template(conversation(), tools=TOOLS, tokenize=False, add_generation_prompt=True)
    assert s.startswith("<|im_start|>system\nYou are a coding agent.\n\n# Tools\n")
    assert "<tools>\n" + tool_json(TOOLS[0]) + "\n</tools>" in s
    assert tool_json(TOOLS[0]) == json.dumps(TOOLS[0], separators=(",", ":"))  # compact JSON (issue #20)
    assert ("<|im_start|>user\n<tool_response>\ndef add(a, b):\n    return a - b\n\n</tool_response>\n"
            "<tool_response>\nsecond result\n</tool_response><|im_end|>\n") in s
    assert "<|im_start|>assistant\n<think>\nRead it first.\n</think>\n\nI will read it.\n<tool_call>\n" in s
    assert s.endswith("<|im_start|>assistant\n")


def test_template_equals_qwen3_original_where_it_does_not_strip_thinking() -> None:
    """Without <think> blocks in history, Qwen3's own template (TRL's copy) and ours render identically, including
    tool calls given as structured ``tool_calls``, except for the tool schemas, which ours writes as compact JSON."""
    trl_dir = pytest.importorskip("trl").__path__[0]
    qwen3 = (Path(trl_dir) / "chat_templates" / "qwen3.jinja").read_text()
    msgs = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Fix it"},
        {"role": "assistant", "content": "Reading.",
         "tool_calls": [{"type": "function", "function": {"name": "read_file", "arguments": {"path": "a.py"}}}]},
        {"role": "tool", "content": "x = 1"},
        {"role": "assistant", "content": "",
         "tool_calls": [{"type": "function", "function": {"name": "read_file", "arguments": {"path": "b.py"}}},
                        {"type": "function", "function": {"name": "read_file", "arguments": {"path": "c.py"}}}]},
        {"role": "tool", "content": "y = 2"},
        {"role": "tool", "content": "z = 3"},
        {"role": "user", "content": "Now summarise."},
    ]  # Qwen3 adds an empty <think> block to assistant turns after the last user query; ours does not.
    ours = tok().apply_chat_template(msgs, tools=TOOLS, tokenize=False, add_generation_prompt=True)
    theirs = tok().apply_chat_template(msgs, tools=TOOLS, tokenize=False, add_generation_prompt=True,
                                       chat_template=qwen3)
    assert ours != theirs and ours == theirs.replace(json.dumps(TOOLS[0], ensure_ascii=False), tool_json(TOOLS[0]))
    assert tok().apply_chat_template(msgs[:2], tokenize=False, add_generation_prompt=True) == \
        tok().apply_chat_template(msgs[:2], tokenize=False, add_generation_prompt=True, chat_template=qwen3)


def test_encoder_ids_equal_apply_chat_template() -> None:
    t = tok()
    enc = ChatEncoder(t).encode(conversation(), TOOLS)
    ref = t.apply_chat_template(conversation(), tools=TOOLS, tokenize=True)
    ref = ref["input_ids"] if hasattr(ref, "keys") else ref
    assert enc.ids == list(ref)
    n = len(enc)
    assert all(len(x) == n for x in (enc.act, enc.turn, enc.think, enc.hint, enc.logprobs))


def test_encoder_annotations() -> None:
    t = tok()
    enc = ChatEncoder(t).encode(conversation(), TOOLS)
    msgs = conversation()
    gen = t.decode([i for i, a in zip(enc.ids, enc.act, strict=True) if a])
    assert gen == msgs[2]["content"] + IM_END + msgs[6]["content"] + IM_END
    assert t.decode([i for i, f in zip(enc.ids, enc.think, strict=True) if f]) == "<think>\nRead it first.\n</think>"
    assert t.decode([i for i, f in zip(enc.ids, enc.hint, strict=True) if f]) == \
        "<|im_start|>user\nReminder: use Markdown.<|im_end|>\n"
    assert [enc.ids[p] for p in enc.header_starts] == [t.convert_tokens_to_ids("<|im_start|>")] * 2
    hlen = len(ChatEncoder(t).assistant_header)
    for k, p in enumerate(enc.header_starts):
        assert t.decode(enc.ids[p:p + hlen]) == "<|im_start|>assistant\n" and enc.turn[p] == k
    assert {tk for tk, a in zip(enc.turn, enc.act, strict=True) if a} == {0, 1}
    assert all(math.isnan(x) for x in enc.logprobs)


def test_encoder_uses_sampled_token_ids_verbatim() -> None:
    t = tok()
    e = ChatEncoder(t)
    odd = e.text_ids("Do") + e.text_ids("ne.") + [t.convert_tokens_to_ids(IM_END)]  # a non-canonical split
    msgs = [{"role": "user", "content": "hi"},
            {"role": "assistant", "content": "Done.", "token_ids": odd, "logprobs": [-0.1] * len(odd)}]
    enc = e.encode(msgs)
    body = [i for i, a in zip(enc.ids, enc.act, strict=True) if a]
    assert body == odd
    assert [x for x, a in zip(enc.logprobs, enc.act, strict=True) if a] == [-0.1] * len(odd)
    # truncated turn: <|im_end|> appended but not generated
    trunc = [{"role": "user", "content": "hi"},
             {"role": "assistant", "content": "Do", "token_ids": odd[:1], "logprobs": [-0.2], "truncated": True}]
    enc2 = e.encode(trunc)
    assert sum(enc2.act) == 1 and enc2.ids[-2] == t.convert_tokens_to_ids(IM_END)
    with pytest.raises(ValueError, match="logprobs"):
        e.encode([{"role": "assistant", "content": "x", "token_ids": odd, "logprobs": [0.0]}])
    with pytest.raises(ValueError, match="role"):
        e.encode([{"role": "robot", "content": "x"}])


def test_too_small_vocab_is_rejected() -> None:
    with pytest.raises(ValueError, match="vocab_size"):
        train_tokenizer(["abc"], vocab_size=100)


def test_pre_tokenizer_splits_names_the_same_after_any_punctuation() -> None:
    """The default split (``words``): a letter run takes at most a leading space, so a name is the same pre-token
    in a path, an identifier and between backticks; digits are single pieces. ``split="qwen3"`` is Qwen3's own
    (a letter run keeps one leading non-letter: ``_case``, ``.py``, ``/steirpal``)."""
    pre = tok().backend_tokenizer.pre_tokenizer
    pieces = [p for p, _ in pre.pre_tokenize_str('test_case12 {"path": "a.py"}')]
    assert pieces == ["test", "_", "case", "1", "2", 'Ġ{"', "path", '":', 'Ġ"', "a", ".", "py", '"}']
    for text in ("pkg/steirpal.py", "tests/test_steirpal.py", "`steirpal`", '"steirpal"'):
        assert "steirpal" in [p for p, _ in pre.pre_tokenize_str(text)], text
    qwen = train_tokenizer(["abc"], vocab_size=400, min_frequency=1, split="qwen3").backend_tokenizer.pre_tokenizer
    assert [p for p, _ in qwen.pre_tokenize_str('test_case12 {"path": "a.py"}')] == [
        "test", "_case", "1", "2", 'Ġ{"', "path", '":', 'Ġ"', "a", ".py", '"}']
    assert [p for p, _ in qwen.pre_tokenize_str("pkg/steirpal.py")] == ["pkg", "/steirpal", ".py"]
