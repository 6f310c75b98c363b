"""harness.tasks: loading and validating task sets, content hash, snapshots (plain, git, tar.gz), hidden tests."""

from __future__ import annotations

import json
import subprocess
import tarfile
from pathlib import Path

import pytest

from harness.schema import TaskInstance
from harness.tasks import (
    TaskSetError,
    apply_patch,
    git_commit_sha,
    load_task_set,
    materialize_snapshot,
    parse_record,
    write_hidden_tests,
    write_task_set,
)

FILES = {
    "calc/__init__.py": b"",
    "calc/core.py": b"def add(a, b):\n    return a - b\n",
    "tests/test_core.py": b"from calc.core import add\n\n\ndef test_add():\n    assert add(1, 2) == 3\n",
    "a-b.txt": b"x\n",
    "a.b": b"y\n",
    "a/nested/deep.txt": b"z\n",
}
GOLD = (
    "diff --git a/calc/core.py b/calc/core.py\n--- a/calc/core.py\n+++ b/calc/core.py\n@@ -1,2 +1,2 @@\n"
    " def add(a, b):\n-    return a - b\n+    return a + b\n"
)
HIDDEN = (
    "diff --git a/tests/test_hidden.py b/tests/test_hidden.py\nnew file mode 100644\n--- /dev/null\n"
    "+++ b/tests/test_hidden.py\n@@ -0,0 +1,3 @@\n+from calc.core import add\n+def test_h():\n"
    "+    assert add(2, 2) == 4\n"
)


def _inst(iid: str = "org__calc-1", **kw: object) -> TaskInstance:
    base = dict(instance_id=iid, repo="org/calc", base_commit=git_commit_sha(FILES), problem_statement="add() is wrong",
                patch=GOLD, test_patch=HIDDEN, FAIL_TO_PASS=["tests/test_hidden.py::test_h"])
    base.update(kw)
    return TaskInstance(**base)  # type: ignore[arg-type]


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture()
def task_dir(tmp_path: Path) -> Path:
    return write_task_set(tmp_path / "ts", [_inst(), _inst("org__calc-2")], {"org__calc-1": FILES, "org__calc-2": FILES})


def test_roundtrip_and_hash_is_stable(task_dir: Path) -> None:
    a, b = load_task_set(task_dir), load_task_set(task_dir / "tasks.jsonl")
    assert [i.instance_id for i in a.instances] == ["org__calc-1", "org__calc-2"]
    assert a.sha256 == b.sha256 and len(a.sha256) == 64
    assert a.instances[0] == _inst()


def test_hash_covers_snapshot_bytes_and_records(task_dir: Path) -> None:
    before = load_task_set(task_dir).sha256
    target = task_dir / "snapshots/org__calc-2/calc/core.py"
    target.write_bytes(target.read_bytes() + b"# edit\n")
    changed = load_task_set(task_dir).sha256
    assert changed != before
    lines = (task_dir / "tasks.jsonl").read_text().splitlines()
    rec = json.loads(lines[1])
    rec["difficulty"] = "hard"
    (task_dir / "tasks.jsonl").write_text(lines[0] + "\n" + json.dumps(rec) + "\n")
    assert load_task_set(task_dir).sha256 != changed


def test_materialize_plain_snapshot_reproduces_the_recorded_commit(task_dir: Path, tmp_path: Path) -> None:
    inst = load_task_set(task_dir).instances[0]
    head = materialize_snapshot(task_dir, inst, tmp_path / "repo")
    assert head == inst.base_commit == _git(tmp_path / "repo", "rev-parse", "HEAD")
    assert _git(tmp_path / "repo", "status", "--porcelain") == ""
    assert not (tmp_path / "repo/tests/test_hidden.py").exists()
    apply_patch(tmp_path / "repo", inst.patch)
    assert "return a + b" in (tmp_path / "repo/calc/core.py").read_text()
    with pytest.raises(FileExistsError):
        materialize_snapshot(task_dir, inst, tmp_path / "repo")


def test_write_hidden_tests_writes_only_the_hidden_files(task_dir: Path, tmp_path: Path) -> None:
    inst = load_task_set(task_dir).instances[0]
    paths = write_hidden_tests(task_dir, inst, tmp_path / "hidden")
    assert paths == ["tests/test_hidden.py"]
    assert sorted(p.relative_to(tmp_path / "hidden").as_posix() for p in (tmp_path / "hidden").rglob("*.py")) == paths


