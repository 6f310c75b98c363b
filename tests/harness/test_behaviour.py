"""Behaviour checkers on positive and negative corpora: markdown@v1 (per piece, per turn, per episode) and
tool_protocol@v1; the registry and hint texts."""

from __future__ import annotations

import pytest

from harness.behaviour import (
    CHECKERS,
    MARKDOWN_HINT,
    MIN_CHARS,
    bare_names,
    check_behaviour,
    get_checker,
    hint_text,
    markdown_violations,
    reply_pieces,
)
from harness.schema import Message, Trajectory
from harness.tools import format_tool_call as fc
from harness.tools import parse_tool_calls

# --- markdown@v1 corpora ------------------------------------------------------------------------------------------

POSITIVE = [
    "## Summary\n\n- Fixed the off-by-one error in `src/calc.py`.\n- Added a guard for empty input.\n- Tests pass.",
    "Fixed the bug in `calc.py`: `add()` subtracted instead of adding. The visible tests pass now.",
    "# Fix\n\nThe loop in `parse_args()` skipped the last item.\n\n```python\nfor i in range(n):\n    out.append(i)\n```",
    "I changed one line:\n\n```\nreturn a + b\n```\n\nand the tests pass again with this change in place.",
    "1. Read `calc.py`.\n2. Fixed `add()`.\n3. Ran the tests.\n4. All visible tests pass.",
    "* Updated the `MAX_SIZE` constant.\n* Kept `__init__` unchanged.\n* No other files touched.\n* Done.",
    "The function now returns the sum instead of the difference, which fixes the reported problem.",
    "See https://docs.python.org/3/library/os_path.html for the details on how the paths are joined together.",
    "Read the [guide](https://example.com/some_page.md) before changing anything else in the project code.",
    "The _emphasis_ here and **bold** there are just Markdown, with no identifiers anywhere in the text.",
    "~~~\nx = 1\ny = 2\n~~~\nThese assignments are fenced with tildes, which CommonMark also accepts.",
    "Use e.g. input/output and/or Python 3.11 here; these are plain words and not identifiers or paths.",
    "### Changes\nThe `tests/` folder is untouched and `src/utils/` holds the helper that was fixed today.",
    "Inline `x = 1` and `y = 2` are code spans on one line, so nothing here is unfenced multi-line code.",
]

NEGATIVE = [
    ("Fixed the bug in calc.py by changing parse_args() to handle empty input properly.", "not in backticks"),
    ("I changed the function:\ndef add(a, b):\n    return a + b\nand now it works for all the inputs.", "multi-line code"),
    ("This line is plain.\nThis is another.\nAnd a third one here.\nAnd a fourth line that is long.", "without a heading"),
    ("## Fix\n\n```python\ndef add(a, b):\n    return a + b\n", "never closed"),
    ("- Updated the MAX_SIZE constant so large inputs are accepted by the parser.", "MAX_SIZE"),
    ("- Changed __init__ so the cache is created lazily on first use of the object.", "__init__"),
    ("# Fix\n\n- The helper in src/utils/ now strips whitespace before comparing names.", "src/utils/"),
    ("Run this:\n$ python -m pytest -q\n$ git diff\nto check the change yourself in the repository.", "multi-line code"),
    ("## Done\n\nThe new code is\nx = compute(a)\n\ny = x + 1\nwhich fixes it for every input.", "lines 4-6"),
    ("Fixed add() so that it adds. The problem was a sign error in the return statement, now gone.", "'add()'"),
    ("Edited README.md and setup.cfg to document the new option that users asked for last week.", "README.md"),
    ("- I updated calc.add() to return the sum, which is what the docstring has always promised.", "calc.add()"),
    (">>> add(2, 2)\n4\n>>> add(1, 1)\n2\nThe results are now correct for the examples above.", "multi-line code"),
    ("- The __important__ part: bold with underscores reads as a dunder name under this rule.", "__important__"),
    ("| file | change |\n|---|---|\n| `calc.py` | fixed |\n| `tests` | none |\nA table alone has no structure.",
     "without a heading"),
]


@pytest.mark.parametrize("text", POSITIVE)
def test_markdown_positive(text: str) -> None:
    assert len(text.strip()) >= MIN_CHARS
    assert markdown_violations(text) == [], text


