"""Versioned behaviour checkers, run on the recorded trajectory on the host (deterministic, pure).

Each checker gives an episode verdict and one verdict per assistant turn (``PASS`` / ``FAIL`` / ``NA``, in
assistant-turn order, discarded drafts excluded) as a ``harness.schema.BehaviourResult``. Training uses the
per-turn verdicts to find failing turns (METHOD §6.8); ``verify_turn(message)`` judges one turn alone.

``markdown@v1`` — what is judged: the replies to the user, i.e. for each assistant turn (a) its visible content
(the text outside ``<think>…</think>`` and ``<tool_call>…</tool_call>`` blocks) and (b) the ``message`` of each
valid ``finish`` call in it. Each such piece is judged alone:

- NA if the piece, stripped, is shorter than ``MIN_CHARS`` (40) characters;
- otherwise it FAILS if any of these hold, else PASSES:
  1. a code fence (``` or ~~~) is opened and never closed;
  2. a multi-line code snippet is outside fenced blocks: two or more code-like lines (``CODE_LINE_RES``: Python
     ``def``/``class``/``import``/control-flow lines ending in ``:``, ``return``/``raise``/..., decorators,
     assignments, bare calls, ``$ `` shell and ``>>> `` prompts), consecutive up to blank lines (non-blank
     output lines right after a prompt line belong to the transcript);
  3. it has more than 3 non-blank lines and no Markdown structure: a heading (``# ``…``###### ``), a list item
     (``- `` / ``* `` / ``+ `` / ``1. `` / ``1) ``) or a fenced block;
  4. an identifier or path appears outside backticks and fences: snake_case or SCREAMING_SNAKE names with an
     inner underscore (``parse_args``), dunder names (``__init__``), call forms (``add()``, ``calc.add()``) and
     file paths (a known source/config extension such as ``calc.py``, ``README.md``, or a directory ending in
     ``/`` such as ``src/utils/``). URLs and Markdown link targets are ignored. CamelCase words are not checked
     (they cannot be told apart from product names); ``__text__`` reads as a dunder name, so bold is ``**text**``.
- Turn verdict: FAIL if any piece fails; PASS if some piece is applicable and none fails; NA otherwise.
- Episode: ``ok`` iff no turn FAILS. When there is nothing to judge (every turn NA: no reply of 40 characters or
  more, e.g. a bare "No changes made.") the episode PASSES — compliance by absence. Kept unchanged so that
  recorded results stay reproducible; new task sets use ``markdown@v2``.

``markdown@v2`` — the same per-turn verdicts as ``markdown@v1``; the episode is ``ok`` iff no turn FAILS AND at
least one turn PASSES. When there is nothing to judge (no applicable reply) the episode does NOT comply
(violation ``nothing to judge: ...``): an agent that never wrote the reply the requirement is about has not met
it. ``tool_args@v2`` and ``ask_first@v2`` (``harness.behaviour_tiers``'s checkers) are built the same way:
``v1``'s turn verdicts, and no compliance without a judged turn (no ``edit_file`` call, no file change).

``tool_protocol@v1`` — per turn: FAIL if a tool call is malformed (bad JSON, unknown tool, schema violation),
if a call follows ``finish`` in the same turn, or if the turn comes after a turn that called ``finish``; NA if the
turn has no tool call; else PASS. Episode: ``ok`` iff no turn FAILS and there is exactly one valid ``finish``.
With nothing to judge (no tool call at all) the episode does NOT comply: it has no ``finish``.

``markdown@v2`` / ``tool_protocol@v2`` (issue #13.3: the gate judges replies) — besides the episode rule above
(``markdown@v2``: no compliance by absence), they differ from v1 for a turn that
attempts a tool call and gets it wrong (``call_attempt_error``: a ``<tool_call>`` block that did not parse, or tool
markup / call JSON such as ``{"name": ...`` left in the visible text). Such a turn is not a reply to the user:
``markdown@v2`` does not judge its visible text (its valid ``finish`` messages still are), so a broken tool call is
never a failing Markdown turn; ``tool_protocol@v2`` FAILS it, also when no block parsed at all (v1: NA). v1 stays
registered unchanged, so runs that name it are judged as before. Not covered: a reply that quotes tool-call JSON in
its visible text reads as an attempt too.

``markdown@v3`` — ``markdown@v2`` plus one rule, 5: code outside backticks and fences FAILS also when it is in
quotes or is a call with arguments (``markdown_violations(..., quoted_code=True)``). A quoted span is text after an
opening ``'`` or ``"`` (one that does not follow a letter, digit or quote, so ``don't`` and ``tests'`` open none) up
to the same quote before a non-word character, or to the end of the line when it is never closed (a reply broken
off inside a quote); it is code when it holds a bracket, ``=``, ``<``, ``>``, ``+``, ``*``, ``/``, ``%``, a
`` - `` between spaces, or starts with a Python keyword (``return``, ``if``, ...). ``'B'``, ``"Task finished."`` and
``'grades'`` are not code. A call with arguments is a name directly followed by a bracketed argument list
(``letter(90)``; ``add()`` is rule 4's; the plural ``file(s)`` is not one). Why: under v2 a short reply such as
``Sorry, I changed 'return round((x - 32, 1)`` passed (no bare identifier), and 9 of the 10 held-out episodes per
arm that passed ``markdown@v2`` in the mini run at c5b1a02 were such replies (docs/RESULTS.md, *Run at
c5b1a02 (2026-12-01), and what changed before 8ed4248*). Same hint texts as v1 and v2.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Protocol

from harness.behaviour_tiers import TIER_CHECKERS
from harness.schema import BehaviourResult, Message, Trajectory, Verdict
from harness.tools import visible_text

MIN_CHARS = 40

MARKDOWN_HINT = (
    "Reminder: format your reply to the user in Markdown — structure it with headings or bullet lists, and put "
    "code, commands and file paths in backticks or fenced code blocks."
)
TOOL_PROTOCOL_HINT = (
    "Reminder: write every tool call as <tool_call>{\"name\": ..., \"arguments\": {...}}</tool_call> with valid "
    "JSON and the tool's exact argument names, and end with exactly one finish call and nothing after it."
)


class Checker(Protocol):
    id: str
    hint_text: str
    hint_placement: str  # where the corrective reminder belongs (a harness.feedback Placement)

    def verify_turn(self, message: Message) -> Verdict: ...

    def check(self, trajectory: Trajectory) -> BehaviourResult: ...


def assistant_turns(trajectory: Trajectory) -> list[Message]:
    """The assistant messages of a trajectory, in order (the turns that get verdicts)."""
    return [m for m in trajectory.messages if m.role == "assistant"]


# ----------------------------------------------------------------------------------------------------------------
# markdown@v1 (pure)
# ----------------------------------------------------------------------------------------------------------------

_FENCE_RE = re.compile(r"^\s{0,3}(`{3,}|~{3,})")
_HEADING_RE = re.compile(r"^\s{0,3}#{1,6}\s+\S")
_LIST_RE = re.compile(r"^\s*(?:[-*+]|\d{1,3}[.)])\s+\S")
CODE_LINE_RES: tuple[re.Pattern[str], ...] = tuple(
    re.compile(p)
    for p in (
        r"^\s*(?:async\s+)?(?:def|class)\s+\w+.*:\s*$",
        r"^\s*(?:import\s+[\w.]+|from\s+[\w.]+\s+import\s+\S)",
        r"^\s*(?:if|elif|else|for|while|with|try|except|finally)\b.*:\s*$",
        r"^\s*(?:return|raise|yield|assert)\b(?:\s+\S.*)?$",
        r"^\s*(?:pass|break|continue)\s*$",
        r"^\s*@[A-Za-z_][\w.]*(?:\(.*\))?\s*$",
        r"^\s*[A-Za-z_][\w.]*(?:\[[^\]]*\])?\s*(?:=|\+=|-=|\*=|/=)(?!=)\s*\S",
        r"^\s*[A-Za-z_][\w.]*\(.*\)\s*;?\s*$",
        r"^\s*(?:\$|>>>)\s+\S",
    )
)
_PROMPT_RE = re.compile(r"^\s*(?:\$|>>>)\s+\S")
_INLINE_CODE_RE = re.compile(r"(`+)(?:(?!\1).)+?\1")
_URL_RE = re.compile(r"(?:https?|ftp)://\S+|\]\([^)]*\)")
_EXT = r"(?:py|pyi|pyx|txt|md|rst|toml|cfg|ini|json|ya?ml|sh|lock|csv|ipynb)"
_PATH_RE = re.compile(rf"(?<![\w/.-])(?:(?:[\w.-]+/)*[\w-]+(?:\.[\w-]+)*\.{_EXT}|(?:[\w.-]+/)+)(?![\w/])")
_IDENT_RE = re.compile(
    r"(?<![\w.])(?:[A-Za-z_][\w.]*\(\)|__[A-Za-z]\w*__|_{0,2}[A-Za-z][A-Za-z0-9]*(?:_+[A-Za-z0-9]+)+_{0,2})(?![\w(])"
)


def _is_code_line(line: str) -> bool:
    return any(r.search(line) for r in CODE_LINE_RES)


def _split_fences(lines: list[str]) -> tuple[list[tuple[int, str]], bool, bool]:
    """(lines outside fences with their index, has a fenced block, has an unclosed fence)."""
    outside: list[tuple[int, str]] = []
    fence: str | None = None
    has_block = False
    for i, line in enumerate(lines):
        m = _FENCE_RE.match(line)
        if fence is None:
            if m:
                fence, has_block = m.group(1), True
            else:
                outside.append((i, line))
        elif m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) and not line.strip()[len(m.group(1)) :]:
            fence = None
    return outside, has_block, fence is not None


def _code_runs(lines: list[str], outside: list[tuple[int, str]]) -> list[tuple[int, int]]:
    """Runs (first, last line index) of >= 2 code-like lines outside fences, consecutive up to blank lines."""
    kinds = ["fenced"] * len(lines)
    for idx, line in outside:
        stripped = _INLINE_CODE_RE.sub("", line)
        kinds[idx] = "blank" if not line.strip() else ("code" if _is_code_line(stripped) else "other")
    runs: list[tuple[int, int]] = []
    run: list[int] = []
    after_prompt = False  # output lines right after a `$ ` / `>>> ` prompt belong to the transcript
    for idx, kind in enumerate([*kinds, "other"]):
        if kind == "code":
            run.append(idx)
            after_prompt = _PROMPT_RE.match(lines[idx]) is not None
        elif kind == "blank":
            after_prompt = False
        elif kind == "other" and after_prompt and idx < len(lines):
            continue
        else:
            if len(run) >= 2:
                runs.append((run[0], run[-1]))
            run = []
    return runs


def bare_names(line: str) -> list[str]:
    """Identifiers and paths in ``line`` that are outside inline code spans and URLs (markdown@v1 rule 4)."""
    text = _URL_RE.sub(" ", _INLINE_CODE_RE.sub(" ", line))
    found = [m.group(0) for m in _PATH_RE.finditer(text)]
    found += [m.group(0) for m in _IDENT_RE.finditer(_PATH_RE.sub(" ", text))]
    return found


_QUOTED_RE = re.compile(r"""(?<![\w'"`])(['"])(?=\S)(.+?)(?:\1(?!\w)|$)""")
_CODE_CHARS_RE = re.compile(r"[()\[\]{}=<>+*/%]| - ")
_KEYWORD_START_RE = re.compile(r"^\s*(?:return|if|elif|else|for|while|def|class|import|from|raise|assert|lambda|yield|"
                               r"with|try|except|not|del|pass)\b")
_CALL_ARGS_RE = re.compile(r"(?<![\w.])[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*\((?!e?s\))[^()\s][^()]*\)")  # not hunk(s)


def unfenced_code(line: str) -> list[str]:
    """markdown@v3 rule 5: quoted code and calls with arguments in ``line``, outside inline code spans and URLs."""
    text = _URL_RE.sub(" ", _INLINE_CODE_RE.sub(" ", line))
    found = [m.group(0) for m in _QUOTED_RE.finditer(text)
             if _CODE_CHARS_RE.search(m.group(2)) or _KEYWORD_START_RE.match(m.group(2))]
    found += [m.group(0) for m in _CALL_ARGS_RE.finditer(_QUOTED_RE.sub(" ", text))]
    return found


def markdown_violations(text: str, *, quoted_code: bool = False) -> list[str] | None:
    """markdown@v1 on one reply piece: None when not applicable (NA), else the list of violations (empty = PASS);
    ``quoted_code`` adds markdown@v3's rule 5."""
    stripped = text.strip()
    if len(stripped) < MIN_CHARS:
        return None
    lines = stripped.splitlines()
    outside, has_block, unclosed = _split_fences(lines)
    out: list[str] = []
    if unclosed:
        out.append("a code fence is opened and never closed")
    for a, b in _code_runs(lines, outside):
        out.append(f"multi-line code outside a fenced block (lines {a + 1}-{b + 1})")
    nonblank = [ln for ln in lines if ln.strip()]
    structured = has_block or any(_HEADING_RE.match(ln) or _LIST_RE.match(ln) for _, ln in outside)
    if len(nonblank) > 3 and not structured:
        out.append(f"{len(nonblank)} lines without a heading, list or fenced block")
    names = [n for _, ln in outside for n in bare_names(ln)]
    if names:
        shown = ", ".join(repr(n) for n in dict.fromkeys(names).keys())
        out.append(f"identifiers/paths not in backticks: {shown[:300]}")
    code = [c for _, ln in outside for c in unfenced_code(ln)] if quoted_code else []
    if code:
        shown = ", ".join(c[:60] for c in dict.fromkeys(code).keys())
        out.append(f"code not in backticks or a fenced block: {shown[:300]}")
    return out


def reply_pieces(message: Message) -> list[tuple[str, str]]:
    """What markdown@v1 judges in one assistant turn: [("content", visible text), ("finish", message), ...]."""
    pieces = [("content", visible_text(message.content))]
    for call in message.tool_calls:
        if call.valid and call.name == "finish":
            pieces.append(("finish", str(call.arguments.get("message", ""))))
    return pieces


_CALL_MARKUP_RE = re.compile(r"</?tool_(?:call|response)\b|tool_(?:call|response)>|\{\s*\"(?:name|arguments)\"\s*:")


def call_attempt_error(message: Message) -> str | None:
    """Why an assistant turn is a failed tool-call attempt (see ``markdown@v2``), or None when it is not."""
    bad = [c for c in message.tool_calls if not c.valid]
    if bad:
        return f"malformed tool call ({bad[0].error})"
    found = _CALL_MARKUP_RE.search(visible_text(message.content))
    return None if found is None else f"tool-call text outside a well-formed <tool_call> block: {found.group(0)!r}"


@dataclass(frozen=True)
class MarkdownV1:
    id: str = "markdown@v1"
    hint_text: str = MARKDOWN_HINT
    hint_placement: str = "before_finish"  # the summary is the judged turn
    replies_only: bool = False  # v2: a failed tool-call attempt's visible text is not a reply (not judged)
    quoted_code: bool = False  # v3: rule 5, code in quotes or a call with arguments outside backticks fails

    def turn_violations(self, message: Message) -> list[str] | None:
        """None if no piece of the turn is applicable, else all violations (each prefixed by its piece)."""
        pieces = reply_pieces(message)
        if self.replies_only and call_attempt_error(message) is not None:
            pieces = [p for p in pieces if p[0] != "content"]
        results = [(name, markdown_violations(text, quoted_code=self.quoted_code)) for name, text in pieces]
        applicable = [(name, v) for name, v in results if v is not None]
        if not applicable:
            return None
        return [f"{name}: {v}" for name, vs in applicable for v in vs]

    def verify_turn(self, message: Message) -> Verdict:
        v = self.turn_violations(message)
        return "NA" if v is None else ("FAIL" if v else "PASS")

    def check(self, trajectory: Trajectory) -> BehaviourResult:
        verdicts: list[Verdict] = []
        violations: list[str] = []
        for k, msg in enumerate(assistant_turns(trajectory)):
            v = self.turn_violations(msg)
            verdicts.append("NA" if v is None else ("FAIL" if v else "PASS"))
            violations += [f"turn {k} {x}" for x in v or []]
        ok = "FAIL" not in verdicts
        return BehaviourResult(checker=self.id, ok=ok, turn_verdicts=verdicts, violations=violations)


# ----------------------------------------------------------------------------------------------------------------
# tool_protocol@v1 (pure)
# ----------------------------------------------------------------------------------------------------------------


def _protocol_turn(message: Message, after_finish: bool, attempts: bool = False) -> tuple[Verdict, list[str], int]:
    """(verdict, violations, number of valid finish calls) for one turn; ``attempts`` (v2) also fails a turn whose
    text attempts a tool call outside a well-formed block."""
    calls = message.tool_calls
    out = ["turn after finish"] if after_finish else []
    attempt = call_attempt_error(message) if attempts else None
    if attempt is not None and not any(not c.valid for c in calls):
        out.append(attempt)  # invalid calls are reported below, once
    if not calls:
        return ("FAIL" if out else "NA"), out, 0
    finishes = 0
    for i, call in enumerate(calls):
        if not call.valid:
            out.append(f"call {i} invalid: {call.error}")
        if finishes and i > 0:
            out.append(f"call {i} ({call.name or '?'}) after finish")
        if call.valid and call.name == "finish":
            finishes += 1
    return ("FAIL" if out else "PASS"), out, finishes


@dataclass(frozen=True)
class ToolProtocolV1:
    id: str = "tool_protocol@v1"
    hint_text: str = TOOL_PROTOCOL_HINT
    hint_placement: str = "before_failing_turn"
    attempts: bool = False  # v2: a tool call attempted outside a well-formed block fails the turn

    def verify_turn(self, message: Message) -> Verdict:
        return _protocol_turn(message, after_finish=False, attempts=self.attempts)[0]

    def check(self, trajectory: Trajectory) -> BehaviourResult:
        verdicts: list[Verdict] = []
        violations: list[str] = []
        finishes = 0
        for k, msg in enumerate(assistant_turns(trajectory)):
            verdict, vs, n = _protocol_turn(msg, after_finish=finishes > 0, attempts=self.attempts)
            finishes += n
            verdicts.append(verdict)
            violations += [f"turn {k}: {v}" for v in vs]
        if finishes != 1:
            violations.append("no finish call" if finishes == 0 else f"{finishes} finish calls (exactly one allowed)")
        ok = "FAIL" not in verdicts and finishes == 1
        return BehaviourResult(checker=self.id, ok=ok, turn_verdicts=verdicts, violations=violations)


# ----------------------------------------------------------------------------------------------------------------
# v2: no compliance by absence (pure)
# ----------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class JudgedOnly:
    """A checker's next version: ``base``'s per-turn verdicts and ``verify_turn`` unchanged; the episode is ``ok``
    iff ``base`` says ok AND at least one turn PASSES. With nothing to judge (every turn NA, or no assistant turn)
    the episode does not comply and the violation says what was missing (``absent``)."""

    base: Checker
    id: str
    absent: str

    @property
    def hint_text(self) -> str:
        return self.base.hint_text

    @property
    def hint_placement(self) -> str:
        return self.base.hint_placement

    def verify_turn(self, message: Message) -> Verdict:
        return self.base.verify_turn(message)

    def check(self, trajectory: Trajectory) -> BehaviourResult:
        res = self.base.check(trajectory)
        judged = "PASS" in res.turn_verdicts
        violations = list(res.violations) + ([] if judged or "FAIL" in res.turn_verdicts
                                             else [f"nothing to judge: {self.absent}"])
        return BehaviourResult(checker=self.id, ok=res.ok and judged, turn_verdicts=list(res.turn_verdicts),
                               violations=violations)


def _v2_checkers() -> tuple[JudgedOnly, ...]:
    by_id = {c.id: c for c in TIER_CHECKERS}
    return (
        JudgedOnly(MarkdownV1(id="markdown@v2", replies_only=True), "markdown@v2",
                   f"the episode has no reply to the user of {MIN_CHARS}+ characters"),
        JudgedOnly(MarkdownV1(id="markdown@v3", replies_only=True, quoted_code=True), "markdown@v3",
                   f"the episode has no reply to the user of {MIN_CHARS}+ characters"),
        JudgedOnly(by_id["tool_args@v1"], "tool_args@v2", "the episode has no edit_file call"),
        JudgedOnly(by_id["ask_first@v1"], "ask_first@v2", "the episode changed no file"),
    )


# ----------------------------------------------------------------------------------------------------------------
# Registry
# ----------------------------------------------------------------------------------------------------------------

# tool_args@v1 and ask_first@v1 live in harness.behaviour_tiers (which imports nothing from here: no cycle)
TOOL_PROTOCOL_V2 = ToolProtocolV1(id="tool_protocol@v2", attempts=True)
CHECKERS: dict[str, Checker] = {
    c.id: c for c in (MarkdownV1(), ToolProtocolV1(), TOOL_PROTOCOL_V2, *TIER_CHECKERS, *_v2_checkers())}


def get_checker(checker_id: str) -> Checker:
    """The checker registered as ``checker_id`` (e.g. ``"markdown@v1"``)."""
    try:
        return CHECKERS[checker_id]
    except KeyError:
        raise ValueError(
            f"unknown behaviour checker {checker_id!r}; known: {', '.join(sorted(CHECKERS))}. "
            "Fix the task's 'behaviour' field or the protocol's checker list."
        ) from None


def hint_text(checker_id: str) -> str:
    """The fixed hint (reminder) text for a checker's requirement (METHOD §6.8)."""
    return get_checker(checker_id).hint_text


def turn_verdicts(checker: Checker, messages: list[Message]) -> list[Verdict]:
    """Verdicts of the assistant turns among ``messages``, judged in order WITH the context of earlier turns (what
    ``check`` gives; ``verify_turn`` judges one turn alone, which differs for ``ask_first@v1``: an edit after an
    earlier ask passes). What training's per-turn gating and the ``before_failing_turn`` placement should use."""
    turns = [m for m in messages if m.role == "assistant"]
    return checker.check(Trajectory(instance_id="-", policy="-", seed=0, messages=turns)).turn_verdicts


def check_behaviour(trajectory: Trajectory, checker_ids: list[str]) -> list[BehaviourResult]:
    """Run each named checker on ``trajectory``."""
    return [get_checker(c).check(trajectory) for c in checker_ids]
