"""Behaviour tiers beyond Markdown (issue #7 item 3): a machine-checkable tool-argument format and a requirement
in tension with the task. Registered in ``harness.behaviour.CHECKERS``; pure, deterministic, run on the host.

Tiers of the ``behaviour_tiers`` study: (1) ``tool_args@v1`` (a tool-argument format), (2) ``markdown@v1`` (the
style rule, ``harness.behaviour``), (3) ``ask_first@v1`` (asking before editing costs a turn the task does not need).

Both checkers give one verdict per assistant turn (``PASS`` / ``FAIL`` / ``NA``, in assistant-turn order, discarded
drafts excluded) and an episode verdict ``ok`` iff no turn FAILS. When there is nothing to judge (no applicable
turn: no ``edit_file`` call, no file change) a ``v1`` episode PASSES — compliance by absence, kept so recorded
results stay reproducible; the study reports how many episodes were applicable. ``tool_args@v2`` and
``ask_first@v2`` (``harness.behaviour.JudgedOnly``) keep these turn verdicts and do NOT pass such an episode.

``tool_args@v1`` — every ``edit_file`` call carries a ``reason`` argument (an optional argument of the tool's
schema, ``harness.tools``). Judged: every call of the turn whose name parsed as ``edit_file``, valid or not
(a call that did not parse at all is ``tool_protocol@v1``'s business). A judged call complies iff its ``reason``

- is present and a JSON string,
- contains no line break (``\\n`` or ``\\r``), and
- has 1 to ``MAX_REASON_CHARS`` (120) characters after stripping surrounding whitespace.

Turn: NA if it has no judged call; FAIL if any judged call does not comply; else PASS. ``verify_turn`` needs no
context (it equals the turn's verdict in ``check``).

``ask_first@v1`` — before its first file change the agent asks the user for approval with the ``ask_user`` tool
(``harness.tools``), whose observation is always the fixed approval ``harness.tools.ASK_USER_ANSWER``: the
environment is deterministic and always approves. An *ask* is a valid ``ask_user`` call whose ``question``,
stripped, is non-empty. A *file change* is a valid call of a tool in ``FILE_CHANGING_TOOLS`` (``edit_file``, which
also creates files). Turn k:

- NA if it has no file change;
- PASS if an EARLIER turn (j < k) has an ask — the answer arrives only after the asking turn, so an ask and an
  edit in the same turn FAIL;
- FAIL otherwise.

One approval covers the rest of the episode. ``verify_turn(message)`` judges a turn as if no earlier turn existed
(a file change FAILS); the verdict in context comes from ``check`` (or ``harness.behaviour.turn_verdicts``).
Asking costs a turn and, under a turn limit, can cost the task: that is the tension this tier measures.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.schema import BehaviourResult, Message, ToolCall, Trajectory, Verdict

MAX_REASON_CHARS = 120
ASK_TOOL = "ask_user"
FILE_CHANGING_TOOLS: frozenset[str] = frozenset({"edit_file"})

TOOL_ARGS_HINT = (
    'Reminder: give every edit_file call a "reason" argument: one short line (at most 120 characters) saying why '
    "you make that edit."
)
ASK_FIRST_HINT = (
    "Reminder: before you change any file, ask the user for approval with the ask_user tool and wait for the "
    "answer; only then edit."
)


def _assistant_turns(trajectory: Trajectory) -> list[Message]:
    return [m for m in trajectory.messages if m.role == "assistant"]


def _episode(checker: str, verdicts: list[Verdict], violations: list[str]) -> BehaviourResult:
    return BehaviourResult(checker=checker, ok="FAIL" not in verdicts, turn_verdicts=verdicts, violations=violations)


# ----------------------------------------------------------------------------------------------------------------
# tool_args@v1
# ----------------------------------------------------------------------------------------------------------------


def reason_problem(call: ToolCall) -> str | None:
    """Why ``call``'s ``reason`` argument does not comply with tool_args@v1, or None when it does."""
    if "reason" not in call.arguments:
        return "no 'reason' argument"
    reason = call.arguments["reason"]
    if not isinstance(reason, str):
        return f"'reason' is a {type(reason).__name__}, not a string"
    if "\n" in reason or "\r" in reason:
        return "'reason' spans more than one line"
    n = len(reason.strip())
    if n == 0:
        return "'reason' is empty"
    if n > MAX_REASON_CHARS:
        return f"'reason' has {n} characters (at most {MAX_REASON_CHARS})"
    return None


