"""Expert episodes with one mistake and its recovery, for SFT: ``StumblingExpert`` and ``failed_turns``.

Why. ``ScriptedExpert`` never makes a mistake, so an SFT model never sees an error observation in training. On
held-out repositories the SFT model of the shipped base made mistakes the expert never makes — a path with a
truncated module name (``tests/test_play.py`` for ``tests/test_playlist.py``), an ``old`` text that is not in the
file, an ``edit_file`` call that copies past the end of its line and is never closed — and then, out of its
training distribution, repeated the same call or wrote text without a call until the turn limit (35 of 40
episodes ended at the limit; docs/RESULTS.md, issue #20). A model that has seen a mistake answered by an error, and the
correct call after it, can recover.

How. ``StumblingExpert`` wraps the expert for one episode. At the first turn where the expert would call the chosen
tool (``read_file`` or ``edit_file``), it sends a corrupted version of that call instead; the real agent loop runs
it in the real sandbox, so the error observation is exactly what a model would get. On the next turn the expert
(stateless: it rebuilds what it knows from the conversation) makes the correct call, its ``<think>`` plan opened
with a remark on the error. The mistakes are the ones measured: a truncated or wrong file name, an ``old`` text
with one character changed or an indentation level added, and an ``edit_file`` call that runs on into the next lines
of the file and is never closed.

Loss. The mistaken turn must not be imitated: ``failed_turns`` finds every assistant turn answered by an error
observation or by the agent's no-tool-call nudge, and ``repro.sft`` trains on none of their tokens (the recovery
turn after it is trained on as usual).
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Sequence
from typing import Any, Literal

from harness.agent import NUDGE_TEXT
from harness.interfaces import PolicyOutput
from harness.policies.scripted import ScriptedExpert, history
from harness.schema import Message
from harness.tools import ERROR_PREFIX, format_tool_call, parse_tool_calls

StumbleKind = Literal["read_path", "edit_old", "edit_overrun"]
KINDS: tuple[StumbleKind, ...] = ("read_path", "edit_old", "edit_overrun")

_REMARK = {
    "read_path": "That path is not in the repository; copy the name exactly as the listing writes it.",
    "edit_old": "My old text was not in the file; copy the line exactly, whitespace too.",
    "edit_overrun": "That call copied past the end of the line and was never closed; copy just the one line.",
}


def failed_turns(messages: Sequence[Message]) -> set[int]:
    """Indices (0-based, counting assistant messages only, as ``ChatEncoder`` numbers turns) of the assistant turns
    answered by an error observation (``ERROR: ...``) or by the no-tool-call nudge."""
    out: set[int] = set()
    k = -1  # the assistant turn that the messages since it answer
    for m in messages:
        if m.role == "assistant":
            k += 1
        elif k >= 0 and ((m.role == "tool" and m.content.startswith(ERROR_PREFIX))
                         or (m.role == "user" and m.content == NUDGE_TEXT)):
            out.add(k)
    return out


def _think(text: str) -> str:
    m = re.match(r"<think>\n.*?\n</think>\n\n", text, re.DOTALL)
    return m.group(0) if m else ""


def _read_file_source(messages: Sequence[Message], path: str) -> str | None:
    """The last successful ``read_file`` observation of ``path`` in the conversation."""
    reads = [st.result for st in history(list(messages)) if st.name == "read_file" and st.arguments.get("path") == path
             and st.result is not None and not st.result.startswith(ERROR_PREFIX)]
    return reads[-1] if reads else None


def corrupt_path(path: str, existing: set[str], rng: random.Random) -> str:
    """A wrong version of ``path``: its file name cut short, or the directory dropped; never a path in
    ``existing`` (the listing), so the call fails."""
    head, _, name = path.rpartition("/")
    stem = name[:-3] if name.endswith(".py") else name
    choices = []
    if len(stem) >= 3:
        cut = rng.randrange(1, len(stem) - 1)
        choices.append((f"{head}/" if head else "") + stem[:cut] + ".py")
    if head:
        choices.append(name)
    choices = [c for c in choices if c not in existing and c != path]
    return rng.choice(choices) if choices else path + "x"


def _listing(messages: Sequence[Message]) -> set[str]:
    """The paths of the episode's first ``list_files`` observation (empty before there is one)."""
    listed = [st.result for st in history(list(messages)) if st.name == "list_files" and st.result is not None]
    return set(listed[0].splitlines()) if listed else set()


