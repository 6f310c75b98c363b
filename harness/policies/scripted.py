"""Scripted policies: ``OraclePolicy`` (applies the gold patch), ``NullPolicy`` (does nothing) and
``ScriptedExpert`` (fixes mini tasks from what it observes, like a careful engineer).

All three are stateless: each ``act`` call rebuilds what the policy knows from the conversation (its earlier
tool calls and the ``tool`` observations that answered them), so one object can serve concurrent episodes.
Randomness comes only from the ``rng`` argument (phrasing and reading order).

Behaviour gap on purpose (what Targeted Guidance must close): ``ScriptedExpert`` writes a plain-text summary in
``finish`` (it fails ``markdown@v1``: unquoted identifiers and paths) unless a user message in the conversation
asks for Markdown, in which case it writes a Markdown summary (heading, bullets, identifiers in backticks).
Visible text outside tool calls is kept empty so that only the summary is judged. Likewise for the other tiers
(``harness.behaviour_tiers``): it gives each ``edit_file`` call a one-line ``reason`` only when a hint asks for a
"reason" argument (``tool_args@v1``), and asks the user with ``ask_user`` before its first edit only when a hint
asks it to ask the user for approval (``ask_first@v1``). Without such hints its output is unchanged.

After the agent loop's finish notice (``EpisodeLimits.finish_notice_turns``) the expert's next turn is ``finish``:
its usual summary when the tests already pass, otherwise a report of the edit still in place and whether the tests
ran after it, or of where the failing tests point when nothing was changed.
"""

from __future__ import annotations

import ast
import functools
import json
import random
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from harness.behaviour_tiers import MAX_REASON_CHARS
from harness.interfaces import PolicyOutput, is_finish_notice
from harness.minirepos import repair
from harness.policies.expert_test_view import TEST_VIEWS, TestView, call_pattern, view_from_search
from harness.policies.patches import parse_patch
from harness.schema import Message, TaskInstance, TaskSet
from harness.tools import ERROR_PREFIX, parse_tool_calls


def _call(name: str, arguments: dict[str, Any]) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False) + "\n</tool_call>"


@dataclass(frozen=True)
class Step:
    """One earlier tool call of this episode and the observation that answered it (None if unanswered)."""

    name: str
    arguments: dict[str, Any]
    result: str | None


def history(messages: list[Message]) -> list[Step]:
    """The episode's tool calls paired, in order, with the ``tool`` messages that answered them."""
    steps: list[Step] = []
    pending: list[tuple[str, dict[str, Any]]] = []
    for m in messages:
        if m.role == "assistant":
            steps += [Step(n, a, None) for n, a in pending]
            calls = m.tool_calls or parse_tool_calls(m.content)
            pending = [(c.name, dict(c.arguments)) for c in calls]
        elif m.role == "tool" and pending:
            name, args = pending.pop(0)
            steps.append(Step(name, args, m.content))
    steps += [Step(n, a, None) for n, a in pending]
    return steps


def problem_statement(messages: list[Message]) -> str:
    return next((m.content for m in messages if m.role == "user" and not m.is_hint), "")


def wants_markdown(messages: list[Message]) -> bool:
    """True when a user message after the problem statement (a hint) asks for Markdown formatting."""
    users = [m for m in messages if m.role == "user"]
    for m in users[1:]:
        text = m.content.lower()
        if "markdown" in text and not re.search(r"no markdown|plain text", text):
            return True
    return False


def _later_user_texts(messages: list[Message]) -> list[str]:
    """The user messages after the problem statement (hints, nudges), lower-cased."""
    return [m.content.lower() for m in [m for m in messages if m.role == "user"][1:]]


def wants_reason(messages: list[Message]) -> bool:
    """True when a user message after the problem statement asks for a "reason" argument (tool_args@v1's hint)."""
    return any('"reason" argument' in t for t in _later_user_texts(messages))


def wants_approval(messages: list[Message]) -> bool:
    """True when a user message after the problem statement says to ask the user for approval (ask_first@v1's hint)."""
    return any("ask the user for approval" in t for t in _later_user_texts(messages))


