"""Synthetic and world documents → token ids, loss mask, and the token spans that probes score."""

from __future__ import annotations

from dataclasses import dataclass

from repro.pretrain.synthetic import SynthDoc
from repro.tokenizer import ChatEncoder


@dataclass(frozen=True)
class EncodedDoc:
    ids: list[int]
    act: list[int]
    spans: dict[str, tuple[int, int]]   # name -> [start, end) token positions in ids


def _turn_span(enc: ChatEncoder, body_start: int, content: str, start: int, end: int) -> tuple[int, int]:
    offs = enc.tok(content, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    hit = [i for i, (a, b) in enumerate(offs) if a < end and b > start]
    if not hit:
        raise ValueError(f"target span [{start}, {end}) covers no token of {content[:60]!r}")
    return body_start + hit[0], body_start + hit[-1] + 1


def encode_doc(enc: ChatEncoder, doc: SynthDoc, *, tools: list | None = None, all_tokens: bool = False) -> EncodedDoc:
    """Token ids and act mask of ``doc``: token documents as they are; chat documents through ``ChatEncoder``
    (act = assistant tokens, or every token after the first with ``all_tokens``)."""
    if doc.ids:
        return EncodedDoc(list(doc.ids), list(doc.act), {})
    e = enc.encode(list(doc.messages), tools)
    act = [1] * len(e.ids) if all_tokens else list(e.act)
    spans = {}
    assistants = [m for m in doc.messages if m["role"] == "assistant"]
    for name, (turn, s, t) in doc.targets.items():
        body = e.header_starts[turn] + len(enc.assistant_header)
        spans[name] = _turn_span(enc, body, assistants[turn]["content"], s, t)
    return EncodedDoc(list(e.ids), act, spans)
