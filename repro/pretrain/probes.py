"""Held-out probes of in-context copying, scored teacher-forced with greedy (argmax) predictions.

Probe sets are drawn once from ``random.Random(f"probe:{seed}:{kind}")`` with the PROBE word pool, whose words
training never draws (``repro.pretrain.words``), and random token runs that training's per-step seeds do not
produce:

- ``induction``: random-token runs repeated once; score = token accuracy on the second copy, its first token
  excluded (nothing in the context predicts where a repeat starts);
- ``path_exact``: synthetic episodes; share whose ``read_file`` path tokens are all predicted exactly;
- ``old_exact``: the same episodes; share whose ``edit_file`` ``old`` line tokens are all predicted exactly.

Teacher-forced "every token of the span is the argmax" is the same event as greedy decoding reproducing the span
after the same prefix, so an exact score is what a temperature-0 sampler would copy.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch

from repro.models import lm_head_weight
from repro.packing import pack, packed_hidden
from repro.precision import Precision, autocast
from repro.pretrain.encode import EncodedDoc, encode_doc
from repro.pretrain.mixture import content_id_range
from repro.pretrain.schema import ProbeScores
from repro.pretrain.synthetic import episode_doc, repeat_doc
from repro.tokenizer import ChatEncoder


@dataclass(frozen=True)
class ProbeSet:
    repeats: list[EncodedDoc]
    episodes: list[EncodedDoc]


def probe_set(enc: ChatEncoder, *, seed: int, n: int) -> ProbeSet:
    lo, hi = content_id_range(enc)
    r_rep = random.Random(f"probe:{seed}:repeat")
    r_ep = random.Random(f"probe:{seed}:episode")
    reps = [encode_doc(enc, repeat_doc(r_rep, lo_id=lo, hi_id=hi)) for _ in range(n)]
    eps = [encode_doc(enc, episode_doc(r_ep, "probe")) for _ in range(n)]
    return ProbeSet(reps, eps)


def _spans(doc: EncodedDoc, kind: str) -> dict[str, tuple[int, int]]:
    if kind == "repeat":
        half = len(doc.ids) // 2
        return {"induction": (half + 1, len(doc.ids))}
    return dict(doc.spans)


@torch.no_grad()
def _correct(model: torch.nn.Module, docs: list[EncodedDoc], kind: str, precision: Precision,
             chunk_tokens: int) -> dict[str, list[tuple[int, int, float]]]:
    """name -> per document (correct tokens, span tokens, Σ NLL over the span)."""
    out: dict[str, list[tuple[int, int, float]]] = {}
    i = 0
    while i < len(docs):
        group, size = [], 0
        while i < len(docs) and (not group or size + len(docs[i].ids) <= chunk_tokens):
            group.append(docs[i])
            size += len(docs[i].ids)
            i += 1
        batch = pack([(d.ids, [0] * len(d.ids)) for d in group])
        with autocast(precision):
            h = packed_hidden(model, batch)[0]
        w = lm_head_weight(model)
        for d, start in zip(group, batch.cu_seqlens, strict=False):
            for name, (a, b) in _spans(d, kind).items():
                pos = torch.arange(start + a - 1, start + b - 1)
                logits = (h[pos].float() @ w.float().T)
                tgt = torch.tensor(d.ids[a:b])
                lp = torch.log_softmax(logits, -1).gather(-1, tgt[:, None])[:, 0]
                out.setdefault(name, []).append((int((logits.argmax(-1) == tgt).sum()), b - a, float(-lp.sum())))
    return out


def run_probes(model: torch.nn.Module, probes: ProbeSet, *, step: int, tokens_seen: int, precision: Precision,
               chunk_tokens: int = 16384) -> ProbeScores:
    """Score ``model`` on ``probes`` (eval mode for the duration; restored after)."""
    was = model.training
    model.eval()
    try:
        res = _correct(model, probes.repeats, "repeat", precision, chunk_tokens)
        res |= _correct(model, probes.episodes, "episode", precision, chunk_tokens)
    finally:
        model.train(was)
    ind = res["induction"]
    exact = {k: sum(c == n for c, n, _ in v) / len(v) for k, v in res.items()}
    loss = {k: sum(x for _, _, x in v) / max(1, sum(n for _, n, _ in v)) for k, v in res.items()}
    return ProbeScores(step=step, tokens_seen=tokens_seen,
                       induction=sum(c for c, _, _ in ind) / max(1, sum(n for _, n, _ in ind)),
                       path_exact=exact["path"], old_exact=exact["old"], loss=loss)
