"""Dataset filters (each counted), near-duplicate MinHash, the leak check, and the dataset card round trip."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from harness.schema import LimitHit, Message, TaskInstance, ToolCall, Trajectory
from harness.trajdata.dataset import card_markdown, make_card, read_dataset, write_dataset
from harness.trajdata.filters import FilterOptions, apply_filters, leak_reason
from harness.trajdata.neardup import mixer, near_duplicates, shingles, signature, similarity
from harness.trajdata.schema import Provenance, RecordOutcome, TrajectoryRecord

WORDS = [f"w{i}" for i in range(400)]


def _rec(rid: str, msgs: list[Message], iid: str = "t1", **outcome: object) -> TrajectoryRecord:
    traj = Trajectory(instance_id=iid, policy="p", seed=0, messages=msgs, finished=True,
                      limit_hit=outcome.pop("limit_hit", None))  # type: ignore[arg-type]
    prov = Provenance(source_format="openai_jsonl", path="x.jsonl", locator=f"line {rid}", source_sha256="0" * 64)
    return TrajectoryRecord(record_id=rid, trajectory=traj, outcome=RecordOutcome(**outcome), provenance=prov)


def _chat(text: str, *, tool: str = "ok", calls: list[ToolCall] | None = None) -> list[Message]:
    return [Message(role="system", content="sys"), Message(role="user", content="Fix the bug"),
            Message(role="assistant", content=text, tool_calls=calls or []), Message(role="tool", content=tool)]


def _text(rng: random.Random, n: int = 200) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def test_minhash_estimates_jaccard() -> None:
    rng = random.Random(0)
    a = _text(rng, 300).split()
    b = a[:270] + _text(rng, 30).split()  # share most shingles
    sa, sb = shingles(" ".join(a), 3), shingles(" ".join(b), 3)
    exact = len(sa & sb) / len(sa | sb)
    ests = [similarity(signature(sa, 256, mixer(s)), signature(sb, 256, mixer(s))) for s in range(20)]
    est = sum(ests) / len(ests)
    assert abs(est - exact) < 0.03  # unbiased: the mean of 20 seeds (each with standard error ≈ 0.03)
    assert all(abs(e - exact) < 0.15 for e in ests)
    texts = [" ".join(a), " ".join(b), _text(rng, 300)]
    assert near_duplicates(texts, threshold=0.7, shingle=3) == {1: (0, pytest.approx(est, abs=0.15))}
    assert near_duplicates(texts, threshold=0.7, shingle=3, seed=5).keys() == {1}
    with pytest.raises(ValueError, match="multiple of bands"):
        near_duplicates(texts, threshold=0.9, num_perm=10, bands=3)


INSTANCE = TaskInstance(
    instance_id="t1", repo="r", base_commit="0", problem_statement="Fix add", FAIL_TO_PASS=["tests/test_hidden.py::t"],
    patch="--- a/calc.py\n+++ b/calc.py\n@@ -1,2 +1,2 @@\n def add(a, b):\n-    return a - b\n+    return a + b  # fixed\n",
    test_patch="--- /dev/null\n+++ b/tests/test_hidden.py\n@@ -0,0 +1,2 @@\n+def test_add_hidden_case():\n"
               "+    assert add(2, 40) == 42, 'hidden'\n")


def test_leaks_hidden_tests_or_gold_patch_only_when_shown_before_written() -> None:
    shown = _rec("a", _chat("look", tool="def test_add_hidden_case():\n    assert add(2, 40) == 42, 'hidden'"))
    assert "shows hidden line" in (leak_reason(shown, INSTANCE) or "")
    named = _rec("b", _chat("look", tool="tests/test_hidden.py\ncalc.py"))
    assert "hidden test file tests/test_hidden.py" in (leak_reason(named, INSTANCE) or "")
    gold = "    return a + b  # fixed"
    edit = ToolCall(name="edit_file", arguments={"path": "calc.py", "old": "    return a - b", "new": gold + "\n"})
    own = _rec("c", [*_chat('{"new": "..."}', calls=[edit]), Message(role="tool", content=f"def add(a, b):\n{gold}")])
    assert leak_reason(own, INSTANCE) is None  # the agent wrote the fix itself, then read it back
    given = _rec("d", [Message(role="user", content=f"Fix add. Hint:\n{gold}"), *_chat("ok")[2:]])
    assert "shows hidden line" in (leak_reason(given, INSTANCE) or "")
    assert leak_reason(_rec("e", _chat("    return a - b")), INSTANCE) is None  # base code is not hidden


def test_every_filter_counts_what_it_removes(tmp_path: Path) -> None:
    rng = random.Random(3)
    base = _text(rng)
    bad_call = ToolCall(name="read_file", valid=False, error="invalid JSON arguments")
    recs = [
        _rec("keep1", _chat(base), resolved=True, reward=1.0),
        _rec("infra", _chat(_text(rng)), infra_error="sandbox died"),
        _rec("malformed", _chat(_text(rng), calls=[bad_call]), resolved=True),
        _rec("trunc1", _chat(_text(rng)), truncated="message limit 30"),
        _rec("trunc2", _chat(_text(rng)), limit_hit=LimitHit(kind="turns", limit=8)),
        _rec("leak", _chat(_text(rng), tool="def test_add_hidden_case():"), resolved=True),
        _rec("exact", _chat(base), resolved=True, reward=1.0),
        _rec("near", _chat(base + " extra"), resolved=True, reward=1.0),
        _rec("unresolved", _chat(_text(rng)), resolved=False, reward=0.0),
        _rec("unknown", _chat(_text(rng)), iid="other", reward=0.7),
        _rec("lowreward", _chat(_text(rng)), resolved=True, reward=0.2),
    ]
    kept, counts = apply_filters(recs, FilterOptions(resolved_only=True, min_reward=0.5), instances={"t1": INSTANCE})
    assert [r.record_id for r in kept] == ["keep1"]
    by = {c.name: c for c in counts}
    assert [c.name for c in counts] == ["infra_errors", "malformed_tool_calls", "truncated", "leaks",
                                        "exact_duplicates", "near_duplicates", "resolved_only", "min_reward"]
    assert {k: c.removed for k, c in by.items()} == {"infra_errors": 1, "malformed_tool_calls": 1, "truncated": 2,
                                                     "leaks": 1, "exact_duplicates": 1, "near_duplicates": 1,
                                                     "resolved_only": 2, "min_reward": 1}
    assert by["leaks"].unchecked == 1 and by["infra_errors"].n_in == len(recs)
    assert sum(c.removed for c in counts) == len(recs) - len(kept)
    assert "outcome unknown" in " ".join(by["resolved_only"].examples)
    card = make_card("demo", [], kept, n_imported=len(recs), filters=counts, task_set="tasks/t", seed=0)
    write_dataset(tmp_path / "ds", kept, card)
    again, card2 = read_dataset(tmp_path / "ds")
    assert again == kept and card2 == card
    md = (tmp_path / "ds" / "card.md").read_text()
    assert md == card_markdown(card) and "| near_duplicates |" in md and "**1 kept**" in md
    (tmp_path / "ds" / "records.jsonl").write_text("")
    with pytest.raises(ValueError, match="sha256 differs"):
        read_dataset(tmp_path / "ds")


def test_reward_function_and_disabled_near_dup() -> None:
    rng = random.Random(4)
    base = _text(rng)
    recs = [_rec("a", _chat(base)), _rec("b", _chat(base + " more"))]
    kept, counts = apply_filters(recs, FilterOptions(near_dup_threshold=None, min_reward=0.5),
                                 reward_of=lambda r: 1.0 if r.record_id == "a" else 0.0)
    assert [r.record_id for r in kept] == ["a"] and "near_duplicates" not in {c.name for c in counts}
