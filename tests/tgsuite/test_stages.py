"""The reproduction's stage runner: skip unchanged stages, re-run on changed inputs or missing outputs."""

from __future__ import annotations

import json
from pathlib import Path

from tgsuite.pipeline.stage_runner import StageRunner, canonical_hash


def _runner(tmp_path: Path, **kw: object) -> StageRunner:
    return StageRunner(tmp_path, echo=lambda s: None, **kw)  # type: ignore[arg-type]


def test_canonical_hash_ignores_key_order() -> None:
    assert canonical_hash({"a": 1, "b": [1, 2]}) == canonical_hash({"b": [1, 2], "a": 1})
    assert canonical_hash({"a": 1}) != canonical_hash({"a": 2})


def test_stage_skipped_when_inputs_unchanged(tmp_path: Path) -> None:
    calls: list[int] = []
    out = tmp_path / "artifact.txt"

    def work() -> dict[str, object]:
        calls.append(1)
        out.write_text("x")
        return {"paths": {"artifact": str(out)}, "n": len(calls)}

    r1 = _runner(tmp_path)
    assert r1.run("make", {"k": 1}, work)["n"] == 1
    r2 = _runner(tmp_path)
    assert r2.run("make", {"k": 1}, work)["n"] == 1
    assert calls == [1]
    assert r2.timings()["make"]["skipped"] is True
    rec = json.loads((tmp_path / "stages" / "make.json").read_text())
    assert rec["input_hash"] == canonical_hash({"k": 1})


def test_stage_reruns_on_changed_input_missing_output_or_force(tmp_path: Path) -> None:
    calls: list[int] = []
    out = tmp_path / "artifact.txt"

    def work() -> dict[str, object]:
        calls.append(1)
        out.write_text("x")
        return {"paths": {"artifact": str(out)}}

    _runner(tmp_path).run("make", {"k": 1}, work)
    _runner(tmp_path).run("make", {"k": 2}, work)
    assert len(calls) == 2
    out.unlink()
    _runner(tmp_path).run("make", {"k": 2}, work)
    assert len(calls) == 3
    _runner(tmp_path, force=frozenset({"make"})).run("make", {"k": 2}, work)
    assert len(calls) == 4


def test_failed_stage_leaves_no_record(tmp_path: Path) -> None:
    def boom() -> dict[str, object]:
        raise RuntimeError("nope")

    runner = _runner(tmp_path)
    try:
        runner.run("bad", {}, boom)
    except RuntimeError:
        pass
    assert not (tmp_path / "stages" / "bad.json").exists()


def test_a_resumable_stage_directory_is_emptied_only_when_the_inputs_changed(tmp_path: Path) -> None:
    """The evaluations resume inside their directory; after an input change (e.g. retrained checkpoints at the same
    paths) the episodes made from the old inputs must go, after an interruption they must stay."""
    from tgsuite.pipeline.stage_runner import fresh_or_resumed, running_input_hash

    d = tmp_path / "eval"

    def work(mark: str) -> dict[str, object]:
        fresh_or_resumed(d, echo=lambda s: None)
        (d / mark).write_text("episode")
        return {"files": sorted(p.name for p in d.iterdir() if not p.name.startswith("."))}

    assert running_input_hash() is None
    fresh_or_resumed(d)  # outside a stage: nothing happens
    assert not d.exists()
    r = _runner(tmp_path)
    assert r.run("ev", {"ckpt": 1}, lambda: work("a"))["files"] == ["a"]
    assert r.run("ev", {"ckpt": 1}, lambda: work("b"))["files"] == ["a"]  # unchanged: skipped, nothing touched
    (d / "interrupted").write_text("partial")  # a run that died before its record: same inputs, resumed
    (tmp_path / "stages" / "ev.json").unlink()
    assert r.run("ev", {"ckpt": 1}, lambda: work("c"))["files"] == ["a", "c", "interrupted"]
    assert r.run("ev", {"ckpt": 2}, lambda: work("d"))["files"] == ["d"]  # other inputs: afresh
    assert running_input_hash() is None
