"""Targeted guidance at the token-id level (METHOD §6.2–6.3): verdicts → masks, hint splicing, position map.

Input: a trajectory already encoded by ``repro.tokenizer.ChatEncoder`` (ids + per-token flags; assistant bodies are
the sampled ids, never re-tokenised) and one verdict per assistant turn (``"PASS" | "FAIL" | "NA"``, from a harness
behaviour checker). Output: a ``GuidancePlan`` with the student masks ``m_act``, ``m_fail``, ``m_think``, ``m_kl`` and
one or more ``TeacherContext``: teacher ids with the hint block spliced immediately before the assistant header of
each guided turn, truncated after the last guided turn, plus the rows to gather for the KL.

Row convention (causal LM): the distribution over token t comes from the hidden state at t−1. For every KL token t,
``student_rows`` holds t−1 and ``teacher_rows`` holds map(t)−1, where map(t) = t + Σ_{hinted j, header_j ≤ t} |h_j|.
``plan_guidance`` asserts τ̃[map(t)] == τ[t] and map(t)−1 == map(t−1) for every KL token and raises
``SpliceError`` otherwise.

Variants (``GuidanceVariant``):
- ``"failing_turns"`` (arm ``tg``): hints before every FAIL turn, one teacher context, KL on m_fail tokens.
- ``"all_turns"`` (``tg_all_turns``): a hint before every assistant turn and KL on all m_act tokens, verdicts ignored.
- ``"per_turn_ctx"`` (``tg_per_turn_ctx``): one teacher context per FAIL turn with only that turn's hint.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, get_args

from harness.schema import Verdict
from repro.tokenizer import EncodedConversation

if TYPE_CHECKING:
    from repro.config import GuidanceCfg

GuidanceVariant = Literal["failing_turns", "all_turns", "per_turn_ctx"]
HintIds = Sequence[int] | Mapping[int, Sequence[int]]


def guidance_variant(cfg: GuidanceCfg) -> GuidanceVariant:
    """The variant a ``[guidance]`` section selects: ``gating = "all_turns"`` wins over ``per_turn_ctx``."""
    if cfg.gating == "all_turns":
        return "all_turns"
    return "per_turn_ctx" if cfg.per_turn_ctx else "failing_turns"


def guided_turns(verdicts: Sequence[Verdict], variant: GuidanceVariant) -> list[int]:
    """The assistant turns that get a hint (and KL tokens when λ > 0): every turn for ``"all_turns"``, else the
    FAIL turns (``verdicts[k]`` is turn k's verdict)."""
    if variant == "all_turns":
        return list(range(len(verdicts)))
    return [k for k, v in enumerate(verdicts) if v == "FAIL"]


_FINISH_MESSAGE = re.compile(r'<tool_call>\s*\{[^<]*?"name"\s*:\s*"finish"[^<]*?"message"\s*:\s*"', re.DOTALL)
_THINK_END = "</think>"


def behaviour_anchor(text: str) -> int:
    """Where the judged behaviour starts in an assistant turn's text (a character offset): the first character of
    the ``finish`` call's ``message`` (the summary the Markdown checkers judge, ``harness.behaviour``), else the
    first character after the thinking block (the visible reply). The gate diagnostics read the teacher and the
    student at this token (:func:`anchor_token`)."""
    m = _FINISH_MESSAGE.search(text)
    if m is not None:
        return m.end()
    cut = text.find(_THINK_END)
    return 0 if cut < 0 else cut + len(_THINK_END) + (1 if text[cut + len(_THINK_END):].startswith("\n") else 0)


def anchor_token(ids: Sequence[int], offset: int, decode: Callable[[Sequence[int]], str]) -> int | None:
    """Index of the token of ``ids`` (one turn's sampled ids) whose text covers character ``offset`` of the turn's
    decoded text: the first i with len(decode(ids[:i+1])) > offset (binary search); None past the end."""
    if not ids or len(decode(ids)) <= offset:
        return None
    lo, hi = 0, len(ids) - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if len(decode(ids[:mid + 1])) > offset:
            hi = mid
        else:
            lo = mid + 1
    return lo


class SpliceError(AssertionError):
    """The teacher sequence does not reproduce a student KL token at its mapped position."""


@dataclass(frozen=True)
class TeacherContext:
    ids: list[int]            # teacher token ids (hints spliced, truncated after the last guided turn)
    kl_positions: list[int]   # student positions t with m_kl[t] = 1 covered by this context (ascending)
    teacher_positions: list[int]  # map(t) for each of kl_positions
    hint_spans: list[tuple[int, int]]  # [start, end) of each hint block in ``ids``
    turns: list[int]          # the assistant turns guided in this context

    @property
    def student_rows(self) -> list[int]:
        return [t - 1 for t in self.kl_positions]

    @property
    def teacher_rows(self) -> list[int]:
        return [t - 1 for t in self.teacher_positions]


@dataclass(frozen=True)
class GuidancePlan:
    m_act: list[int]
    m_fail: list[int]
    m_think: list[int]
    m_kl: list[int]
    guided_turns: list[int]           # turns with a hint (FAIL turns, or all turns for "all_turns")
    contexts: list[TeacherContext]    # empty when no turn is guided: skip the teacher forward

    @property
    def n_kl(self) -> int:
        return sum(self.m_kl)


def _hint_for(hint_ids: HintIds, k: int) -> list[int]:
    if isinstance(hint_ids, Mapping):
        if k not in hint_ids:
            raise KeyError(f"no hint ids for guided assistant turn {k}; the hints mapping must cover every guided "
                           f"turn (has {sorted(hint_ids)}).")
        h = list(hint_ids[k])
    else:
        h = list(hint_ids)
    if not h:
        raise ValueError(f"empty hint for turn {k}: encode the hint block with ChatEncoder.hint_ids(text).")
    return h


def _turn_end(enc: EncodedConversation, k: int) -> int:
    """One past the last token of assistant turn k."""
    last = max(i for i, tk in enumerate(enc.turn) if tk == k)
    return last + 1


def splice(enc: EncodedConversation, hints: Mapping[int, Sequence[int]], kl_positions: Sequence[int],
           *, truncate_after_turn: int) -> TeacherContext:
    """Insert ``hints[k]`` before the assistant header of each turn k, truncate after ``truncate_after_turn`` and map
    ``kl_positions``. Pure; raises ``SpliceError`` if the mapped teacher ids differ from the student ids."""
    ids, spans, inserts = [], [], []  # inserts: (student position of header, hint length)
    cursor = 0
    for k in sorted(hints):
        pos = enc.header_starts[k]
        ids.extend(enc.ids[cursor:pos])
        start = len(ids)
        ids.extend(hints[k])
        spans.append((start, len(ids)))
        inserts.append((pos, len(hints[k])))
        cursor = pos
    end = _turn_end(enc, truncate_after_turn)
    ids.extend(enc.ids[cursor:end])

    def map_pos(t: int) -> int:
        return t + sum(n for p, n in inserts if p <= t)

    teacher_pos = [map_pos(t) for t in kl_positions]
    for t, mt in zip(kl_positions, teacher_pos, strict=True):
        if t < 1 or mt >= len(ids) or ids[mt] != enc.ids[t] or map_pos(t - 1) != mt - 1:
            raise SpliceError(f"splice check failed at student position {t}: teacher[{mt}] "
                              f"{ids[mt] if mt < len(ids) else 'past end'} != student {enc.ids[t]} (or its "
                              "predecessor was displaced by a hint). KL tokens must lie inside assistant turns, after "
                              "their header.")
        if any(s <= mt < e for s, e in spans):
            raise SpliceError(f"KL token at student position {t} maps into a hint block at teacher position {mt}.")
    return TeacherContext(ids, list(kl_positions), teacher_pos, spans, sorted(hints))


def plan_guidance(enc: EncodedConversation, verdicts: Sequence[Verdict], hint_ids: HintIds, *,
                  variant: GuidanceVariant = "failing_turns", include_thinking: bool = True) -> GuidancePlan:
    """Masks and teacher context(s) for one trajectory (METHOD §6.2–6.3).

    ``verdicts[k]`` is the turn verifier's verdict on assistant turn k (len must equal the number of assistant turns
    in ``enc``). ``hint_ids``: the token ids of the hint block (``ChatEncoder.hint_ids(text)``), or a mapping turn →
    ids when hints differ per turn (noisy-feedback study). ``include_thinking=False`` drops ``<think>`` tokens from
    m_kl (arm ``tg_no_think_kl``).
    """
    n_turns = len(enc.header_starts)
    if len(verdicts) != n_turns:
        raise ValueError(f"{len(verdicts)} verdicts for {n_turns} assistant turns; pass one PASS/FAIL/NA per "
                         "assistant turn, in order (BehaviourResult.turn_verdicts).")
    bad = [v for v in verdicts if v not in ("PASS", "FAIL", "NA")]
    if bad:
        raise ValueError(f"unknown verdicts {bad}; each must be 'PASS', 'FAIL' or 'NA'.")
    if variant not in get_args(GuidanceVariant):
        raise ValueError(f"unknown guidance variant {variant!r}; use failing_turns, all_turns or per_turn_ctx.")
    guided = guided_turns(verdicts, variant)
    gset = set(guided)
    m_act = list(enc.act)
    m_fail = [a if (tk >= 0 and verdicts[tk] == "FAIL") else 0 for a, tk in zip(enc.act, enc.turn, strict=True)]
    m_think = list(enc.think)
    kl_src = [a if tk in gset else 0 for a, tk in zip(enc.act, enc.turn, strict=True)]
    m_kl = [m if (include_thinking or not th) else 0 for m, th in zip(kl_src, m_think, strict=True)]
    contexts: list[TeacherContext] = []
    if guided:
        if variant == "per_turn_ctx":
            for k in guided:
                pos = [t for t, (m, tk) in enumerate(zip(m_kl, enc.turn, strict=True)) if m and tk == k]
                contexts.append(splice(enc, {k: _hint_for(hint_ids, k)}, pos, truncate_after_turn=k))
        else:
            pos = [t for t, m in enumerate(m_kl) if m]
            hints = {k: _hint_for(hint_ids, k) for k in guided}
            contexts.append(splice(enc, hints, pos, truncate_after_turn=max(guided)))
    return GuidancePlan(m_act, m_fail, m_think, m_kl, guided, contexts)