@pytest.mark.parametrize(("text", "needle"), NEGATIVE)
def test_markdown_negative(text: str, needle: str) -> None:
    assert len(text.strip()) >= MIN_CHARS
    v = markdown_violations(text)
    assert v, text
    assert any(needle in x for x in v), v


@pytest.mark.parametrize("text", ["", "done", "Fixed calc.py", "x" * (MIN_CHARS - 1), "  " + "y" * 39 + "\n\n"])
def test_markdown_na_below_40_chars(text: str) -> None:
    assert markdown_violations(text) is None


def test_bare_names_ignores_code_spans_and_urls() -> None:
    assert bare_names("`calc.py` and `parse_args()` and https://x.org/a_b.py") == []
    assert bare_names("calc.py and parse_args()") == ["calc.py", "parse_args()"]


def _turn(text: str) -> Message:
    return Message(role="assistant", content=text, tool_calls=parse_tool_calls(text))


def test_markdown_judges_visible_content_and_finish_message_separately() -> None:
    md = get_checker("markdown@v1")
    think = "<think>" + "plain thoughts about calc.py and parse_args() " * 3 + "</think>"
    call = fc("read_file", {"path": "some/really_long_path/calc_module.py"})
    assert md.verify_turn(_turn(think + call)) == "NA"  # thinking and call markup are not judged
    good = "## Fix\n\n- `add()` in `calc.py` now adds.\n- Tests pass."
    bad = "I fixed add() in calc.py so that the visible tests pass again now."
    assert md.verify_turn(_turn(fc("finish", {"message": good}))) == "PASS"
    assert md.verify_turn(_turn(fc("finish", {"message": bad}))) == "FAIL"
    # a good visible reply does not rescue a bad finish message (and vice versa)
    assert md.verify_turn(_turn(good + "\n" + fc("finish", {"message": bad}))) == "FAIL"
    assert md.verify_turn(_turn(bad + "\n" + fc("finish", {"message": good}))) == "FAIL"
    assert [n for n, _ in reply_pieces(_turn("hi " + fc("finish", {"message": "m"})))] == ["content", "finish"]


def test_markdown_episode_verdicts() -> None:
    md = get_checker("markdown@v1")
    msgs = [
        Message(role="system", content="s"),
        Message(role="user", content="u"),
        _turn(fc("list_files", {})),
        Message(role="tool", content="calc.py"),
        _turn("Now I will fix the bug in calc.py where add() subtracts.\n" + fc("read_file", {"path": "calc.py"})),
        Message(role="tool", content="..."),
        _turn(fc("finish", {"message": "## Done\n\n- Fixed `add()` in `calc.py`.\n- Tests pass."})),
    ]
    traj = Trajectory(instance_id="i", policy="p", seed=0, messages=msgs)
    res = md.check(traj)
    assert res.turn_verdicts == ["NA", "FAIL", "PASS"] and not res.ok and res.checker == "markdown@v1"
    assert res.violations and res.violations[0].startswith("turn 1 content:")
    ok = md.check(traj.model_copy(update={"messages": msgs[:4] + msgs[6:]}))
    assert ok.ok and ok.turn_verdicts == ["NA", "PASS"]
    # an episode whose replies are all NA passes (there was nothing to judge)
    assert md.check(traj.model_copy(update={"messages": msgs[:4]})).ok


# --- tool_protocol@v1 ---------------------------------------------------------------------------------------------


def _traj(*texts: str) -> Trajectory:
    return Trajectory(instance_id="i", policy="p", seed=0, messages=[_turn(t) for t in texts])


FIN = fc("finish", {"message": "done"})


@pytest.mark.parametrize(
    ("texts", "verdicts", "ok", "needle"),
    [
        ((fc("list_files", {}), FIN), ["PASS", "PASS"], True, None),
        (("no call here", FIN), ["NA", "PASS"], True, None),
        (('<tool_call>{"name": "list_files", "arguments": {"recursive": true}}</tool_call>', FIN),
         ["FAIL", "PASS"], False, "unknown argument"),
        (("<tool_call>{bad json}</tool_call>", FIN), ["FAIL", "PASS"], False, "invalid JSON"),
        ((fc("list_files", {}),), ["PASS"], False, "no finish call"),
        ((FIN + fc("list_files", {}),), ["FAIL"], False, "after finish"),
        ((FIN, fc("list_files", {})), ["PASS", "FAIL"], False, "turn after finish"),
        ((FIN, "just text"), ["PASS", "FAIL"], False, "turn after finish"),
        ((FIN + FIN,), ["FAIL"], False, "2 finish calls"),
        (('<tool_call>{"name": "finish", "arguments": {}}</tool_call>',), ["FAIL"], False, "no finish call"),
    ],
)
def test_tool_protocol(texts, verdicts, ok: bool, needle: str | None) -> None:
    res = get_checker("tool_protocol@v1").check(_traj(*texts))
    assert res.turn_verdicts == verdicts and res.ok is ok
    if needle:
        assert any(needle in v for v in res.violations), res.violations
    else:
        assert res.violations == []


