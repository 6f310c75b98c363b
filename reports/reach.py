""""What the episodes reached": can this evaluation answer its question at all? (See ``INTRO``.)"""

from __future__ import annotations

from collections.abc import Sequence

from harness.schema import EpisodeResult
from reports.judged import unjudged_arms
from reports.model import Cell, Section, Table

INTRO_PAPER = (
    "The paper's behaviour is a property of the agent's reply to the user (its finish summary). When the models "
    "rarely reach that turn, or rarely solve anything, both arms score about zero on both endpoints and the verdict "
    "says nothing about targeted guidance. ")
INTRO_COUNTS = (
    "This panel counts, per arm and from the episodes' own result files (no statistics): how many episodes ended "
    "with a reply (finish) and how many at a limit, how many turns the behaviour checkers judged and passed, and "
    "how many tasks were resolved; and it says in words when the counts leave the question unanswered.")
INTRO_HEAD = "The verdict compares rates; it cannot say whether the episodes ever got to the point the question is about. "
INTRO = INTRO_HEAD + INTRO_PAPER + INTRO_COUNTS
LIMITS = ("limit_turns", "limit_tokens", "limit_time", "limit_context")
FEW = 0.2  # "most episodes" below this share; a wording threshold for the notes, never a criterion
NEAR_ZERO = 0.05  # "near zero" below this share (same: wording only)


def _share(k: int, n: int) -> str:
    return f"{k:,} / {n:,} ({100 * k / n:.0f}%)" if n else "0 / 0"


def reach_section(eps: Sequence[EpisodeResult], *, paper: bool = True) -> Section:
    """The panel; ``paper``: the plan asks the paper's question (TG vs GRPO), so the closing note may say that the
    verdict does not answer it. Arms without a conversation (``reports.judged``) are left out, with a note."""
    unjudged = unjudged_arms(eps)
    scored = [e for e in eps if e.scored and e.arm not in unjudged]
    if not scored:
        why = ("Only graded patches without a conversation: there is no episode to follow." if unjudged else
               "No scored episodes were found next to the analysis (pass the run directories).")
        return Section(id="reach", title="What the episodes reached", available=False, absent=why)
    arms = sorted({e.arm for e in scored}, key=lambda a: (a.split("@")[0] != "base", a))
    checkers = sorted({b.checker for e in scored for b in e.behaviour})
    rows, notes = [], []
    tot = {"n": 0, "reply": 0, "resolved": 0, "md_judged": 0, "md_turns": 0}
    md_id = "markdown@v1"
    for arm in arms:
        es = [e for e in scored if e.arm == arm]
        reply = sum(e.status not in LIMITS and e.status != "protocol_violation" for e in es)
        limit = sum(e.status in LIMITS for e in es)
        resolved = sum(e.resolved for e in es)
        per_checker = []
        for c in checkers:
            vs = [v for e in es for b in e.behaviour if b.checker == c for v in b.turn_verdicts]
            judged, passed = sum(v != "NA" for v in vs), sum(v == "PASS" for v in vs)
            per_checker.append(Cell(text=f"{passed:,} / {judged:,} (of {len(vs):,} turns)"))
            if c.startswith("markdown@"):  # v2 and v3 judge the same turns; v3 passes fewer
                md_id = c
                tot["md_judged"] += judged
                tot["md_turns"] += len(vs)
        rows.append([Cell(text=arm), Cell(text=f"{len(es):,}"), Cell(text=_share(reply, len(es))),
                     Cell(text=_share(limit, len(es))), *per_checker, Cell(text=_share(resolved, len(es)))])
        for k, v in (("n", len(es)), ("reply", reply), ("resolved", resolved)):
            tot[k] += v
    n = tot["n"]
    if tot["reply"] < FEW * n:
        notes.append(f"Only {tot['reply']:,} of {n:,} episodes ended with a reply to the user (finish); the others "
                     "stopped at a limit.")
        if "tool_protocol@v1" in checkers:
            notes.append("An episode's behaviour is OK only if tool_protocol@v1 passes too, and it requires exactly "
                         "one valid finish: every episode that stopped at a limit fails the behaviour endpoint for "
                         "that reason alone.")
        if tot["md_judged"] > 2 * max(1, tot["reply"]):
            notes.append(
                f"{md_id} judged {tot['md_judged']:,} of {tot['md_turns']:,} turns (not NA): it judges any "
                "visible text of 40 characters or more outside well-formed tool calls, and a model that cannot yet "
                "write its tool calls produces such text. The behaviour endpoint here therefore reflects those "
                "turns, not the style of the replies to the user that the paper judges.")
    share = f"{tot['resolved']:,} of {n:,} episodes ({tot['resolved'] / max(1, n):.0%})"
    if tot["resolved"] < NEAR_ZERO * n:
        notes.append(f"Only {share} resolved their task. With coding success near zero in every arm, 'coding held' "
                     "is met trivially and says nothing about whether "
                     + ("targeted guidance protects it." if paper else "the treatment protects it."))
    elif tot["resolved"] < FEW * n:
        notes.append(f"Only {share} resolved their task: the coding comparison rests on those few successes.")
    if notes and paper:
        why = ("models that cannot yet do the tasks" if tot["resolved"] < NEAR_ZERO * n
               else "models that rarely reach the reply the question is about")
        notes.append("In this state the verdict does not answer the paper's question (does TG teach the behaviour "
                     f"while coding holds?): it is the honest result of {why}. docs/RESULTS.md (the mini reproduction, "
                     "run by run) gives the measurements and the reasons.")
    if unjudged:
        notes.append(f"{', '.join(sorted(unjudged))}: not listed (graded patches without a conversation).")
    table = Table(
        id="reach-table",
        header=["arm", "episodes", "ended with a reply (finish)", "stopped at a limit",
                *[f"{c}: turns passed / judged" for c in checkers], "resolved"],
        rows=rows,
        caption="Counted from the episodes' result files (scored episodes only). A turn is judged when a behaviour "
                "checker applies to it (NA otherwise); an episode's behaviour is OK when none of its judged turns "
                "failed.")
    return Section(id="reach", title="What the episodes reached",
                   intro=INTRO if paper else INTRO_HEAD + INTRO_COUNTS,
                   tables=[table], notes=notes)
