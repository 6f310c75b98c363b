"""Dataset filters, applied in a fixed order, each counted (``FilterCount``) for the dataset card.

Order (each filter sees what the previous ones kept):

1. ``infra_errors``: the log records an infrastructure error (or an invalid task instance) — not the agent's outcome.
2. ``malformed_tool_calls``: an assistant turn holds a tool call that does not parse or breaks its tool's schema
   (``ToolCall.valid`` false, see ``harness.trajdata.common.normalise_call``).
3. ``truncated``: the episode was cut short: the log says so (a limit, ``finish_reason = length``), the trajectory
   hit a limit (``Trajectory.limit_hit``), or an assistant turn was cut at its token limit (``Message.truncated``).
4. ``leaks`` (needs the task set): a non-assistant message (system, user, tool) shows a line of the hidden tests
   (``test_patch``) or of the gold ``patch`` that the agent had not written itself earlier in the episode, or names a
   hidden test file (one the test patch creates). Lines are compared stripped; only added lines of at least
   ``leak_min_chars`` characters that are not also removed/context lines of the patches (code present at base) count.
   Records of instances the task set does not have are kept and counted as ``unchecked``.
5. ``exact_duplicates``: the same messages (role and content, in order) as an earlier kept record.
6. ``near_duplicates``: estimated Jaccard similarity ≥ ``near_dup_threshold`` to an earlier kept record
   (``harness.trajdata.neardup``: MinHash of ``shingle``-word shingles, seeded with ``seed``). Off when None.
7. ``resolved_only`` (optional): the log says the task was resolved; unknown outcomes are removed too.
8. ``min_reward`` (optional): ``reward_of(record) ≥ min_reward``; ``reward_of`` defaults to the logged reward
   (``RecordOutcome.reward``); records without a reward are removed.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence

from pydantic import BaseModel, ConfigDict, Field

from harness.schema import TaskInstance
from harness.tools import hidden_test_files
from harness.trajdata.neardup import near_duplicates, trajectory_text
from harness.trajdata.schema import FilterCount, TrajectoryRecord

RewardOf = Callable[[TrajectoryRecord], float | None]


class FilterOptions(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    near_dup_threshold: float | None = Field(0.9, gt=0, le=1, description="None = no near-duplicate filter")
    shingle: int = Field(5, ge=1)
    num_perm: int = Field(64, ge=1)
    bands: int = Field(16, ge=1)
    seed: int = 0
    leak_min_chars: int = Field(20, ge=1)
    resolved_only: bool = False
    min_reward: float | None = None


def _count(name: str, desc: str, n_in: int, removed: list[str], params: dict | None = None,
           unchecked: int = 0) -> FilterCount:
    return FilterCount(name=name, description=desc, params=params or {}, n_in=n_in, removed=len(removed),
                       unchecked=unchecked, examples=removed[:5])


def _apply(records: list[TrajectoryRecord], why: Callable[[TrajectoryRecord], str | None]
           ) -> tuple[list[TrajectoryRecord], list[str]]:
    kept, removed = [], []
    for r in records:
        reason = why(r)
        if reason is None:
            kept.append(r)
        else:
            removed.append(f"{r.record_id} ({r.provenance.locator}): {reason}")
    return kept, removed


def _malformed(r: TrajectoryRecord) -> str | None:
    bad = next((c for m in r.trajectory.messages for c in m.tool_calls if not c.valid), None)
    return None if bad is None else f"{bad.name or '(no name)'}: {bad.error}"


def _truncated(r: TrajectoryRecord) -> str | None:
    if r.outcome.truncated:
        return r.outcome.truncated
    if r.trajectory.limit_hit is not None:
        return f"{r.trajectory.limit_hit.kind} limit"
    turn = next((m.turn for m in r.trajectory.messages if m.role == "assistant" and m.truncated), None)
    return None if turn is None else f"assistant turn {turn} cut at its token limit"


def _patch_lines(*patches: str, min_chars: int) -> set[str]:
    added: set[str] = set()
    present: set[str] = set()
    for patch in patches:
        for ln in patch.splitlines():
            if ln.startswith(("+++", "---")):
                continue
            text = ln[1:].strip()
            (added if ln.startswith("+") else present).add(text)
    return {t for t in added - present if len(t) >= min_chars}


def _stripped(text: str) -> set[str]:
    return {ln.strip() for ln in text.splitlines() if ln.strip()}


def leak_reason(record: TrajectoryRecord, instance: TaskInstance, *, min_chars: int = 20) -> str | None:
    """Why the record leaks hidden tests or the gold patch (filter 4 of the module docstring), or None."""
    hidden = _patch_lines(instance.test_patch, instance.patch, min_chars=min_chars)
    files = hidden_test_files(instance)
    written: set[str] = set()
    for i, m in enumerate(record.trajectory.messages):
        lines = _stripped(m.content)
        if m.role == "assistant":  # its text and the string arguments of its calls (JSON-escaped in the text)
            written |= lines.union(*(_stripped(v) for c in m.tool_calls for v in c.arguments.values()
                                     if isinstance(v, str)))
            continue
        shown = sorted((hidden & lines) - written)
        if shown:
            return f"{m.role} message {i} shows hidden line {shown[0][:60]!r}"
        named = sorted(f for f in files if f in m.content and not any(f in w for w in written))
        if named:
            return f"{m.role} message {i} names hidden test file {named[0]}"
    return None


def _content_key(r: TrajectoryRecord) -> str:
    body = json.dumps([(m.role, m.content) for m in r.trajectory.messages], ensure_ascii=False)
    return hashlib.sha256(body.encode()).hexdigest()


def _dedup(records: list[TrajectoryRecord]) -> tuple[list[TrajectoryRecord], list[str]]:
    first: dict[str, str] = {}
    kept, removed = [], []
    for r in records:
        key = _content_key(r)
        if key in first:
            removed.append(f"{r.record_id} ({r.provenance.locator}): same messages as {first[key]}")
        else:
            first[key] = r.record_id
            kept.append(r)
    return kept, removed


def _near(records: list[TrajectoryRecord], o: FilterOptions, threshold: float
          ) -> tuple[list[TrajectoryRecord], list[str]]:
    dups = near_duplicates([trajectory_text(r.trajectory.messages) for r in records], threshold=threshold,
                           shingle=o.shingle, num_perm=o.num_perm, bands=o.bands, seed=o.seed)
    removed = [f"{records[i].record_id} ({records[i].provenance.locator}): similarity {s:.2f} to "
               f"{records[j].record_id}" for i, (j, s) in sorted(dups.items())]
    return [r for i, r in enumerate(records) if i not in dups], removed


def _leaks(records: list[TrajectoryRecord], instances: Mapping[str, TaskInstance], min_chars: int
           ) -> tuple[list[TrajectoryRecord], list[str], int]:
    unchecked = sum(r.trajectory.instance_id not in instances for r in records)
    kept, removed = _apply(records, lambda r: leak_reason(r, instances[r.trajectory.instance_id], min_chars=min_chars)
                           if r.trajectory.instance_id in instances else None)
    return kept, removed, unchecked


def _outcome_filters(records: list[TrajectoryRecord], o: FilterOptions, reward_of: RewardOf | None
                     ) -> tuple[list[TrajectoryRecord], list[FilterCount]]:
    counts = []
    if o.resolved_only:
        n = len(records)
        records, removed = _apply(records, lambda r: None if r.outcome.resolved else
                                  ("outcome unknown" if r.outcome.resolved is None else "not resolved"))
        counts.append(_count("resolved_only", "the log says the task was resolved", n, removed))
    if o.min_reward is not None:
        n, fn = len(records), reward_of or (lambda r: r.outcome.reward)
        thr = o.min_reward

        def low(r: TrajectoryRecord) -> str | None:
            v = fn(r)
            if v is None:
                return "no reward" if reward_of else "no logged reward (to recompute one: --reward-from-arm ARM)"
            return None if v >= thr else f"{'reward' if reward_of else 'logged reward'} {v:.3f} < {thr}"

        records, removed = _apply(records, low)
        counts.append(_count("min_reward", "reward at least min_reward", n, removed, {"min_reward": thr}))
    return records, counts


def apply_filters(records: Sequence[TrajectoryRecord], options: FilterOptions, *,
                  instances: Mapping[str, TaskInstance] | None = None, reward_of: RewardOf | None = None
                  ) -> tuple[list[TrajectoryRecord], list[FilterCount]]:
    """The kept records and one ``FilterCount`` per filter that ran, in order (module docstring)."""
    recs, counts = list(records), []
    steps: list[tuple[str, str, Callable[[TrajectoryRecord], str | None]]] = [
        ("infra_errors", "infrastructure errors / invalid instances", lambda r: r.outcome.infra_error),
        ("malformed_tool_calls", "a tool call that does not parse or breaks its schema", _malformed),
        ("truncated", "episodes cut short by a limit or a truncated turn", _truncated),
    ]
    for name, desc, why in steps:
        n = len(recs)
        recs, removed = _apply(recs, why)
        counts.append(_count(name, desc, n, removed))
    if instances is not None:
        n = len(recs)
        recs, removed, unchecked = _leaks(recs, instances, options.leak_min_chars)
        counts.append(_count("leaks", "context shows hidden tests or the gold patch", n, removed,
                             {"min_chars": options.leak_min_chars}, unchecked))
    n = len(recs)
    recs, removed = _dedup(recs)
    counts.append(_count("exact_duplicates", "identical messages to an earlier record", n, removed))
    if options.near_dup_threshold is not None:
        n = len(recs)
        recs, removed = _near(recs, options, options.near_dup_threshold)
        counts.append(_count("near_duplicates", "MinHash Jaccard similarity to an earlier record", n, removed,
                             {"threshold": options.near_dup_threshold, "shingle": options.shingle,
                              "num_perm": options.num_perm, "bands": options.bands, "seed": options.seed}))
    recs, more = _outcome_filters(recs, options, reward_of)
    return recs, counts + more
