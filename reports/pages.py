"""The per-episode table and the trajectory pages' view models.

Page policy: a trajectory page is written for every episode when there are at most ``cap`` of them. Above that, a
deterministic stratified sample of ``cap`` episodes gets a page: episodes are grouped by (arm, behaviour × code
cell, failure class) and taken round-robin across groups in sha256 order of their key, so every arm and every
outcome cell has examples and the same inputs always give the same pages. The table lists every episode either
way and says which have no page.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Sequence
from itertools import zip_longest

from harness.schema import EpisodeResult, Message
from reports import format as fmt
from reports.episodes import EpisodeFiles
from reports.judged import unjudged_arms
from reports.model import Cell, DiffLine, EpisodeRow, EpisodesView, KeyValue, MessageView, Table, TrajectoryView

MAX_MESSAGE_CHARS = 20_000
MAX_DIFF_LINES = 5_000
FIRST_ROWS = 50
ROW_FIELDS = ("run", "instance", "repo", "arm", "seed", "attempt", "status", "failure", "resolved", "behaviour",
              "joint", "difficulty", "tier", "link")


def episode_key(ep: EpisodeResult) -> str:
    return f"{ep.run_id}/{ep.instance_id}/{ep.arm}/s{ep.seed}/a{ep.attempt}"


def page_name(ep: EpisodeResult) -> str:
    """A file-system-safe, unique page name (the key's hash keeps it unique after sanitising)."""
    safe = re.sub(r"[^A-Za-z0-9._-]+|\.{2,}", "_", f"{ep.instance_id}__{ep.arm}__s{ep.seed}__a{ep.attempt}")
    safe = safe.lstrip(".-")[:120]
    return f"trajectories/{safe}__{hashlib.sha256(episode_key(ep).encode()).hexdigest()[:10]}.html"


def _cell(ep: EpisodeResult) -> str:
    return f"{ep.arm}|{int(ep.behaviour_ok)}{int(ep.resolved)}|{ep.failure_class}"


def select_pages(episodes: Sequence[EpisodeResult], cap: int) -> set[str]:
    """Keys of the episodes that get a trajectory page (all when ``len <= cap``; see the module docstring)."""
    if len(episodes) <= cap:
        return {episode_key(e) for e in episodes}
    groups: dict[str, list[str]] = {}
    for e in episodes:
        groups.setdefault(_cell(e), []).append(episode_key(e))
    ordered = [sorted(g, key=lambda k: hashlib.sha256(k.encode()).hexdigest()) for _, g in sorted(groups.items())]
    chosen: list[str] = []
    for tier in zip_longest(*ordered):
        chosen += [k for k in tier if k is not None]
        if len(chosen) >= cap:
            break
    return set(chosen[:cap])


def episode_rows(episodes: Iterable[EpisodeResult], paged: set[str]) -> list[EpisodeRow]:
    """Rows of the table; behaviour and joint are None (shown "n/a") for arms that were not judged
    (``reports.judged``: graded patches without a conversation)."""
    eps = list(episodes)
    unjudged = unjudged_arms(eps)
    return [
        EpisodeRow(run=e.run_id, instance=e.instance_id, repo=e.repo, arm=e.arm, seed=e.seed, attempt=e.attempt,
                   status=e.status, failure=e.failure_class, resolved=e.resolved,
                   behaviour=None if e.arm in unjudged else e.behaviour_ok,
                   joint=None if e.arm in unjudged else e.joint_ok, difficulty=e.difficulty, tier=e.template_tier,
                   link=page_name(e) if episode_key(e) in paged else None)
        for e in eps
    ]


def episodes_view(episodes: Sequence[EpisodeResult], paged: set[str], *, cap: int, absent: str = "") -> EpisodesView:
    if not episodes:
        return EpisodesView(available=False, absent=absent or "No run directory was given or found, so there is no "
                            "per-episode table (pass --run-dir RUN_DIR).")
    rows = sorted(episode_rows(episodes, paged), key=lambda r: (r.arm, r.instance, r.seed, r.attempt, r.run))
    counts: dict[tuple[str, str], int] = {}
    for r in rows:
        counts[(r.arm, r.status)] = counts.get((r.arm, r.status), 0) + 1
    arms, statuses = sorted({a for a, _ in counts}), sorted({s for _, s in counts})
    table = Table(id="episode-counts", header=["arm", *statuses, "total"],
                  rows=[[Cell(text=a), *[Cell(text=f"{counts.get((a, s), 0):,}") for s in statuses],
                         Cell(text=f"{sum(counts.get((a, s), 0) for s in statuses):,}")] for a in arms],
                  caption="Episodes per arm and status (counts).")
    policy = (f"Every episode has a trajectory page ({len(paged):,})." if len(paged) == len(rows) else
              f"{len(paged):,} of {len(rows):,} episodes have a trajectory page (cap {cap:,}): a deterministic sample "
              "stratified by arm, behaviour × code cell and failure class. The others are listed without a link.")
    return EpisodesView(
        available=True, n_total=len(rows), n_pages=len(paged), page_policy=policy, first_rows=rows[:FIRST_ROWS],
        rows_json=[[getattr(r, f) for f in ROW_FIELDS] for r in rows],
        counts=table,
    )


def diff_lines(patch: str) -> list[DiffLine]:
    out: list[DiffLine] = []
    lines = patch.splitlines()
    for ln in lines[:MAX_DIFF_LINES]:
        if ln.startswith(("+++", "---", "diff ", "index ", "new file", "deleted file")):
            kind = "meta"
        elif ln.startswith("@@"):
            kind = "hunk"
        elif ln.startswith("+"):
            kind = "add"
        elif ln.startswith("-"):
            kind = "del"
        else:
            kind = "ctx"
        out.append(DiffLine(kind=kind, text=ln))  # type: ignore[arg-type]
    if len(lines) > MAX_DIFF_LINES:
        out.append(DiffLine(kind="meta", text=f"… {len(lines) - MAX_DIFF_LINES:,} more lines not shown"))
    return out


def _messages(messages: Sequence[Message]) -> list[MessageView]:
    return [
        MessageView(
            index=i, role=m.role, turn=m.turn, content=fmt.truncate(m.content, MAX_MESSAGE_CHARS), is_hint=m.is_hint,
            truncated=m.truncated, tool_name=m.tool_name or "", n_lines=m.content.count("\n") + 1,
            tool_calls=[KeyValue(key=tc.name + ("" if tc.valid else f" (invalid: {tc.error or 'unparsed'})"),
                                 value=fmt.truncate(json.dumps(tc.arguments, indent=2, ensure_ascii=False)
                                                    if tc.arguments or not tc.raw else tc.raw, MAX_MESSAGE_CHARS),
                                 tone=None if tc.valid else "fail") for tc in m.tool_calls],
        )
        for i, m in enumerate(messages)
    ]


def _tests_table(ep: EpisodeResult) -> Table | None:
    g = ep.grade
    if g is None or not (g.f2p or g.p2p):
        return None
    tone = {"passed": "pass", "failed": "fail", "error": "fail", "missing": "warn", "skipped": "na"}
    rows = [[Cell(text=group), Cell(text=t), Cell(text=s, tone=tone[s])]  # type: ignore[arg-type]
            for group, d in (("FAIL_TO_PASS", g.f2p), ("PASS_TO_PASS", g.p2p)) for t, s in sorted(d.items())]
    return Table(id="tests", header=["group", "test", "status"], rows=rows)


def trajectory_view(ep: EpisodeResult, files: EpisodeFiles) -> TrajectoryView:
    g = ep.grade
    facts = [("run", ep.run_id), ("instance", ep.instance_id), ("repository", ep.repo), ("arm", ep.arm),
             ("policy", ep.policy), ("seed / attempt", f"{ep.seed} / {ep.attempt}"), ("status", ep.status),
             ("failure class", ep.failure_class), ("difficulty / tier", f"{ep.difficulty} / {ep.template_tier}"),
             ("feedback", ep.feedback_kind or fmt.DASH), ("error", ep.error or fmt.DASH),
             ("turns / tool calls / tokens", f"{ep.metrics.steps} / {ep.metrics.tool_calls} / {ep.metrics.tokens:,}"),
             ("wall time", fmt.duration(ep.metrics.wall_s))]
    kv = [KeyValue(key=k, value=v) for k, v in facts]
    kv += [KeyValue(key=k, value="yes" if v else "no", tone="pass" if v else "fail")
           for k, v in (("code resolved", ep.resolved), ("behaviour OK", ep.behaviour_ok), ("joint OK", ep.joint_ok))]
    grade = [] if g is None else [KeyValue(key=k, value=v) for k, v in (
        ("valid", str(g.valid)), ("reason", g.reason or fmt.DASH), ("exit code", fmt.num(g.exit_code)),
        ("patch applied", str(g.patch_applied)), ("tests touched by the agent", str(g.tests_touched)),
        ("parsed from", g.parse_source), ("grader", g.grader_version), ("duration", fmt.duration(g.duration_s)))]
    behaviour = [Table(id="behaviour-table", header=["checker", "ok", "verdict per assistant turn", "violations"],
                       rows=[[Cell(text=b.checker), Cell(text="yes" if b.ok else "no", tone="pass" if b.ok else "fail"),
                              Cell(text=" ".join(b.turn_verdicts) or fmt.DASH),
                              Cell(text="; ".join(b.violations) or fmt.DASH)] for b in ep.behaviour])] if ep.behaviour else []
    final = files.trajectory.final_message if files.trajectory is not None else None
    return TrajectoryView(
        title=f"{ep.instance_id} · {ep.arm} · seed {ep.seed} · attempt {ep.attempt}", back_href="../index.html#episodes",
        facts=kv, behaviour=behaviour, messages=_messages(files.messages),
        discarded=_messages(files.trajectory.discarded_drafts if files.trajectory is not None else ()),
        trajectory_error=files.trajectory_error,
        final_message=final, diff=diff_lines(files.patch) if files.patch is not None else None, grade=grade,
        tests=_tests_table(ep), logs=[KeyValue(key=k, value=v) for k, v in files.grade_logs],
    )