def test_registry_and_hints() -> None:
    assert set(CHECKERS) == {"markdown@v1", "markdown@v2", "markdown@v3", "tool_protocol@v1", "tool_protocol@v2", "tool_args@v1",
                             "tool_args@v2", "ask_first@v1", "ask_first@v2"}
    assert hint_text("markdown@v1") == MARKDOWN_HINT == hint_text("markdown@v2")
    assert MARKDOWN_HINT.startswith("Reminder: format your reply to the user in Markdown")
    with pytest.raises(ValueError, match="known: ask_first@v1, ask_first@v2, markdown@v1, markdown@v2, markdown@v3, "
                                         "tool_args@v1, "
                                         "tool_args@v2, tool_protocol@v1, tool_protocol@v2"):
        get_checker("markdown@v9")
    results = check_behaviour(_traj(FIN), ["markdown@v1", "tool_protocol@v1"])
    assert [r.checker for r in results] == ["markdown@v1", "tool_protocol@v1"] and all(r.ok for r in results)


# --- v2: the gate judges replies (issue #13.3) ----------------------------------------------------------------------

# Turns that attempt a tool call and get it wrong, as an untrained policy writes them; v1's Markdown rule failed each.
BROKEN_CALLS = [
    '{"name": "read_file", "arguments": {"path": "calm_glacier/text_util.py"}}',  # no tags
    '<tool_call>\n{"name": "read_file", "arguments": {"path": "a.py"}\n</tool_call> then I fix parse_args in a.py '
    'and run the tests',  # bad JSON
    'read the file calm_glacier/text_util.py </tool_call> {"name": "read_file"',  # stray closing tag
    '<tool_call>{"name": "edit_file", "arguments": {"path": "a_b.py"}}</tool_call> and then I fix parse_args in a_b.py '
    'and run the tests',  # schema violation (no old/new)
]


@pytest.mark.parametrize("text", BROKEN_CALLS)
def test_a_broken_tool_call_is_a_protocol_failure_not_a_failing_markdown_turn(text: str) -> None:
    turn = _turn(text)
    assert get_checker("markdown@v1").verify_turn(turn) == "FAIL"  # what the gate used to guide
    assert get_checker("markdown@v2").verify_turn(turn) == "NA"
    assert get_checker("tool_protocol@v2").verify_turn(turn) == "FAIL"
    res = get_checker("tool_protocol@v2").check(_traj(text, FIN))
    assert res.turn_verdicts == ["FAIL", "PASS"] and not res.ok and res.violations[0].startswith("turn 0: ")


def test_v2_still_judges_real_replies_and_valid_calls() -> None:
    reply = "Now I will fix the bug in calc.py where add() subtracts, then run the tests again."
    for text in (reply, reply + "\n" + fc("read_file", {"path": "calc.py"})):
        assert get_checker("markdown@v2").verify_turn(_turn(text)) == "FAIL"
    assert get_checker("tool_protocol@v2").verify_turn(_turn(reply)) == "NA"
    bad_summary = fc("finish", {"message": "I fixed parse_args in calc.py and the visible tests pass now."})
    # a broken call next to a finish: the finish message is still a reply and is judged
    both = _turn('{"name": "read_file"} ' + bad_summary)
    assert get_checker("markdown@v2").verify_turn(both) == "FAIL"
    assert get_checker("tool_protocol@v2").verify_turn(both) == "FAIL"
    good = _turn(fc("finish", {"message": "## Done\n\n- Fixed `add()` in `calc.py`.\n- Tests pass."}))
    assert [get_checker(c).verify_turn(good) for c in ("markdown@v2", "tool_protocol@v2")] == ["PASS", "PASS"]
    assert get_checker("tool_protocol@v2").check(_traj(fc("list_files", {}), FIN)).ok