# ----------------------------------------------------------------------------------------------------------------
# NullPolicy
# ----------------------------------------------------------------------------------------------------------------


class NullPolicy:
    """Finishes at once with a short plain message and no edits (the floor of every metric)."""

    name = "null"
    spec = "null"

    def act(self, messages: list[Message], *, tools: list[dict[str, Any]], rng: random.Random) -> PolicyOutput:
        return PolicyOutput(text=_call("finish", {"message": "No changes made."}))


# ----------------------------------------------------------------------------------------------------------------
# OraclePolicy
# ----------------------------------------------------------------------------------------------------------------


class OraclePolicy:
    """Applies the task's gold patch through the tools (read each file, then one ``edit_file`` per hunk) and
    finishes with a Markdown summary. Needs the task set to find the gold patch: the task is recognised by its
    problem statement (the first user message), e.g. ``make_policy("oracle", tasks=task_set)``."""

    name = "oracle"
    spec = "oracle"

    def __init__(self, tasks: TaskSet | Iterable[TaskInstance] | str | Path | None = None) -> None:
        if isinstance(tasks, (str, Path)):
            from harness.tasks import load_task_set

            tasks = load_task_set(tasks)
        instances = tasks.instances if isinstance(tasks, TaskSet) else list(tasks or [])
        self._by_statement: dict[str, TaskInstance] = {}
        for inst in instances:
            other = self._by_statement.get(inst.problem_statement)
            if other is not None and other.patch != inst.patch:
                raise ValueError(f"OraclePolicy: {other.instance_id} and {inst.instance_id} share a problem statement "
                                 "but not a gold patch; the oracle cannot tell them apart")
            self._by_statement[inst.problem_statement] = inst

    def instance_for(self, messages: list[Message]) -> TaskInstance:
        statement = problem_statement(messages)
        inst = self._by_statement.get(statement)
        if inst is None:
            raise LookupError("OraclePolicy: the problem statement matches no task it was given; build it with the "
                              "task set being evaluated, e.g. make_policy('oracle', tasks=task_set)")
        return inst

    def act(self, messages: list[Message], *, tools: list[dict[str, Any]], rng: random.Random) -> PolicyOutput:
        inst = self.instance_for(messages)
        hunks = parse_patch(inst.patch)
        done = history(messages)
        plan: list[tuple[str, Any]] = []
        for path in dict.fromkeys(h.path for h in hunks):
            if any(h.old for h in hunks if h.path == path):
                plan.append(("read", path))
            plan += [("edit", h) for h in hunks if h.path == path]
        if len(done) < len(plan):
            kind, item = plan[len(done)]
            if kind == "read":
                return PolicyOutput(text=_call("read_file", {"path": item}))
            return PolicyOutput(text=_call("edit_file", {"path": item.path, "old": item.old, "new": item.new}))
        files = sorted({h.path for h in hunks})
        failed = [s for s in done if s.name == "edit_file" and (s.result or "").startswith(ERROR_PREFIX)]
        lines = ["## Summary", "", f"Applied the reference fix for this issue ({len(hunks)} hunk(s)).", ""]
        lines += [f"- Changed `{f}`" for f in files]
        if failed:
            lines.append(f"- {len(failed)} edit(s) could not be applied")
        return PolicyOutput(text=_call("finish", {"message": "\n".join(lines)}))


# ----------------------------------------------------------------------------------------------------------------
# ScriptedExpert
# ----------------------------------------------------------------------------------------------------------------

