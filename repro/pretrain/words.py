"""Made-up words for synthetic documents, split into a training pool and a probe pool that never meet.

Words are pronounceable syllable strings (``vorlak``, ``tesimu``); none is a word the mini world uses (its
repository adjectives, nouns and organisations, or any identifier of a mini template), so a model can only produce
them by copying. A word belongs to the probe pool when the first byte of its sha256 is below ``PROBE_SHARE`` · 256;
training draws reject probe words, so probe sets test copying of words never seen in training.
"""

from __future__ import annotations

import functools
import hashlib
import random
import re
from typing import Literal

Pool = Literal["train", "probe", "known"]

_ONSETS = ("b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "dr", "gl", "kr", "pl",
           "st", "tr", "sk", "sn", "th", "ch", "sh")
_VOWELS = ("a", "e", "i", "o", "u", "ai", "ou", "ei")
_CODAS = ("", "", "", "n", "r", "l", "k", "s", "m", "x")
PROBE_SHARE = 0.125
KNOWN_POOL_SIZE = 48


@functools.lru_cache(maxsize=1)
def world_words() -> frozenset[str]:
    """Every identifier part the mini world uses (names, template modules and functions), lower-cased."""
    from harness.minirepos import render
    from harness.minirepos.templates import all_templates

    parts: set[str] = set()
    for name in render.name_parts():
        parts |= set(re.split(r"[-_]", name))
    for t in all_templates():
        for ident in (t.module, t.key, *t.function_names()):
            parts |= set(ident.lower().split("_")) | {ident.lower()}
    return frozenset(p for p in parts if p)


def pool_of(word: str) -> Literal["train", "probe"]:
    return "probe" if hashlib.sha256(word.encode()).digest()[0] < PROBE_SHARE * 256 else "train"


def _syllables(rng: random.Random, n: int) -> str:
    return "".join(rng.choice(_ONSETS) + rng.choice(_VOWELS) + rng.choice(_CODAS) for _ in range(n))


def make_word(rng: random.Random, pool: Literal["train", "probe"]) -> str:
    """A fresh word of 2-3 syllables from ``pool`` (never a mini-world word)."""
    for _ in range(10_000):
        w = _syllables(rng, rng.choice((2, 2, 3)))
        if 4 <= len(w) <= 12 and w not in world_words() and pool_of(w) == pool:
            return w
    raise RuntimeError("word space exhausted")  # pragma: no cover - 26·8·10 syllables, 2-3 per word


@functools.lru_cache(maxsize=1)
def known_pool() -> tuple[str, ...]:
    """A fixed small pool of training words (stage A1's names): memorisable on purpose."""
    rng = random.Random("tgsuite-known-words")
    out: list[str] = []
    while len(out) < KNOWN_POOL_SIZE:
        w = make_word(rng, "train")
        if w not in out:
            out.append(w)
    return tuple(out)


def draw(rng: random.Random, pool: Pool) -> str:
    """One word: from the fixed known pool, or fresh from the train / probe pool."""
    return rng.choice(known_pool()) if pool == "known" else make_word(rng, pool)
