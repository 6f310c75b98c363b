"""Near-duplicate detection: MinHash signatures of word shingles, LSH banding, estimated Jaccard similarity.

A trajectory's text is its non-system messages, ``role: content`` joined, lower-cased and split into word and
punctuation tokens; its shingles are the runs of ``shingle`` consecutive tokens (a text shorter than that is one
shingle). Each shingle is hashed once (blake2b, 8 bytes); permutation i is ``h_i(x) = (a_i·x + b_i) mod (2^61 − 1)``
with ``a_i, b_i`` drawn from ``random.Random(seed)``, and the signature is the minimum of each ``h_i`` over the
shingles. The share of equal signature entries estimates the Jaccard similarity of the shingle sets (Broder 1997).

Candidates come from LSH banding (``bands`` bands of ``num_perm / bands`` rows: two texts share a bucket if one band
is identical); for threshold 0.9 with 16 bands × 4 rows a pair of Jaccard 0.9 becomes a candidate with probability
1 − (1 − 0.9⁴)¹⁶ > 0.999 and a pair of Jaccard 0.5 with probability 0.64, then is kept only if its estimated
similarity reaches the threshold. The system prompt is left out: it is the same in every episode of an agent.

References: A. Broder, "On the resemblance and containment of documents", SEQUENCES 1997; J. Leskovec, A. Rajaraman,
J. Ullman, *Mining of Massive Datasets*, ch. 3 (banding).
"""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Sequence

from harness.schema import Message

_PRIME = (1 << 61) - 1
_TOKEN = re.compile(r"\w+|[^\w\s]")


def trajectory_text(messages: Sequence[Message]) -> str:
    return "\n".join(f"{m.role}: {m.content}" for m in messages if m.role != "system")


def shingles(text: str, k: int) -> set[int]:
    toks = _TOKEN.findall(text.lower())
    grams = [" ".join(toks[i:i + k]) for i in range(max(1, len(toks) - k + 1))]
    return {int.from_bytes(hashlib.blake2b(g.encode(), digest_size=8).digest(), "big") for g in grams}


def permutations(num_perm: int, seed: int) -> list[tuple[int, int]]:
    rng = random.Random(f"minhash:{seed}")
    return [(rng.randrange(1, _PRIME), rng.randrange(0, _PRIME)) for _ in range(num_perm)]


def signature(shingle_hashes: set[int], perms: Sequence[tuple[int, int]]) -> tuple[int, ...]:
    return tuple(min((a * x + b) % _PRIME for x in shingle_hashes) for a, b in perms)


def similarity(a: Sequence[int], b: Sequence[int]) -> float:
    """Estimated Jaccard similarity: the share of equal signature entries."""
    return sum(x == y for x, y in zip(a, b, strict=True)) / len(a)


def near_duplicates(texts: Sequence[str], *, threshold: float, shingle: int = 5, num_perm: int = 64,
                    bands: int = 16, seed: int = 0) -> dict[int, tuple[int, float]]:
    """{index: (index of the earlier text it duplicates, estimated similarity)} for every text whose estimated
    Jaccard similarity to an earlier *kept* text is ≥ ``threshold`` (the first of a cluster is kept)."""
    if num_perm % bands:
        raise ValueError(f"num_perm ({num_perm}) must be a multiple of bands ({bands})")
    if not 0.0 < threshold <= 1.0:
        raise ValueError(f"near-duplicate threshold must be in (0, 1], got {threshold}")
    perms = permutations(num_perm, seed)
    rows = num_perm // bands
    buckets: dict[tuple[int, tuple[int, ...]], list[int]] = {}
    sigs: list[tuple[int, ...]] = []
    dups: dict[int, tuple[int, float]] = {}
    for i, text in enumerate(texts):
        sig = signature(shingles(text, shingle), perms)
        sigs.append(sig)
        keys = [(b, sig[b * rows:(b + 1) * rows]) for b in range(bands)]
        cands = sorted({j for key in keys for j in buckets.get(key, [])})
        best = max(((similarity(sig, sigs[j]), j) for j in cands), default=(0.0, -1))
        if best[0] >= threshold:
            dups[i] = (best[1], best[0])
            continue
        for key in keys:
            buckets.setdefault(key, []).append(i)
    return dups
