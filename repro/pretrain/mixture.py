"""The batch of a step: a pure function of (config, step), so a resumed run sees exactly the same data.

A stage's ``mix`` weights are token shares: kind ``k`` gets ``round(batch_tokens · w_k / Σw)`` tokens, filled with
whole documents drawn from ``random.Random(f"pretrain:{seed}:{stage}:{step}:{kind}")`` (the last one may overshoot by
less than one document). Kinds: the synthetic ones of ``repro.pretrain.synthetic`` (``episode_known`` = episodes
with names from the known pool; ``episode``/``kv``/``line`` use fresh training-pool words) and ``world``
(``repro.pretrain.world``, the mini world's train split).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from repro.pretrain.encode import EncodedDoc, encode_doc
from repro.pretrain.schema import PretrainConfig
from repro.pretrain.synthetic import make_doc
from repro.tokenizer import MARKUP_TOKENS, SPECIAL_TOKENS, ChatEncoder

WorldSampler = Callable[[random.Random], EncodedDoc]


@dataclass(frozen=True)
class StepBatch:
    docs: list[EncodedDoc]
    kinds: list[str]          # one per document


def content_id_range(enc: ChatEncoder) -> tuple[int, int]:
    """[lo, hi) of ordinary token ids (no special or markup token) for random-token documents."""
    lo = len(SPECIAL_TOKENS)
    hi = len(enc.tok) - len(MARKUP_TOKENS)
    return lo, hi


def synth_encoded(kind: str, rng: random.Random, enc: ChatEncoder, *, pool: str = "train") -> EncodedDoc:
    lo, hi = content_id_range(enc)
    if kind == "episode_known":
        return encode_doc(enc, make_doc("episode", rng, "known", lo_id=lo, hi_id=hi))
    return encode_doc(enc, make_doc(kind, rng, pool, lo_id=lo, hi_id=hi))  # type: ignore[arg-type]


def step_batch(cfg: PretrainConfig, step: int, enc: ChatEncoder, world: WorldSampler | None) -> StepBatch:
    """The documents of optimizer step ``step`` (0-based)."""
    stage = cfg.stage_at(step)
    total = sum(stage.mix.values())
    docs: list[EncodedDoc] = []
    kinds: list[str] = []
    for kind, w in sorted(stage.mix.items()):
        quota = round(cfg.batch_tokens * w / total)
        rng = random.Random(f"pretrain:{cfg.seed}:{stage.name}:{step}:{kind}")
        got = 0
        while got < quota:
            if kind == "world":
                if world is None:
                    raise RuntimeError("stage with world documents but no world corpus was loaded.")
                d = world(rng)
            else:
                d = synth_encoded(kind, rng, enc)
            d = EncodedDoc(d.ids[: cfg.max_doc_len], d.act[: cfg.max_doc_len], d.spans)
            docs.append(d)
            kinds.append(kind)
            got += len(d.ids)
    return StepBatch(docs, kinds)
