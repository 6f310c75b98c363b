"""Byte-level BPE tokenizer trained here, with a Qwen3-style ChatML chat template, and a token-level encoder.

What this covers
- ``train_tokenizer(texts, vocab_size)`` trains a byte-level BPE (``tokenizers``) and returns a transformers fast
  tokenizer whose ``chat_template`` renders conversations exactly as Qwen3 does (checked against TRL's copy of
  Qwen3's template, ``trl/chat_templates/qwen3.jinja``): ``<|im_start|>role\\n...<|im_end|>\\n`` blocks, tools in
  the system prompt inside ``<tools></tools>``, ``<tool_call>\\n{json}\\n</tool_call>`` and tool results as
  ``<|im_start|>user\\n<tool_response>\\n...\\n</tool_response><|im_end|>``.
- Differences from Qwen3's template (deliberate, as in TRL's ``qwen3_training.jinja``): earlier ``<think>`` blocks
  are never stripped from history, so rendering is prefix-preserving across turns (token-in/token-out needs this);
  assistant ``content`` is rendered verbatim (our policies write ``<think>``/``<tool_call>`` markup into the text),
  and the ``tool_calls`` field is rendered only when the content has no ``<tool_call>`` markup of its own.
  Tool schemas are rendered as compact JSON (``tojson(separators=(',', ':'))``, ``tool_json``) where Qwen3 writes
  ``", "`` and ``": "``: the same JSON objects in the same ``<tools>`` block, a third fewer tokens.
- ``ChatEncoder`` encodes a conversation segment by segment (system, each message) and records, per token, whether
  the policy generated it, the assistant turn it belongs to and whether it lies in a ``<think>`` block. Its ids equal
  ``tokenizer.apply_chat_template(messages, tools=tools)`` for ordinary conversations (a test checks this); for
  rollouts, assistant bodies come from the sampled ``token_ids`` and are never re-tokenised.

The pre-tokenizer is Qwen3's split with one change (``WORD_SPLIT_PATTERN``: letters never take a leading punctuation
mark, so a name tokenises the same in a path, an identifier and prose; see the constant), then byte-level, as in
Qwen3's ``tokenizer.json``; ``split="qwen3"`` gives Qwen3's own pattern. Not covered: Qwen3's 151,646 learned merges
and its NFC normaliser (the mini world's text is ASCII).
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol, cast

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from harness.schema import Message

log = logging.getLogger(__name__)

PAD = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
SPECIAL_TOKENS = [PAD, IM_START, IM_END]
# Non-special added tokens (as in Qwen3: kept by decode(skip_special_tokens=True), never split by BPE).
MARKUP_TOKENS = ["<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]

# Qwen2/Qwen3's pre-tokenizer split (their tokenizer.json): a letter run may carry one leading non-letter, so
# ``_case`` or ``"path`` is one piece where GPT-2's split makes two; digits are single pieces.
QWEN_SPLIT_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                      r"\s*[\r\n]+|\s+(?!\S)|\s+")
# Qwen3's split with one change: a run of letters takes at most a leading space, never a leading punctuation mark.
# Under Qwen3's rule `/steirpal` and `_steirpal` are different tokens ("/st" + "eirpal" vs "_st" + "eirpal"), so a
# model must learn, token pair by token pair, that `tests/test_steirpal.py` names `pkg/steirpal.py`; here a name
# tokenises the same after `/`, `_`, `.`, a backtick or a quote. Measured on the mini base's run (issue #20): with
# Qwen3's split the exact-path probe stayed at 0.23-0.39 for 550 steps (steps 600-1150, 9.3M tokens) while the
# `old`-line probe (copying within one context) reached 0.92; in 7 of 7 misses inspected the wrong token was the
# first one after the `/`.
WORD_SPLIT_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)| ?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                      r"\s*[\r\n]+|\s+(?!\S)|\s+")
SPLIT_PATTERNS = {"qwen3": QWEN_SPLIT_PATTERN, "words": WORD_SPLIT_PATTERN}
TokenizerSplit = Literal["qwen3", "words"]

TOOLS_PREAMBLE = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
)
TOOLS_POSTAMBLE = (
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
    '<tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n'
    "</tool_call>"
)

# The tool schemas are rendered as compact JSON (no blanks after "," and ":"): the same JSON, a third fewer tokens
# for a byte-level BPE, in every episode's system block (issue #20).
SCHEMA_SEPARATORS = (",", ":")


def tool_json(tool: dict[str, Any]) -> str:
    """One tool schema as the chat template renders it inside ``<tools>`` (compact JSON, non-ASCII kept)."""
    return json.dumps(tool, ensure_ascii=False, separators=SCHEMA_SEPARATORS)


CHAT_TEMPLATE = (
    "{%- if tools %}{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}{%- endif %}"
    "{{- " + json.dumps(TOOLS_PREAMBLE) + " }}"
    "{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson(separators=(',', ':')) }}{%- endfor %}"
    "{{- " + json.dumps(TOOLS_POSTAMBLE) + " }}{{- '<|im_end|>\\n' }}"
    "{%- else %}{%- if messages[0].role == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}{%- endif %}{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message.content is string %}{%- set content = message.content %}{%- else %}{%- set content = '' %}{%- endif %}"
    "{%- if (message.role == 'user') or (message.role == 'system' and not loop.first) %}"
    "{{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>\\n' }}"
    "{%- elif message.role == 'assistant' %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if message.reasoning_content is string %}"
    "{{- '<think>\\n' + message.reasoning_content.strip('\\n') + '\\n</think>\\n\\n' + content.lstrip('\\n') }}"
    "{%- else %}{{- content }}{%- endif %}"
    "{%- if message.tool_calls and '<tool_call>' not in content %}{%- for tool_call in message.tool_calls %}"
    "{%- if (loop.first and content) or (not loop.first) %}{{- '\\n' }}{%- endif %}"
    "{%- if tool_call.function %}{%- set tool_call = tool_call.function %}{%- endif %}"
    "{{- '<tool_call>\\n{\"name\": \"' }}{{- tool_call.name }}{{- '\", \"arguments\": ' }}"
    "{%- if tool_call.arguments is string %}{{- tool_call.arguments }}{%- else %}{{- tool_call.arguments | tojson }}"
    "{%- endif %}{{- '}\\n</tool_call>' }}{%- endfor %}{%- endif %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- elif message.role == 'tool' %}"
    "{%- if loop.first or (messages[loop.index0 - 1].role != 'tool') %}{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' + content + '\\n</tool_response>' }}"
    "{%- if loop.last or (messages[loop.index0 + 1].role != 'tool') %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}"
    "{%- endif %}"
)


def train_tokenizer(texts: Iterable[str], *, vocab_size: int = 4096, min_frequency: int = 2,
                    split: TokenizerSplit = "words") -> PreTrainedTokenizerFast:
    """Train a byte-level BPE on ``texts`` and wrap it as a transformers fast tokenizer with the chat template.

    ``split``: the pre-tokenizer's pattern, ``"words"`` (``WORD_SPLIT_PATTERN``, the default: names tokenise the same
    after any punctuation) or ``"qwen3"`` (Qwen3's own, a few percent fewer tokens).

    Special tokens ``<|endoftext|>`` (pad), ``<|im_start|>``, ``<|im_end|>`` (eos) get ids 0, 1, 2; the markup tokens
    (``<think>``, ``<tool_call>``, ``<tool_response>`` and their closers) are added as single non-special tokens.
    Deterministic for a given corpus order. Save with ``tokenizer.save_pretrained(dir)``; load with
    ``load_tokenizer(dir)``.
    """
    n_reserved = len(SPECIAL_TOKENS) + len(MARKUP_TOKENS) + 256
    if vocab_size < n_reserved + 16:
        raise ValueError(f"vocab_size={vocab_size} is too small: the 256 byte symbols and {n_reserved - 256} special "
                         f"tokens need {n_reserved}; pass vocab_size >= {n_reserved + 16}.")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(SPLIT_PATTERNS[split]), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(MARKUP_TOKENS), min_frequency=min_frequency, special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
    )
    tok.train_from_iterator(texts, trainer)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in MARKUP_TOKENS])
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=IM_END, pad_token=PAD, bos_token=None,
                                 unk_token=None, model_max_length=1 << 20)
    hf.chat_template = CHAT_TEMPLATE
    hf.padding_side = "left"
    log.info("trained byte-level BPE: %d tokens", len(hf))
    return hf


def load_tokenizer(path: str | Path) -> PreTrainedTokenizerFast:
    """Load a tokenizer saved by ``train_tokenizer(...).save_pretrained(path)``; checks the special tokens."""
    p = Path(path)
    if not (p / "tokenizer.json").is_file():
        raise FileNotFoundError(f"{p}/tokenizer.json not found: train one with repro.tokenizer.train_tokenizer "
                                f"and save_pretrained({str(p)!r}), or point to a checkpoint directory.")
    tok = PreTrainedTokenizerFast.from_pretrained(str(p))
    for t in SPECIAL_TOKENS + MARKUP_TOKENS:
        if tok.convert_tokens_to_ids(t) is None:
            raise ValueError(f"{p}/tokenizer.json lacks the token {t!r}; retrain it with repro.tokenizer.train_tokenizer.")
    if not tok.chat_template:
        tok.chat_template = CHAT_TEMPLATE
    return tok


@dataclass(frozen=True)
class EncodedConversation:
    """A conversation as token ids plus per-token annotations (all lists have len(ids)).

    ``act[t]`` 1 iff the policy generated token t (assistant body incl. its ``<|im_end|>``; not the header, not the
    newline after ``<|im_end|>``); ``turn[t]`` the 0-based assistant turn index for every token of an assistant block
    (header included), -1 elsewhere; ``think[t]`` 1 inside ``<think>…</think>`` (both tags included);
    ``hint[t]`` 1 for tokens of hint messages (``is_hint``) present in the context; ``logprobs[t]`` behaviour
    log-prob for generated tokens when known, else NaN; ``header_starts[k]`` position of the ``<|im_start|>`` of
    assistant turn k.
    """

    ids: list[int]
    act: list[int]
    turn: list[int]
    think: list[int]
    hint: list[int]
    logprobs: list[float]
    header_starts: list[int]

    def __len__(self) -> int:
        return len(self.ids)


ChatMessage = Message | Mapping[str, Any]  # a harness Message, or a dict with its fields (role, content, ...)


class TokenDecoder(Protocol):
    """What the rollout needs of a tokenizer: token ids back to text (a transformers tokenizer is one)."""

    def decode(self, token_ids: list[int], skip_special_tokens: bool = False) -> str | list[str]: ...  # str here


class ConversationEncoder(Protocol):
    """What the rollout needs of a chat encoder (:class:`ChatEncoder` is the one): the template's blocks as ids,
    built piece by piece while sampling, and the whole conversation re-encoded with per-token annotations."""

    im_end: int
    newline: list[int]
    assistant_header: list[int]

    def system_ids(self, system: str | None, tools: Sequence[dict[str, Any]] | None) -> list[int]: ...

    def message_ids(self, role: str, content: str) -> list[int]: ...

    def hint_ids(self, hint_text: str) -> list[int]: ...

    def tool_responses_ids(self, contents: Sequence[str]) -> list[int]: ...

    def encode(self, messages: Sequence[ChatMessage],
               tools: Sequence[dict[str, Any]] | None = None) -> EncodedConversation: ...


def _get(msg: ChatMessage, key: str, default: object = None) -> Any:
    return msg.get(key, default) if isinstance(msg, Mapping) else getattr(msg, key, default)


class ChatEncoder:
    """Segment-wise encoder for the chat template (see module docstring). ``messages`` may be harness
    ``Message`` objects or dicts with ``role``/``content`` (and optionally ``token_ids``, ``logprobs``, ``is_hint``,
    ``truncated``)."""

    def __init__(self, tokenizer: PreTrainedTokenizerFast) -> None:
        self.tok = tokenizer
        # one token string -> one id (transformers' annotation also allows a list, for a list of strings)
        ids = cast(dict[str, int], {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS + MARKUP_TOKENS})
        self.im_start, self.im_end = ids[IM_START], ids[IM_END]
        self.think_open, self.think_close = ids["<think>"], ids["</think>"]
        self.newline = self.text_ids("\n")
        self.assistant_header = [self.im_start] + self.text_ids("assistant\n")

    def text_ids(self, text: str) -> list[int]:
        """Plain tokenisation of ``text`` (no template, no special-token insertion)."""
        return list(self.tok.encode(text, add_special_tokens=False))

    def system_ids(self, system: str | None, tools: Sequence[dict[str, Any]] | None) -> list[int]:
        """The system block exactly as the template renders it (empty if neither system text nor tools)."""
        if tools:
            body = (system + "\n\n" if system is not None else "") + TOOLS_PREAMBLE
            body += "".join("\n" + tool_json(t) for t in tools) + TOOLS_POSTAMBLE
        elif system is not None:
            body = system
        else:
            return []
        return self.text_ids(IM_START + "system\n" + body + IM_END + "\n")

    def message_ids(self, role: str, content: str) -> list[int]:
        """One ``user``/``system`` block: ``<|im_start|>role\\ncontent<|im_end|>\\n``."""
        return self.text_ids(f"{IM_START}{role}\n{content}{IM_END}\n")

    def hint_ids(self, hint_text: str) -> list[int]:
        """The hint block spliced before a failing turn (METHOD §6.3: its own ``user`` message)."""
        return self.message_ids("user", hint_text)

    def tool_responses_ids(self, contents: Sequence[str]) -> list[int]:
        """Consecutive tool results merged into one ``user`` block, as Qwen3's template does."""
        body = "".join(f"\n<tool_response>\n{c}\n</tool_response>" for c in contents)
        return self.text_ids(f"{IM_START}user{body}{IM_END}\n")

    def think_flags(self, body: Sequence[int]) -> list[int]:
        """1 for tokens from ``<think>`` to ``</think>`` inclusive (an unclosed block runs to the end)."""
        out, inside = [], False
        for t in body:
            if t == self.think_open:
                inside = True
            out.append(1 if inside else 0)
            if t == self.think_close:
                inside = False
        return out

    def encode(self, messages: Sequence[ChatMessage],
               tools: Sequence[dict[str, Any]] | None = None) -> EncodedConversation:
        """Encode a whole conversation; assistant bodies use ``token_ids`` when the message carries them."""
        b = _Builder()
        msgs = list(messages)
        system = None
        if msgs and _get(msgs[0], "role") == "system":
            system = _get(msgs[0], "content")
            msgs = msgs[1:]
        b.add(self.system_ids(system, tools))
        i, k = 0, 0
        while i < len(msgs):
            m = msgs[i]
            role = _get(m, "role")
            if role == "tool":
                j = i
                while j < len(msgs) and _get(msgs[j], "role") == "tool":
                    j += 1
                b.add(self.tool_responses_ids([_get(x, "content") for x in msgs[i:j]]))
                i = j
                continue
            if role == "assistant":
                self._add_assistant(b, m, k)
                k += 1
            elif role in ("user", "system"):
                b.add(self.message_ids(role, _get(m, "content")), hint=1 if _get(m, "is_hint", False) else 0)
            else:
                raise ValueError(f"message {i}: unknown role {role!r}; expected system, user, assistant or tool.")
            i += 1
        return b.build()

    def _add_assistant(self, b: _Builder, m: ChatMessage, k: int) -> None:
        b.header_starts.append(len(b.ids))
        b.add(self.assistant_header, turn=k)
        token_ids, lps = _get(m, "token_ids"), _get(m, "logprobs")
        if token_ids is None:
            body = self.text_ids(_get(m, "content")) + [self.im_end]
            lps = None
        else:
            body = list(token_ids)
            if lps is not None and len(lps) != len(body):
                raise ValueError(f"assistant turn {k}: {len(lps)} logprobs for {len(body)} token_ids; the policy "
                                 "must return one behaviour log-prob per sampled token.")
        end_generated = True
        if not body or body[-1] != self.im_end:
            # The policy's ids stop before <|im_end|>: a truncated turn did not generate it.
            end_generated = not bool(_get(m, "truncated", False))
            body = body + [self.im_end]
            lps = None if lps is None else list(lps) + [math.nan]
        act = [1] * len(body)
        if not end_generated:
            act[-1] = 0
        b.add(body, act=act, turn=k, think=self.think_flags(body), logprobs=lps)
        b.add(self.newline, turn=k)


class _Builder:
    def __init__(self) -> None:
        self.ids: list[int] = []
        self.act: list[int] = []
        self.turn: list[int] = []
        self.think: list[int] = []
        self.hint: list[int] = []
        self.logprobs: list[float] = []
        self.header_starts: list[int] = []

    def add(self, ids: Sequence[int], *, act: Sequence[int] | None = None, turn: int = -1,
            think: Sequence[int] | None = None, hint: int = 0, logprobs: Sequence[float] | None = None) -> None:
        n = len(ids)
        self.ids += list(ids)
        self.act += list(act) if act is not None else [0] * n
        self.turn += [turn] * n
        self.think += list(think) if think is not None else [0] * n
        self.hint += [hint] * n
        self.logprobs += [float(x) for x in logprobs] if logprobs is not None else [math.nan] * n

    def build(self) -> EncodedConversation:
        return EncodedConversation(self.ids, self.act, self.turn, self.think, self.hint, self.logprobs,
                                   self.header_starts)