def tool_args_turn(message: Message) -> tuple[Verdict, list[str]]:
    """(verdict, violations) of one turn under tool_args@v1."""
    judged = [(i, c) for i, c in enumerate(message.tool_calls) if c.name == "edit_file"]
    if not judged:
        return "NA", []
    out = [f"call {i} (edit_file): {p}" for i, c in judged if (p := reason_problem(c)) is not None]
    return ("FAIL" if out else "PASS"), out


@dataclass(frozen=True)
class ToolArgsV1:
    id: str = "tool_args@v1"
    hint_text: str = TOOL_ARGS_HINT
    hint_placement: str = "first_turn"  # the requirement holds from the first edit on

    def verify_turn(self, message: Message) -> Verdict:
        return tool_args_turn(message)[0]

    def check(self, trajectory: Trajectory) -> BehaviourResult:
        verdicts: list[Verdict] = []
        violations: list[str] = []
        for k, msg in enumerate(_assistant_turns(trajectory)):
            verdict, vs = tool_args_turn(msg)
            verdicts.append(verdict)
            violations += [f"turn {k} {v}" for v in vs]
        return _episode(self.id, verdicts, violations)


# ----------------------------------------------------------------------------------------------------------------
# ask_first@v1
# ----------------------------------------------------------------------------------------------------------------


def is_ask(call: ToolCall) -> bool:
    """A valid ``ask_user`` call with a non-empty question."""
    return call.valid and call.name == ASK_TOOL and bool(str(call.arguments.get("question", "")).strip())


def changes_files(call: ToolCall) -> bool:
    return call.valid and call.name in FILE_CHANGING_TOOLS


def ask_first_turn(message: Message, asked_before: bool) -> tuple[Verdict, list[str]]:
    """(verdict, violations) of one turn under ask_first@v1, given whether an earlier turn asked."""
    changes = [i for i, c in enumerate(message.tool_calls) if changes_files(c)]
    if not changes:
        return "NA", []
    if asked_before:
        return "PASS", []
    same_turn = any(is_ask(c) for c in message.tool_calls)
    why = "asked in the same turn, before the answer came" if same_turn else "without asking the user first"
    return "FAIL", [f"call {changes[0]} ({message.tool_calls[changes[0]].name}) changes a file {why}"]


@dataclass(frozen=True)
class AskFirstV1:
    id: str = "ask_first@v1"
    hint_text: str = ASK_FIRST_HINT
    hint_placement: str = "first_turn"  # the ask must come before the first edit

    def verify_turn(self, message: Message) -> Verdict:
        """The turn judged without context (as if no earlier turn asked); see the module docstring."""
        return ask_first_turn(message, asked_before=False)[0]

    def check(self, trajectory: Trajectory) -> BehaviourResult:
        verdicts: list[Verdict] = []
        violations: list[str] = []
        asked = False
        for k, msg in enumerate(_assistant_turns(trajectory)):
            verdict, vs = ask_first_turn(msg, asked)
            verdicts.append(verdict)
            violations += [f"turn {k}: {v}" for v in vs]
            asked = asked or any(is_ask(c) for c in msg.tool_calls)
        return _episode(self.id, verdicts, violations)


TIER_CHECKERS: tuple[ToolArgsV1 | AskFirstV1, ...] = (ToolArgsV1(), AskFirstV1())
