"""P(heading): how likely a model is to open its ``finish`` message with a Markdown heading, at held-out finish
contexts, unprompted and with the hint (the teacher's view). A token-level probe of the behaviour targeted guidance
teaches (the KL-direction study, ``tgsuite.pipeline.kl_study``).

A finish context (:func:`finish_context`) is a finished episode cut right where its ``finish`` call's ``message``
starts (``repro.guidance.behaviour_anchor``): the conversation before the finish turn, encoded as training encodes
it (``repro.tokenizer.ChatEncoder`` with the tool schemas), the assistant header, and the finish turn's tokens
before the token that carries the message's opening quote. That token may carry the message's first characters too:
the mini tokenizer writes ``"message": "## Summary`` as ``":``, `` "##``, `` Summary`` but ``"message": "The`` as
``":``, `` "``, ``The`` (its pre-tokenizer keeps a quote with the punctuation after it, never with letters), so a
cut after `` "`` would condition on the plain path and miss `` "##``. The context therefore ends before that token
and ``rest`` keeps the characters between the cut and the message (here `` "``). The hinted view inserts the hint
block before the finish turn's assistant header, exactly where the teacher's view splices it
(``repro.guidance.splice``).

:func:`heading_probability` is then the model's probability that the continuation's text is ``rest`` followed by
``#``: the sum over token paths, i.e. tokens whose text starts with ``rest + "#"`` plus, for each token whose text
is a proper prefix of ``rest`` (e.g. `` "`` alone), its probability times the same sum one token further. Paths
whose probability falls below ``floor`` are not followed (they add less than ``floor`` each). With ``rest`` empty
this is the sum over vocabulary tokens whose text starts with ``#``.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from harness.tools import parse_tool_calls
from repro.guidance import anchor_token, behaviour_anchor
from repro.tokenizer import ChatEncoder, ChatMessage

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

HEADING = "#"


@dataclass(frozen=True)
class FinishContext:
    """One held-out finish context: the ids before the cut, unprompted and hinted, and the text between the cut and
    the first character of the finish message."""

    instance_id: str
    ids: list[int]
    hinted_ids: list[int]
    rest: str

    def to_json(self) -> dict[str, Any]:
        return {"instance_id": self.instance_id, "ids": self.ids, "hinted_ids": self.hinted_ids, "rest": self.rest}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> FinishContext:
        return cls(str(d["instance_id"]), [int(i) for i in d["ids"]], [int(i) for i in d["hinted_ids"]], str(d["rest"]))


def _role(m: ChatMessage) -> str:
    return m["role"] if isinstance(m, dict) else m.role


def _content(m: ChatMessage) -> str:
    return m["content"] if isinstance(m, dict) else m.content


def finish_turn(messages: Sequence[ChatMessage]) -> int | None:
    """Index (in ``messages``) of the first assistant message with a valid ``finish`` call that has a message
    (``harness.tools.parse_tool_calls``)."""
    for i, m in enumerate(messages):
        if _role(m) == "assistant" and any(c.valid and c.name == "finish" and "message" in c.arguments
                                           for c in parse_tool_calls(_content(m))):
            return i
    return None


def finish_context(instance_id: str, messages: Sequence[ChatMessage], encoder: ChatEncoder, tools: list[dict[str, Any]],
                   hint_text: str) -> FinishContext:
    """The finish context of one episode (module docstring); ``messages`` are harness ``Message`` objects or dicts
    with ``role`` / ``content``. Raises ValueError when the episode has no finish call with a message."""
    k = finish_turn(messages)
    if k is None:
        raise ValueError(f"{instance_id}: no assistant turn with a finish call and a message; only finished episodes "
                         "give a finish context")
    text = _content(messages[k])
    offset = behaviour_anchor(text)
    if not 0 < offset < len(text) or text[offset - 1] != '"':
        raise ValueError(f"{instance_id}: repro.guidance.behaviour_anchor did not find the finish message's opening "
                         f"quote in the finish turn (offset {offset}); the probe cuts there")
    body = encoder.text_ids(text)
    decode = encoder.tok.decode
    if decode(body) != text:
        raise ValueError(f"{instance_id}: the tokenizer does not decode the finish turn back to its text; the probe "
                         "needs a lossless byte-level tokenizer (repro.tokenizer.train_tokenizer)")
    cut = anchor_token(body, offset - 1, decode)  # the token that carries the message's opening quote
    assert cut is not None  # offset - 1 < len(text)
    head = [dict(role=_role(m), content=_content(m)) for m in messages[:k]]
    before = encoder.encode(head, tools).ids
    turn = encoder.assistant_header + body[:cut]
    rest = text[len(decode(body[:cut])):offset]
    return FinishContext(instance_id, before + turn, before + encoder.hint_ids(hint_text) + turn, rest)


class HeadingVocab:
    """The vocabulary's token texts, and per ``rest`` string the tokens that complete or continue it."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase) -> None:
        self.texts = [tokenizer.decode([i]) for i in range(len(tokenizer))]
        self._cache: dict[str, tuple[list[int], list[tuple[int, str]]]] = {}

    def split(self, rest: str) -> tuple[list[int], list[tuple[int, str]]]:
        """(tokens whose text starts with ``rest + "#"``, [(token, what remains of ``rest``) for tokens whose text is
        a non-empty proper-or-whole prefix of ``rest``])."""
        if rest not in self._cache:
            target = rest + HEADING
            direct = [i for i, t in enumerate(self.texts) if t.startswith(target)]
            partial = [(i, rest[len(t):]) for i, t in enumerate(self.texts) if t and rest.startswith(t)]
            self._cache[rest] = (direct, partial)
        return self._cache[rest]