def test_tar_gz_snapshot_with_top_folder(tmp_path: Path) -> None:
    src = tmp_path / "src" / "org__calc-1"
    for rel, data in FILES.items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_bytes(data)
    root = tmp_path / "ts"
    (root / "snapshots").mkdir(parents=True)
    with tarfile.open(root / "snapshots/org__calc-1.tar.gz", "w:gz") as tar:
        tar.add(src, arcname="org__calc-1")
    (root / "tasks.jsonl").write_text(_inst().model_dump_json() + "\n")
    ts = load_task_set(root)
    head = materialize_snapshot(root, ts.instances[0], tmp_path / "repo")
    assert head == ts.instances[0].base_commit
    assert (tmp_path / "repo/calc/core.py").read_bytes() == FILES["calc/core.py"]


def test_git_snapshot_checks_out_base_commit(tmp_path: Path) -> None:
    snap = tmp_path / "ts/snapshots/org__calc-1"
    snap.mkdir(parents=True)
    (snap / "f.py").write_text("v = 1\n")
    _git(snap, "init", "-q")
    env = ["-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    _git(snap, *env, "add", "-A")
    _git(snap, *env, "commit", "-q", "-m", "one")
    first = _git(snap, "rev-parse", "HEAD")
    (snap / "f.py").write_text("v = 2\n")
    _git(snap, *env, "commit", "-q", "-am", "two")
    (tmp_path / "ts/tasks.jsonl").write_text(_inst(base_commit=first).model_dump_json() + "\n")
    ts = load_task_set(tmp_path / "ts")
    assert materialize_snapshot(ts.path, ts.instances[0], tmp_path / "repo") == first
    assert (tmp_path / "repo/f.py").read_text() == "v = 1\n"


def test_swe_bench_style_record_is_accepted() -> None:
    rec = json.loads(_inst().model_dump_json())
    rec["FAIL_TO_PASS"] = json.dumps(rec["FAIL_TO_PASS"])
    rec["PASS_TO_PASS"] = "[]"
    rec.update(version="1.2", hints_text="", environment_setup_commit="abc", created_at="2023-01-01")
    for key in ("test_cmd", "image", "behaviour", "cluster", "split", "difficulty", "template_tier", "bug_family",
                "visible_test_cmd", "extra"):
        rec.pop(key)
    inst = parse_record(rec, where="x.jsonl:1")
    assert inst.FAIL_TO_PASS == ["tests/test_hidden.py::test_h"] and inst.PASS_TO_PASS == []
    assert inst.extra == {"version": "1.2", "hints_text": "", "environment_setup_commit": "abc",
                          "created_at": "2023-01-01"}


@pytest.mark.parametrize(
    ("mutate", "needles"),
    [
        (lambda r: r.pop("problem_statement"), ["line 2", "org__calc-2", "problem_statement", "fix:"]),
        (lambda r: r.update(FAIL_TO_PASS=[]), ["FAIL_TO_PASS", "fix:"]),
        (lambda r: r.update(FAIL_TO_PASS="[not json"), ["FAIL_TO_PASS", "not JSON"]),
        (lambda r: r.update(splitt="train"), ["splitt", "remove it or move it under 'extra'"]),
        (lambda r: r.update(split="validation"), ["split", "train, heldout, test, dev"]),
    ],
)
def test_bad_records_name_line_instance_field_and_fix(task_dir: Path, mutate, needles: list[str]) -> None:
    lines = (task_dir / "tasks.jsonl").read_text().splitlines()
    rec = json.loads(lines[1])
    mutate(rec)
    (task_dir / "tasks.jsonl").write_text(lines[0] + "\n" + json.dumps(rec) + "\n")
    with pytest.raises(TaskSetError) as err:
        load_task_set(task_dir)
    msg = str(err.value)
    assert "tasks.jsonl:2" in msg
    for needle in needles[1:] if needles[0] == "line 2" else needles:
        assert needle in msg, msg


def test_duplicates_bad_json_and_missing_snapshots_are_refused(task_dir: Path) -> None:
    lines = (task_dir / "tasks.jsonl").read_text().splitlines()
    (task_dir / "tasks.jsonl").write_text(lines[0] + "\n" + lines[0] + "\n")
    with pytest.raises(TaskSetError, match=r"tasks.jsonl:2: duplicate instance_id 'org__calc-1' \(first on line 1\)"):
        load_task_set(task_dir)
    (task_dir / "tasks.jsonl").write_text(lines[0] + "\n{oops\n")
    with pytest.raises(TaskSetError, match=r"tasks.jsonl:2: invalid JSON .*one JSON object per line"):
        load_task_set(task_dir)
    (task_dir / "tasks.jsonl").write_text(lines[0] + "\n" + lines[1].replace("org__calc-2", "org__calc-9") + "\n")
    with pytest.raises(TaskSetError, match=r"org__calc-9.*no snapshot; fix: put the repository"):
        load_task_set(task_dir)
    assert len(load_task_set(task_dir, require_snapshots=False).instances) == 2
    with pytest.raises(TaskSetError, match="not found"):
        load_task_set(task_dir / "nothing")


def test_write_task_set_refuses_to_overwrite(task_dir: Path) -> None:
    with pytest.raises(FileExistsError):
        write_task_set(task_dir, [_inst()], {"org__calc-1": FILES})
    write_task_set(task_dir, [_inst()], {"org__calc-1": FILES}, overwrite=True)
    assert [i.instance_id for i in load_task_set(task_dir).instances] == ["org__calc-1"]


def test_tar_gz_task_sets_are_deterministic_and_materialise(tmp_path: Path) -> None:
    a = write_task_set(tmp_path / "a", [_inst()], {"org__calc-1": FILES}, snapshot_format="tar.gz")
    b = write_task_set(tmp_path / "b", [_inst()], {"org__calc-1": FILES}, snapshot_format="tar.gz")
    arch = "snapshots/org__calc-1.tar.gz"
    assert (a / arch).read_bytes() == (b / arch).read_bytes()
    ts = load_task_set(a)
    assert ts.sha256 == load_task_set(b).sha256
    assert materialize_snapshot(a, ts.instances[0], tmp_path / "repo") == ts.instances[0].base_commit
    with pytest.raises(ValueError, match="snapshot_format"):
        write_task_set(tmp_path / "c", [_inst()], {"org__calc-1": FILES}, snapshot_format="zip")  # type: ignore[arg-type]


def test_cli_make_mini_and_validate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import argparse

    from tgsuite.commands import tasks as cmd
    from tgsuite.commands.common import CLIError

    parser = argparse.ArgumentParser(prog="tgsuite")
    cmd.register(parser.add_subparsers(dest="command"))
    out = tmp_path / "mini"
    argv = ["tasks", "make-mini", "--out", str(out), "--split", "heldout", "--repos", "2", "--tasks-per-repo", "1",
            "--seed", "3"]
    args = parser.parse_args(argv)
    assert args.func(args) == 0
    assert "wrote 2 tasks from 2 repositories" in capsys.readouterr().out
    with pytest.raises(CLIError, match="--overwrite"):
        args.func(parser.parse_args(argv))
    with pytest.raises(SystemExit):
        parser.parse_args([*argv[:-3], "0", "--seed", "3"])  # --tasks-per-repo 0 is refused by argparse
    first = load_task_set(out).instances[0].instance_id
    args = parser.parse_args(["tasks", "validate", str(out), "--sandbox", "local", "--runs", "1", "--instance", first])
    assert args.func(args) == 0
    printed = capsys.readouterr().out
    ts = load_task_set(out)
    assert "1 valid, 0 rejected" in printed and f"sha256 = \"{ts.sha256}\"" in printed and len(ts.sha256) == 64
    assert (out / "validation.json").is_file()
    args = parser.parse_args(["tasks", "validate", str(tmp_path / "nothing"), "--sandbox", "local"])
    with pytest.raises(CLIError, match="not found"):
        args.func(args)


# ---------------------------------------------------------------- issue #14 items 2 and 11


@pytest.mark.parametrize("bad", ["/tmp/victim", "a/b", "../up", ".hidden", "with space", "x" * 201, "-lead"])
def test_unsafe_instance_id_is_refused_naming_line_field_and_fix(tmp_path: Path, bad: str) -> None:
    import json as _json

    from harness.tasks import TaskSetError, _read_records

    rec = {"instance_id": bad, "repo": "r", "base_commit": "b", "problem_statement": "p", "patch": "",
           "test_patch": "", "FAIL_TO_PASS": ["t.py::a"]}
    f = tmp_path / "tasks.jsonl"
    f.write_text("\n" + _json.dumps(rec) + "\n")
    with pytest.raises(TaskSetError, match=r"tasks\.jsonl:2 .*field 'instance_id'.*fix: give every record"):
        _read_records(f)


def test_non_utf8_task_file_names_the_line(tmp_path: Path) -> None:
    from harness.tasks import TaskSetError, _read_records

    f = tmp_path / "tasks.jsonl"
    f.write_bytes(b'\n{"instance_id": "\xff"}\n')
    with pytest.raises(TaskSetError, match=r"tasks\.jsonl:2: not UTF-8 \(byte 0xff at column 18\); fix: save"):
        _read_records(f)