_FAILED_RE = re.compile(r"^(?:FAILED|ERROR) (\S+?)(?:::(\w+))?(?: - .*)?$", re.MULTILINE)
_EXIT_RE = re.compile(r"\[exit code (\d+)\]\s*$")
_IMPORT_RE = re.compile(r"from ([A-Za-z_][\w.]*)\.([A-Za-z_]\w*) import ([A-Za-z_]\w*)")
_PHRASES = {
    "wrong_comparison": "used the wrong comparison",
    "wrong_operator": "used the wrong arithmetic operator",
    "off_by_one": "was off by one",
    "wrong_constant": "used a wrong constant",
    "missing_edge_case": "did not handle an edge case",
    "wrong_variable_returned": "returned the wrong variable",
    "wrong_string_format": "formatted its text wrongly",
    "wrong_boolean_logic": "had its boolean logic inverted",
    "wrong_builtin": "called the wrong builtin",
    "swapped_arguments": "passed two arguments in the wrong order",
}


def run_passed(observation: str | None) -> bool:
    m = _EXIT_RE.search((observation or "").strip())
    return m is not None and m.group(1) == "0"


def notice_given(messages: list[Message]) -> bool:
    """True when the agent loop has said that the turns run out (``harness.interfaces.finish_notice``)."""
    return any(m.role == "user" and is_finish_notice(m.content) for m in messages)


def _code_style(messages: list[Message]) -> Callable[[str], str]:
    """How a summary quotes code and paths: in backticks when a hint asks for Markdown, as plain text otherwise."""
    return (lambda s: f"`{s}`") if wants_markdown(messages) else (lambda s: f"'{s}'" if " " in s else s)


def _one_line(code: str) -> str:
    return " / ".join(ln.strip() for ln in code.strip().splitlines())


def _applied_edits(steps: list[Step]) -> list[int]:
    return [i for i, s in enumerate(steps) if s.name == "edit_file" and s.result is not None
            and not s.result.startswith(ERROR_PREFIX)]


def net_change(steps: list[Step]) -> tuple[str, str, str] | None:
    """(path, old, new) of the edit still in place at the end of ``steps`` (an edit undone by the reverse edit does
    not count); None when no edit is in place."""
    stack: list[tuple[str, str, str]] = []
    for i in _applied_edits(steps):
        a = steps[i].arguments
        edit = (str(a.get("path", "")), str(a.get("old", "")), str(a.get("new", "")))
        if stack and stack[-1] == (edit[0], edit[2], edit[1]):
            stack.pop()
        else:
            stack.append(edit)
    return stack[-1] if stack else None


def _target_of(steps: list[Step], messages: list[Message]) -> _Target | None:
    """What the issue and the first test run implicate (``_locate``); None before the listing and that run."""
    runs = [s for s in steps if s.name == "run_tests"]
    listing = next((s.result or "" for s in steps if s.name == "list_files"), None)
    if not runs or runs[0].result is None or listing is None:
        return None
    return _locate(problem_statement(messages), runs[0].result, listing.splitlines())


@dataclass(frozen=True)
class _Target:
    module_path: str
    module_name: str
    function: str | None
    test_file: str
    failing: tuple[str, ...]
    error_lines: tuple[int, ...] = ()


def _locate(statement: str, first_run: str, files: list[str]) -> _Target | None:
    """Module, function and visible test file implicated by the issue text and the failing test output."""
    failed = [(m.group(1), m.group(2)) for m in _FAILED_RE.finditer(first_run)]
    m = _IMPORT_RE.search(statement)
    if m is not None:
        module_name, function = f"{m.group(1)}.{m.group(2)}", m.group(3)
    else:
        module_name, function = "", None
    stem = module_name.rpartition(".")[2]
    tests = [f for f, _ in failed if f.endswith(".py")]
    test_file = next((f for f in tests if stem and f.endswith(f"test_{stem}.py")), tests[0] if tests else "")
    if not module_name and test_file:
        stem = Path(test_file).stem.removeprefix("test_")
        cands = [f for f in files if f.endswith(f"/{stem}.py") and not f.startswith("tests/")]
        if cands:
            module_name = cands[0][:-3].replace("/", ".")
    if not module_name or not test_file:
        return None
    failing = tuple(sorted({name for f, name in failed if f == test_file and name}))
    path = module_name.replace(".", "/") + ".py"
    lines = tuple(sorted({int(n) for n in re.findall(rf"^\s*{re.escape(path)}:(\d+): ", first_run, re.MULTILINE)}))
    return _Target(path, module_name, function, test_file, failing, lines)