def corrupt_old(old: str, source: str, rng: random.Random) -> str:
    """``old`` with one letter or digit changed, or an indentation level added, so that it no longer occurs in
    ``source`` (dropping the indentation would not do: the rest of the line is still a substring of the file)."""
    letters = [i for i, ch in enumerate(old) if ch.isalnum()]
    for _ in range(20):
        if letters and rng.random() < 0.75:
            i = rng.choice(letters)
            repl = rng.choice([c for c in "abcdefghijklmnopqrstuvwxyz0123456789" if c != old[i]])
            wrong = old[:i] + repl + old[i + 1:]
        else:
            wrong = "    " + old
        if wrong not in source:
            return wrong
    return old + "\x00"  # pragma: no cover - every variant above occurs in the file


def overrun_text(think: str, path: str, old: str, source: str, rng: random.Random) -> str | None:
    """An ``edit_file`` call whose ``old`` runs on from the right line into the next 1-3 lines of ``source`` and
    breaks off there, unclosed (the malformed call a model wrote); None when ``old`` is not in ``source``."""
    at = source.find(old)
    if at < 0:
        return None
    rest = source[at + len(old):].splitlines(keepends=True)[: rng.randint(1, 3)]
    if not rest:
        return None
    runon = json.dumps(old + "".join(rest), ensure_ascii=False)[:-1]  # the JSON string, its closing quote missing
    return think + '<tool_call>\n{"name": "edit_file", "arguments": {"path": ' + json.dumps(path) + ', "old": ' + runon


class StumblingExpert:
    """``expert`` with one mistake of kind ``kind`` at its first ``read_file`` / ``edit_file`` call (one episode).

    Not thread-safe and not reusable: one object per episode (it remembers that it has stumbled)."""

    def __init__(self, expert: ScriptedExpert, kind: StumbleKind, rng: random.Random) -> None:
        if kind not in KINDS:
            raise ValueError(f"unknown stumble kind {kind!r}; choose one of {KINDS}")
        self.expert, self.kind, self.rng = expert, kind, rng
        self.name, self.spec = expert.name, expert.spec
        self.stumbled = False
        self._recover = False

    def act(self, messages: list[Message], *, tools: list[dict[str, Any]], rng: random.Random) -> PolicyOutput:
        out = self.expert.act(messages, tools=tools, rng=rng)
        if self._recover:
            self._recover = False
            think = _think(out.text)
            if think:  # open the plan with a remark on the error just seen
                return PolicyOutput(text=think.replace("<think>\n", f"<think>\n{_REMARK[self.kind]} ", 1)
                                    + out.text[len(think):], info=out.info)
            return out
        if self.stumbled:
            return out
        wrong = self._mistake(messages, out.text)
        if wrong is None:
            return out
        self.stumbled, self._recover = True, True
        return PolicyOutput(text=wrong, info={**(out.info or {}), "stumble": self.kind})

    def _mistake(self, messages: list[Message], text: str) -> str | None:
        calls = parse_tool_calls(text)
        if len(calls) != 1 or not calls[0].valid:
            return None
        call, think = calls[0], _think(text)
        args = dict(call.arguments)
        if self.kind == "read_path" and call.name == "read_file":
            wrong = corrupt_path(args["path"], _listing(messages), self.rng)
            return think + format_tool_call("read_file", {**args, "path": wrong})
        if call.name != "edit_file" or not args.get("old"):
            return None
        source = _read_file_source(messages, args["path"]) or ""
        if self.kind == "edit_old":
            return think + format_tool_call("edit_file", {**args, "old": corrupt_old(args["old"], source, self.rng)})
        return overrun_text(think, args["path"], args["old"], source, self.rng)
