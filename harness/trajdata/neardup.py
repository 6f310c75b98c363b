"""Near-duplicate detection: MinHash signatures of word shingles, LSH banding, estimated Jaccard similarity.

A trajectory's text is its non-system messages, ``role: content`` joined, lower-cased and split into word and
punctuation tokens; its shingles are the runs of ``shingle`` consecutive tokens (a text shorter than that is one
shingle). Each shingle is hashed once (blake2b, 8 bytes) and re-mixed with a seeded bijection of the 64-bit integers
(xor a key, multiply by an odd constant, both from ``random.Random(seed)``).

Signature: one-permutation hashing with densification (Li, Owen & Zhang 2012; Shrivastava & Li 2014): the mixed
hash picks one of ``num_perm`` bins (``h mod num_perm``) and the bin keeps the smallest ``h // num_perm``; an empty
bin borrows the value of the next non-empty bin to its right (circularly) plus ``C × distance`` with C above any
value, so two texts agree on it only if they agree on the borrowed bin at the same distance. The share of equal
bins estimates the Jaccard similarity of the shingle sets, as classic k-permutation MinHash does (Broder 1997),
at the cost of ONE hash per shingle instead of ``num_perm`` (``benchmarks/trajdata_filter_bench.py``).

Candidates come from LSH banding (``bands`` bands of ``num_perm / bands`` rows: two texts share a bucket if one band
is identical); for threshold 0.9 with 16 bands × 4 rows a pair of Jaccard 0.9 becomes a candidate with probability
1 − (1 − 0.9⁴)¹⁶ > 0.999 and a pair of Jaccard 0.5 with probability 0.64, then is kept only if its estimated
similarity reaches the threshold. The system prompt is left out: it is the same in every episode of an agent.

References: A. Broder, "On the resemblance and containment of documents", SEQUENCES 1997; P. Li, A. Owen, C.-H. Zhang,
"One permutation hashing", NeurIPS 2012; A. Shrivastava, P. Li, "Densifying one permutation hashing via rotation for
fast near neighbor search", ICML 2014; J. Leskovec, A. Rajaraman, J. Ullman, *Mining of Massive Datasets*, ch. 3.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Sequence

from harness.schema import Message

_M64 = (1 << 64) - 1
_TOKEN = re.compile(r"\w+|[^\w\s]")


def trajectory_text(messages: Sequence[Message]) -> str:
    return "\n".join(f"{m.role}: {m.content}" for m in messages if m.role != "system")


def shingles(text: str, k: int) -> set[int]:
    toks = _TOKEN.findall(text.lower())
    grams = [" ".join(toks[i:i + k]) for i in range(max(1, len(toks) - k + 1))]
    return {int.from_bytes(hashlib.blake2b(g.encode(), digest_size=8).digest(), "big") for g in grams}


def mixer(seed: int) -> tuple[int, int]:
    """The seeded bijection of 64-bit integers: (xor key, odd multiplier)."""
    rng = random.Random(f"minhash:{seed}")
    return rng.getrandbits(64), rng.getrandbits(64) | 1


def signature(shingle_hashes: set[int], num_perm: int, mix: tuple[int, int]) -> tuple[int, ...]:
    """The densified one-permutation MinHash signature (module docstring); ``num_perm`` bins."""
    key, mult = mix
    empty = _M64 + 1
    sig = [empty] * num_perm
    for h in shingle_hashes:
        g = ((h ^ key) * mult) & _M64
        b, v = g % num_perm, g // num_perm
        if v < sig[b]:
            sig[b] = v
    filled = [i for i, v in enumerate(sig) if v != empty]
    if not filled:
        return tuple(sig)
    offset = (_M64 // num_perm) + 2  # above any bin value
    out = list(sig)
    for i in range(num_perm):
        if sig[i] == empty:
            d = next(k for k in range(1, num_perm + 1) if sig[(i + k) % num_perm] != empty)
            out[i] = sig[(i + d) % num_perm] + offset * d
    return tuple(out)


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
    mix = mixer(seed)
    rows = num_perm // bands
    buckets: dict[tuple[int, tuple[int, ...]], list[int]] = {}
    sigs: list[tuple[int, ...]] = []
    dups: dict[int, tuple[int, float]] = {}
    for i, text in enumerate(texts):
        sig = signature(shingles(text, shingle), num_perm, mix)
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