def _ranked_fixes(module_src: str, test_src: str, target: _Target,
                  open_sandbox: repair.SandboxOpener = repair.local_screen_sandbox) -> list[repair.Edit]:
    """Candidate fixes that make every test of the visible test file pass, most plausible first. The policy is
    stateless and asks again on every later turn of the episode: the answer is a pure function of what was read,
    so it is memoised. Screening runs the code in a sandbox from ``open_sandbox`` (``repair.screen``)."""
    return list(_ranked_fixes_cached(module_src, test_src, target, open_sandbox))


@functools.lru_cache(maxsize=256)
def _ranked_fixes_cached(module_src: str, test_src: str, target: _Target,
                         open_sandbox: repair.SandboxOpener) -> tuple[repair.Edit, ...]:
    cases = repair.failing_asserts(test_src, list(target.failing))
    funcs = list(dict.fromkeys(([target.function] if target.function else []) + [c.function for c in cases]))
    candidates: list[repair.Edit] = []
    for f in funcs:
        candidates += [e for e in repair.repair_candidates(module_src, f, cases) if e not in candidates]
    scores = repair.screen(target.module_name, [e.apply(module_src) for e in candidates], test_src,
                           sandbox=open_sandbox)
    if scores is None:
        return tuple(candidates[:8])
    best = max(scores, default=-1)
    total = len([n for n in ast.parse(test_src).body if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")])
    keep = total if best >= total else best
    passing = [e for e, s in zip(candidates, scores, strict=True) if s == keep and s > 0]
    # Most plausible first: repairs that undo a known bug family; then repairs of a line the traceback names;
    # then, when a failing case is an edge input (empty, zero, None), a guard clause; then the simplest code.
    edge = any(repair.is_edge_input(a) for c in cases for a in c.args)

    def at_error(e: repair.Edit) -> bool:
        return any(e.start <= n <= e.end for n in target.error_lines) and e.family != "missing_edge_case"

    return tuple(sorted(passing, key=lambda e: (not repair.is_plant_inverse(module_src, e), not at_error(e),
                                                not (edge and e.family == "missing_edge_case"),
                                                0 if e.family == "missing_edge_case" else len(e.new) - len(e.old))))


class ScriptedExpert:
    """Solves mini tasks from observations only: lists files, runs the visible tests, reads the implicated module
    and test file (``test_view="read"``; ``"search"``: greps the test file for the function's calls instead,
    ``harness.policies.expert_test_view``), screens inverse bug-family repairs against those tests, applies the best
    one with ``edit_file``, re-runs the tests (reverting and trying the next candidate on failure), finishes.

    It never reads the gold patch or hidden tests (it has no access to the task record). ``think=True`` adds a
    short ``<think>`` plan to each turn. The code it reads is executed only in sandboxes from ``screen_sandbox``
    (a fresh one per screening, default ``LocalSandbox``; ``harness.runner`` passes its sandbox factory's
    ``open_scratch``, a container under ``--sandbox docker``).
    """

    name = "expert"
    spec = "expert"

    def __init__(self, think: bool = False, max_candidates: int = 6,
                 screen_sandbox: repair.SandboxOpener | None = None, test_view: TestView = "read") -> None:
        if test_view not in TEST_VIEWS:
            raise ValueError(f"ScriptedExpert(test_view={test_view!r}): expected one of {TEST_VIEWS}.")
        self.think = think
        self.test_view = test_view
        self.max_candidates = max_candidates
        self.screen_sandbox = screen_sandbox or repair.local_screen_sandbox

    def _out(self, rng: random.Random, plan: str, name: str, arguments: dict[str, Any]) -> PolicyOutput:
        thought = f"<think>\n{plan}\n</think>\n\n" if self.think else ""
        return PolicyOutput(text=thought + _call(name, arguments), info={"plan": plan})

    def act(self, messages: list[Message], *, tools: list[dict[str, Any]], rng: random.Random) -> PolicyOutput:
        out = self._next(messages, rng)
        if notice_given(messages) and not any(c.name == "finish" for c in parse_tool_calls(out.text)):
            return self._out_of_turns(messages, rng)
        return out

    def _next(self, messages: list[Message], rng: random.Random) -> PolicyOutput:
        steps = history(messages)
        if not any(s.name == "list_files" for s in steps):
            return self._out(rng, rng.choice(["Let me look at the repository layout first.",
                                              "First, an overview of the files."]), "list_files", {"path": "."})
        runs = [s for s in steps if s.name == "run_tests"]
        if not runs or runs[0].result is None:
            return self._out(rng, "Reproduce the problem with the visible tests.", "run_tests", {"tests": []})
        target = _target_of(steps, messages)
        if target is None:
            return self._finish(messages, rng, None, "could not tell from the issue and the test output which "
                                "module is broken, so I made no changes")
        reads = {s.arguments.get("path"): s.result for s in steps if s.name == "read_file"
                 and s.result is not None and not s.result.startswith(ERROR_PREFIX)}
        if self.test_view == "search" and target.function:  # grep the test file for the function's calls
            hits = [s.result for s in steps if s.name == "search" and s.arguments.get("path") == target.test_file
                    and s.result is not None and not s.result.startswith(ERROR_PREFIX)]
            todo = [("read_file", {"path": target.module_path}, f"Read {target.module_path} to understand the "
                     "failure.")] if target.module_path not in reads else []
            todo += [] if hits else [("search", {"pattern": call_pattern(target.function), "path": target.test_file},
                                      f"Find where {target.test_file} calls {target.function}.")]
            if todo:
                name, args, plan = todo[0] if len(todo) == 1 else rng.choice(todo)
                return self._out(rng, plan, name, args)
            if (view := view_from_search(target.module_name, hits[-1], runs[0].result or "")) is not None:
                return self._repair(messages, steps, replace(target, failing=view[1]),
                                    reads[target.module_path] or "", view[0], rng)
        unread = [p for p in (target.module_path, target.test_file) if p not in reads]
        if unread:
            path = unread[0] if len(unread) == 1 else rng.choice(unread)
            return self._out(rng, f"Read {path} to understand the failure.", "read_file", {"path": path})
        return self._repair(messages, steps, target, reads[target.module_path] or "", reads[target.test_file] or "",
                            rng)

    def _repair(self, messages: list[Message], steps: list[Step], target: _Target, module_src: str, test_src: str,
                rng: random.Random) -> PolicyOutput:
        fixes = _ranked_fixes(module_src, test_src, target, self.screen_sandbox)[: self.max_candidates]
        pairs = [repair.unique_replacement(module_src, e) for e in fixes]
        edits = [s for s in steps if s.name == "edit_file" and not (s.result or "").startswith(ERROR_PREFIX)]
        applied = [(s.arguments.get("old"), s.arguments.get("new")) for s in edits]
        last = steps[-1]
        if last.name == "edit_file" and applied and applied[-1] in pairs:
            return self._out(rng, "Re-run the tests to check the fix.", "run_tests", {"tests": []})
        if last.name == "run_tests" and applied and applied[-1] in pairs:
            fix = fixes[pairs.index(applied[-1])]
            if run_passed(last.result):
                return self._finish(messages, rng, (fix, target, last.result or ""), "")
            old, new = applied[-1]
            return self._edit(messages, steps, rng, "That did not work; undo it.",
                              {"path": target.module_path, "old": new, "new": old},
                              "undo my last edit: the visible tests still fail")
        tried = {(s.arguments.get("old"), s.arguments.get("new")) for s in steps if s.name == "edit_file"}
        for fix, (old, new) in zip(fixes, pairs, strict=True):
            if (old, new) not in tried:
                what = f"{fix.function or 'a module constant'} {_PHRASES.get(fix.family, 'is wrong')}"
                return self._edit(messages, steps, rng, f"{what}; fix line {fix.start}.",
                                  {"path": target.module_path, "old": old, "new": new},
                                  f"fix line {fix.start}: {what}")
        code = _code_style(messages)
        return self._finish(messages, rng, None, f"could not find a change to {code(target.module_path)} that makes "
                            "the visible tests pass, so I left the code unchanged")

    def _out_of_turns(self, messages: list[Message], rng: random.Random) -> PolicyOutput:
        """``finish`` after the agent loop's notice that the turns run out: what was changed and what still fails
        (the expert's own state, from the conversation)."""
        steps, code = history(messages), _code_style(messages)
        target = _target_of(steps, messages)
        change = net_change(steps)
        if change is not None:
            path, old, new = change
            what = f"changed {code(_one_line(old))} to {code(_one_line(new))} in {code(path)}"
            after = [s for s in steps[_applied_edits(steps)[-1] + 1:] if s.name == "run_tests" and s.result is not None]
            failure = (f"{what}, but the visible tests still fail and I ran out of turns" if after else
                       f"{what}, but I ran out of turns before I could run the tests again")
        elif target is not None:
            where = (f"{code(target.function)} in {code(target.module_path)}" if target.function
                     else code(target.module_path))
            failure = f"ran out of turns before I could fix it, and made no changes; the failing tests point to {where}"
        else:
            failure = "ran out of turns before I found the cause, and made no changes"
        return self._finish(messages, rng, None, failure, plan="Out of turns; report what I found.")

    def _edit(self, messages: list[Message], steps: list[Step], rng: random.Random, plan: str,
              arguments: dict[str, Any], reason: str) -> PolicyOutput:
        """The ``edit_file`` call; first an ``ask_user`` call if a hint asks for approval and nothing was asked yet
        (ask_first@v1); with a one-line ``reason`` if a hint asks for one (tool_args@v1). No such hint: unchanged."""
        if wants_approval(messages) and not any(s.name == "ask_user" for s in steps):
            question = f"May I edit {arguments['path']}? I would {reason}."
            return self._out(rng, "Ask the user for approval before changing any file.", "ask_user",
                             {"question": question})
        if wants_reason(messages):
            arguments = {**arguments, "reason": " ".join(reason.split())[:MAX_REASON_CHARS]}
        return self._out(rng, plan, "edit_file", arguments)

    def _finish(self, messages: list[Message], rng: random.Random, done: tuple[repair.Edit, _Target, str] | None,
                failure: str, plan: str = "Give up and report.") -> PolicyOutput:
        md = wants_markdown(messages)
        if done is None:
            text = (f"## Result\n\n- I {failure}.\n" if md else f"Sorry, I {failure}.")
            return self._out(rng, plan, "finish", {"message": text})
        fix, target, run_out = done
        func = fix.function or "a module-level constant"
        old = fix.old.strip().splitlines()[0] if fix.old.strip() else ""
        new = " / ".join(ln.strip() for ln in fix.new.strip().splitlines())
        count = re.search(r"(\d+) passed", run_out)
        passed = f"{count.group(1)} passed" if count else "all passed"
        phrase = _PHRASES.get(fix.family, "was wrong")
        if md:
            heading = rng.choice(["## Summary", "## What I changed", "### Fix summary"])
            lines = [heading, "", f"The reported problem came from `{func}` in `{target.module_path}`, which {phrase}.",
                     "", f"- **Where:** `{target.module_path}`, line {fix.start}",
                     f"- **Change:** `{old}` became `{new}`",
                     f"- **Check:** the visible tests pass (`{passed}`)"]
            text = "\n".join(lines)
        else:
            opener = rng.choice(["I fixed the bug in", "Fixed the problem in", "The bug was in"])
            text = (f"{opener} {func} ({target.module_path}, line {fix.start}): it {phrase}. I changed "
                    f"'{old}' to '{new}' and the visible tests pass now ({passed}).")
        return self._out(rng, "Tests pass; summarise the change.", "finish", {"message": text})