def heading_probability(next_probs: Callable[[list[int]], torch.Tensor], vocab: HeadingVocab, ids: list[int],
                        rest: str, *, floor: float = 1e-9) -> float:
    """P(the continuation of ``ids`` starts with ``rest + "#"``) (module docstring). ``next_probs(ids)`` is the
    model's next-token distribution after ``ids`` (a 1-d tensor over the vocabulary)."""

    def walk(ctx: list[int], rest: str, weight: float) -> float:
        p = next_probs(ctx)
        direct, partial = vocab.split(rest)
        total = float(p[direct].sum()) if direct else 0.0
        for tok, remaining in partial:
            w = weight * float(p[tok])
            if w >= floor:
                total += float(p[tok]) * walk([*ctx, tok], remaining, w)
        return total

    return walk(list(ids), rest, 1.0)


class PrefixLM:
    """``next_probs`` of a causal LM (float32 softmax of the last position's logits, no gradient) that runs a shared
    prefix once: after :meth:`set_prefix`, a call whose ids extend that prefix runs only the extension on the
    prefix's KV cache (cropped back to the prefix after each call); any other call runs in full."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model
        self.device = next(model.parameters()).device
        self.prefix: list[int] = []
        self.cache: Any = None
        # transformers >= 5.x names the KV cache argument ``cache`` (``past_key_values`` is deprecated there)
        self.cache_kw = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"

    @torch.no_grad()
    def set_prefix(self, ids: list[int]) -> None:
        from transformers import DynamicCache

        self.prefix, self.cache = list(ids), DynamicCache()
        if ids:
            self.model(torch.tensor([ids], device=self.device), use_cache=True, **{self.cache_kw: self.cache})

    @torch.no_grad()
    def __call__(self, ids: list[int]) -> torch.Tensor:
        n = len(self.prefix)
        if n and len(ids) > n and ids[:n] == self.prefix:
            out = self.model(torch.tensor([ids[n:]], device=self.device), use_cache=True, **{self.cache_kw: self.cache})
            self.cache.crop(-(len(ids) - n))  # a negative count removes tokens
        else:
            out = self.model(torch.tensor([ids], device=self.device), use_cache=False)
        return torch.softmax(out.logits[0, -1].float(), -1).cpu()


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def probe_headings(model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase, contexts: Sequence[FinishContext], *,
                   floor: float = 1e-9) -> dict[str, Any]:
    """P(heading) of ``model`` at every context, unprompted and hinted: per-context values and their mean,
    geometric mean (the values span orders of magnitude) and max. The conversation both views share (everything
    before the hint) runs once per context (:class:`PrefixLM`)."""
    if not contexts:
        raise ValueError("probe_headings: no finish contexts; build them from finished episodes first")
    was_training = model.training
    model.eval()
    vocab, lm = HeadingVocab(tokenizer), PrefixLM(model)
    vals: dict[str, list[float]] = {"unprompted": [], "hinted": []}
    for c in contexts:
        lm.set_prefix(c.ids[:min(_common_prefix(c.ids, c.hinted_ids), len(c.ids) - 1, len(c.hinted_ids) - 1)])
        vals["unprompted"].append(heading_probability(lm, vocab, c.ids, c.rest, floor=floor))
        vals["hinted"].append(heading_probability(lm, vocab, c.hinted_ids, c.rest, floor=floor))
    model.train(was_training)
    out: dict[str, Any] = {"n": len(contexts), "floor": floor}
    for view, v in vals.items():
        out[view] = {"values": v, "mean": sum(v) / len(v), "max": max(v),
                     "geomean": math.exp(sum(math.log(max(x, 1e-30)) for x in v) / len(v))}
    return out
