"""repro.sft_stumble: expert episodes with one real mistake and its recovery; the mistake is never trained on."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from harness.agent import NUDGE_TEXT
from harness.schema import Message
from harness.tools import parse_tool_calls
from repro.sft_stumble import KINDS, corrupt_old, corrupt_path, failed_turns, overrun_text


def test_failed_turns_are_those_answered_by_an_error_or_the_nudge() -> None:
    msgs = [Message(role="system", content="s"), Message(role="user", content="u"),
            Message(role="assistant", content="a0"), Message(role="tool", content="fine", tool_name="read_file"),
            Message(role="assistant", content="a1"), Message(role="tool", content="ERROR: 'x.py' is not in the "
                                                                              "repository", tool_name="read_file"),
            Message(role="assistant", content="a2"), Message(role="user", content=NUDGE_TEXT),
            Message(role="assistant", content="a3"), Message(role="tool", content="ok ERROR: later",
                                                             tool_name="run_tests"),
            Message(role="assistant", content="a4")]
    assert failed_turns(msgs) == {1, 2}


def test_corrupted_paths_and_old_texts_never_hit_the_file() -> None:
    listing = {"pkg/playlist.py", "tests/test_playlist.py", "playlist.py"}
    source = "def f(x):\n    if x > 90:\n        return 1\n    return 0\n"
    for seed in range(200):
        rng = random.Random(seed)
        p = corrupt_path("tests/test_playlist.py", listing, rng)
        assert p not in listing and p != "tests/test_playlist.py"
        o = corrupt_old("    if x > 90:\n", source, rng)
        assert o not in source
    assert corrupt_path("pkg/playlist.py", {"playlist.py"}, random.Random(0)).startswith("pkg/p")


def test_an_overrun_call_is_unclosed_and_runs_into_the_next_lines() -> None:
    source = "a = 1\nb = 2\nc = 3\nd = 4\n"
    text = overrun_text("<think>\nfix\n</think>\n\n", "pkg/m.py", "b = 2\n", source, random.Random(1))
    (call,) = parse_tool_calls(text)
    assert not call.valid and "unclosed" in call.error
    assert '"old": "b = 2\\nc = 3\\n' in text and not text.rstrip().endswith("</tool_call>")
    assert overrun_text("", "pkg/m.py", "zz\n", source, random.Random(1)) is None


@pytest.fixture(scope="module")
def stumbled(tmp_path_factory: pytest.TempPathFactory) -> list:
    from harness.minirepos import make_mini
    from repro.sft import collect_expert_trajectories

    d = tmp_path_factory.mktemp("stumble")
    make_mini(d / "train", split="train", repos=2, tasks_per_repo=3, seed=0)
    return collect_expert_trajectories(d / "train", episodes=12, hint_share=0.0, think=True, seed=0, workers=2,
                                       stumble_share=1.0)


def test_every_stumbled_episode_has_one_real_error_then_the_correct_call(stumbled: list) -> None:
    kinds = set()
    assert len(stumbled) == 12  # every episode still ends with the expert's finish
    for tr in stumbled:
        failed = failed_turns(tr.messages)
        assert len(failed) == 1, tr.instance_id
        (k,) = failed
        turns = [i for i, m in enumerate(tr.messages) if m.role == "assistant"]
        wrong, after = tr.messages[turns[k]], tr.messages[turns[k] + 1]
        assert after.content.startswith("ERROR: ")  # the sandbox's own answer, not a made-up string
        if "unclosed" in after.content:
            kinds.add("edit_overrun")
        elif "was not found" in after.content:
            kinds.add("edit_old")
        else:
            assert "is not in the repository" in after.content
            kinds.add("read_path")
        fixed = tr.messages[turns[k + 1]]
        assert fixed.content.startswith("<think>\n") and fixed.tool_calls and fixed.tool_calls[0].valid
        assert wrong.content != fixed.content
    assert kinds == set(KINDS)
    ok = [tr for tr in stumbled if tr.final_message and "could not" not in tr.final_message]
    assert len(ok) >= 10  # the mistake does not stop the expert from fixing the bug


def test_sft_examples_mask_the_mistaken_turn_only(stumbled: list) -> None:
    from harness.tools import tool_schemas
    from repro.sft import _encoded
    from repro.tokenizer import ChatEncoder, train_tokenizer

    tools = tool_schemas()
    tok = train_tokenizer([json.dumps(tools)] + [m.content for tr in stumbled for m in tr.messages], vocab_size=400)
    enc = ChatEncoder(tok)
    tr = stumbled[0]
    (k,) = failed_turns(tr.messages)
    full = enc.encode(tr.messages, tools)
    ids, act = _encoded(enc, tr.messages, tools)
    assert ids == full.ids
    for a, b, t in zip(full.act, act, full.turn, strict=True):
        assert b == (0 if t == k else a)
    assert sum(a for a, t in zip(full.act, full.turn, strict=True) if t == k) > 0  # there was something to mask


def test_unknown_kind_is_refused(tmp_path: Path) -> None:
    from repro.sft_stumble import StumblingExpert

    with pytest.raises(ValueError, match="unknown stumble kind"):
        StumblingExpert(object(), "typo", random.Random(0))  # type: ignore[arg-type]
