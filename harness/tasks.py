"""Task sets on disk: load and validate, write, hash, and materialise repository snapshots.

Layout (ARCHITECTURE §4)::

    <task set dir>/tasks.jsonl            one TaskInstance record per line (SWE-bench field names plus ours)
    <task set dir>/snapshots/<instance_id>/         the repository at ``base_commit``, either
                                                    (a) plain files: we ``git init`` and commit them, or
                                                    (b) a git work tree (has ``.git``): ``base_commit`` is checked out
    <task set dir>/snapshots/<instance_id>.tar.gz   the same as an archive (repository root at the top, or under
                                                    a single ``<instance_id>/`` folder)

Plain-file snapshots are committed deterministically (fixed author, committer, dates and message; see
``SNAPSHOT_AUTHOR``), so their commit id is a pure function of the files and ``git_commit_sha`` computes it without
git. The mini task family records that id as ``base_commit``; ``materialize_snapshot`` re-creates the commit and
warns when the record disagrees (user task sets with plain snapshots of a real history cannot reproduce its ids;
grading diffs against the materialised commit either way). Snapshots are one per instance: tasks of one generated
repository differ in their planted bug, so they cannot share a tree.

SWE-bench compatibility: ``FAIL_TO_PASS``/``PASS_TO_PASS`` may be JSON-encoded strings (as in the Hugging Face
dumps) and the SWE-bench fields ``version``, ``environment_setup_commit``, ``hints_text`` and ``created_at`` are
kept under ``extra``. Any other unknown field is an error (it is usually a typo).

The content hash (``TaskSet.sha256``) covers every record (canonical JSON) and every snapshot (file paths and
bytes for folders, ``HEAD`` for git work trees, archive bytes for ``.tar.gz``), in file order.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import logging
import os
import shutil
import subprocess
import tarfile
import tempfile
import zlib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError

from harness.schema import TaskInstance, TaskSet

log = logging.getLogger(__name__)

TASKS_FILE = "tasks.jsonl"
SNAPSHOTS_DIR = "snapshots"
SWE_BENCH_EXTRA_FIELDS = ("version", "environment_setup_commit", "hints_text", "created_at")
SNAPSHOT_AUTHOR = "tgsuite <tgsuite@localhost> 1700000000 +0000"
SNAPSHOT_MESSAGE = "tgsuite snapshot\n"
_GIT_ENV = {
    "GIT_AUTHOR_NAME": "tgsuite",
    "GIT_AUTHOR_EMAIL": "tgsuite@localhost",
    "GIT_AUTHOR_DATE": "1700000000 +0000",
    "GIT_COMMITTER_NAME": "tgsuite",
    "GIT_COMMITTER_EMAIL": "tgsuite@localhost",
    "GIT_COMMITTER_DATE": "1700000000 +0000",
    "GIT_CONFIG_NOSYSTEM": "1",
}
_GIT_OPTS = ["-c", "commit.gpgsign=false", "-c", "core.hooksPath=/dev/null", "-c", "core.autocrlf=false"]

_FIELD_FIXES = {
    "instance_id": ("give every record a unique id of letters, digits, '.', '_' and '-' that starts with a letter or "
                    "digit (at most 200 characters; it becomes a folder name), e.g. 'astropy__astropy-12907'"),
    "FAIL_TO_PASS": "list the hidden tests that must go from failing to passing as pytest node ids",
    "PASS_TO_PASS": "list pytest node ids (a JSON list, possibly empty)",
    "patch": "give the gold patch as a unified diff string (a/ and b/ paths)",
    "test_patch": "give the hidden tests as a unified diff string",
    "split": "use one of train, heldout, test, dev",
    "template_tier": "use one of seen_templates, unseen_templates, n/a",
    "stratum": "use one of twin, no_twin, generalization, n/a",
}


class TaskSetError(ValueError):
    """A task set on disk is malformed; the message names the file, the record, the field and the fix."""


# ----------------------------------------------------------------------------------------------------------------
# Records
# ----------------------------------------------------------------------------------------------------------------


def parse_record(obj: object, *, where: str) -> TaskInstance:
    """Validate one JSON record (SWE-bench or ours) into a ``TaskInstance``; ``where`` names it in errors."""
    if not isinstance(obj, dict):
        raise TaskSetError(f"{where}: a record must be a JSON object, got {type(obj).__name__}")
    rec = dict(obj)
    ident = rec.get("instance_id", "?")
    for key in ("FAIL_TO_PASS", "PASS_TO_PASS"):
        if isinstance(rec.get(key), str):
            try:
                rec[key] = json.loads(rec[key])
            except json.JSONDecodeError as exc:
                raise TaskSetError(
                    f"{where} (instance {ident!r}): field {key!r} is a string but not JSON ({exc}); "
                    "fix: write a JSON list of pytest node ids"
                ) from exc
    if not isinstance(rec.get("extra") or {}, dict):
        raise TaskSetError(f"{where} (instance {ident!r}): field 'extra' must be a JSON object; fix: use {{}} or "
                           "an object of your own keys")
    extra = dict(rec.get("extra") or {})
    for key in SWE_BENCH_EXTRA_FIELDS:
        if key in rec:
            extra[key] = rec.pop(key)
    if extra:
        rec["extra"] = extra
    try:
        inst = TaskInstance.model_validate(rec)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            field = ".".join(str(p) for p in err["loc"]) or "(record)"
            top = str(err["loc"][0]) if err["loc"] else ""
            if err["type"] == "extra_forbidden":
                fix = f"remove it or move it under 'extra' (known fields: {', '.join(TaskInstance.model_fields)})"
            else:
                fix = _FIELD_FIXES.get(top, "see harness.schema.TaskInstance for the expected type")
            problems.append(f"field {field!r}: {err['msg']}; fix: {fix}")
        raise TaskSetError(f"{where} (instance {ident!r}): " + " | ".join(problems)) from None
    _check_log_parser(inst, where)
    from harness.tasks_checks import record_problems

    problems = record_problems(inst)
    if problems:
        raise TaskSetError(f"{where} (instance {inst.instance_id!r}): task-set fault: " + " | ".join(problems))
    return inst


def _check_log_parser(inst: TaskInstance, where: str) -> None:
    """``test_log_parser`` names a parser that exists (swebench's, installed), else a TaskSetError with the fix."""
    name = inst.test_log_parser
    if name == "junit":
        return
    from harness.swebench_compat import SwebenchUnavailable, log_parser_names

    try:
        known = log_parser_names()
    except SwebenchUnavailable as exc:
        raise TaskSetError(f"{where} (instance {inst.instance_id!r}): field 'test_log_parser' is {name!r}, which "
                           f"needs swebench's log parsers: {exc}") from None
    if name not in known:
        raise TaskSetError(f"{where} (instance {inst.instance_id!r}): field 'test_log_parser': unknown parser "
                           f"{name!r}; fix: 'junit' (pytest's JUnit report, the default) or one of {', '.join(known)}")


def _read_records(tasks_file: Path) -> list[tuple[int, TaskInstance]]:
    if not tasks_file.is_file():
        raise TaskSetError(f"{tasks_file}: not found; fix: a task set is a folder with {TASKS_FILE} and {SNAPSHOTS_DIR}/")
    out: list[tuple[int, TaskInstance]] = []
    seen: dict[str, int] = {}
    with tasks_file.open("rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            where = f"{tasks_file}:{lineno}"
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise TaskSetError(f"{where}: not UTF-8 (byte {raw[exc.start]:#04x} at column {exc.start + 1}); "
                                   "fix: save the file as UTF-8") from None
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise TaskSetError(f"{where}: invalid JSON ({exc}); fix: one JSON object per line") from exc
            inst = parse_record(obj, where=where)
            if inst.instance_id in seen:
                raise TaskSetError(
                    f"{where}: duplicate instance_id {inst.instance_id!r} (first on line {seen[inst.instance_id]}); "
                    "fix: instance ids must be unique"
                )
            seen[inst.instance_id] = lineno
            out.append((lineno, inst))
    if not out:
        raise TaskSetError(f"{tasks_file}: no records; fix: write one TaskInstance JSON object per line")
    return out


# Fields added after task sets were published, with their defaults: hashed only when set to something else, so
# adding a field does not change the content hash (and break the resume) of every existing task set.
_LATER_FIELDS: dict[str, Any] = {"test_log_parser": "junit", "stratum": "n/a"}


def _record(instance: TaskInstance) -> dict[str, Any]:
    """The record without the later fields left at their defaults (so older readers still read it)."""
    rec = instance.model_dump(mode="json")
    for key, default in _LATER_FIELDS.items():
        if rec.get(key) == default:
            rec.pop(key)
    return rec


def canonical_record(instance: TaskInstance) -> str:
    """The record as canonical JSON (sorted keys, no spaces): what the content hash covers."""
    return json.dumps(_record(instance), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


# ----------------------------------------------------------------------------------------------------------------
# Snapshots
# ----------------------------------------------------------------------------------------------------------------


def snapshot_path(root: Path, instance_id: str) -> Path | None:
    """The snapshot of ``instance_id`` under ``root`` (folder preferred over archive); None if there is none."""
    folder = root / SNAPSHOTS_DIR / instance_id
    if folder.is_dir():
        return folder
    archive = root / SNAPSHOTS_DIR / f"{instance_id}.tar.gz"
    return archive if archive.is_file() else None


def _git(args: list[str], cwd: Path, *, input: bytes | None = None) -> str:
    env = {**os.environ, **_GIT_ENV}
    res = subprocess.run(["git", *_GIT_OPTS, *args], cwd=cwd, env=env, input=input, capture_output=True, check=False)
    if res.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed in {cwd}: {res.stderr.decode(errors='replace').strip()}")
    return res.stdout.decode(errors="replace").strip()


def snapshot_digest(path: Path) -> str:
    """Digest of one snapshot: files and bytes of a folder, HEAD of a git work tree, bytes of an archive."""
    if path.is_file():
        return "tar:" + hashlib.sha256(path.read_bytes()).hexdigest()
    if (path / ".git").exists():
        return "git:" + _git(["rev-parse", "HEAD"], path)
    h = hashlib.sha256()
    for rel, data in sorted(_walk_files(path).items()):
        h.update(rel.encode() + b"\0" + str(len(data)).encode() + b"\0" + data)
    return "files:" + h.hexdigest()


def _walk_files(root: Path) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != ".git"]
        for name in filenames:
            full = Path(dirpath) / name
            out[full.relative_to(root).as_posix()] = full.read_bytes()
    return out


def git_commit_sha(files: Mapping[str, bytes]) -> str:
    """Commit id git gives ``files`` (mode 100644) committed as a root commit with the fixed snapshot identity."""
    tree: dict[str, Any] = {}
    for rel, data in files.items():
        parts = rel.split("/")
        node = tree
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = data

    def obj(kind: str, body: bytes) -> str:
        return hashlib.sha1(f"{kind} {len(body)}\0".encode() + body).hexdigest()  # noqa: S324 - git object id

    def tree_sha(node: dict[str, Any]) -> str:
        entries = []
        for name, value in node.items():
            if isinstance(value, dict):
                entries.append((name + "/", b"40000 " + name.encode() + b"\0" + bytes.fromhex(tree_sha(value))))
            else:
                entries.append((name, b"100644 " + name.encode() + b"\0" + bytes.fromhex(obj("blob", value))))
        return obj("tree", b"".join(e for _, e in sorted(entries)))

    body = f"tree {tree_sha(tree)}\nauthor {SNAPSHOT_AUTHOR}\ncommitter {SNAPSHOT_AUTHOR}\n\n{SNAPSHOT_MESSAGE}"
    return obj("commit", body.encode())


def _extract(archive: Path, dest: Path, instance_id: str) -> None:
    try:
        with tarfile.open(archive, "r:gz") as tar:
            tar.extractall(dest, filter="data")
    except (tarfile.TarError, EOFError, OSError, zlib.error) as exc:
        raise TaskSetError(f"{archive}: snapshot archive of {instance_id!r} is corrupt ({type(exc).__name__}: {exc}); "
                           "fix: re-create it (e.g. `tgsuite tasks make-mini` again) or replace it with a folder "
                           f"{SNAPSHOTS_DIR}/{instance_id}/") from None
    inner = dest / instance_id
    if inner.is_dir() and [p.name for p in dest.iterdir()] == [instance_id]:
        for child in inner.iterdir():
            shutil.move(str(child), dest / child.name)
        inner.rmdir()


def materialize_snapshot(root: str | Path, instance: TaskInstance, dest: str | Path) -> str:
    """Put ``instance``'s repository at ``base_commit`` into ``dest`` (created; must be empty) as a git repo.

    Returns the commit id of ``HEAD`` in ``dest``: grading diffs against it. Hidden tests are NOT included
    (see ``write_hidden_tests``).
    """
    root, dest = Path(root), Path(dest)
    src = snapshot_path(root, instance.instance_id)
    if src is None:
        raise TaskSetError(f"{root / SNAPSHOTS_DIR}: no snapshot for {instance.instance_id!r}; fix: add "
                           f"{SNAPSHOTS_DIR}/{instance.instance_id}/ or {SNAPSHOTS_DIR}/{instance.instance_id}.tar.gz")
    if dest.exists() and any(dest.iterdir()):
        raise FileExistsError(f"{dest} is not empty; materialize_snapshot needs an empty or missing folder")
    dest.mkdir(parents=True, exist_ok=True)
    if src.is_dir():
        shutil.copytree(src, dest, symlinks=True, dirs_exist_ok=True)
    else:
        _extract(src, dest, instance.instance_id)
    if (dest / ".git").exists():
        if _git(["rev-parse", "HEAD"], dest) != instance.base_commit:
            _git(["checkout", "-q", instance.base_commit], dest)
        return _git(["rev-parse", "HEAD"], dest)
    _git(["-c", "init.defaultBranch=main", "init", "-q"], dest)
    _git(["add", "-A"], dest)
    _git(["commit", "-q", "--allow-empty", "-m", SNAPSHOT_MESSAGE.strip()], dest)
    head = _git(["rev-parse", "HEAD"], dest)
    if head != instance.base_commit:
        log.warning("%s: snapshot committed as %s but the record says base_commit=%s; diffs use %s",
                    instance.instance_id, head, instance.base_commit, head)
    return head


def apply_patch(repo: str | Path, patch: str) -> None:
    """``git apply`` a unified diff in ``repo`` (raises RuntimeError naming git's complaint)."""
    if patch.strip():
        _git(["apply", "--whitespace=nowarn", "-"], Path(repo), input=patch.encode())


def write_hidden_tests(root: str | Path, instance: TaskInstance, dest: str | Path) -> list[str]:
    """Write the files the hidden ``test_patch`` creates or changes (post-patch content) under ``dest``.

    Returns their repository-relative paths. The agent must never see them; the grader copies them in.
    """
    dest = Path(dest)
    with tempfile.TemporaryDirectory(prefix="tgsuite-hidden-") as tmp:
        repo = Path(tmp) / "repo"
        materialize_snapshot(root, instance, repo)
        apply_patch(repo, instance.test_patch)
        changed = _git(["status", "--porcelain", "--untracked-files=all"], repo).splitlines()
        paths = sorted(line[3:].strip() for line in changed if line.strip())
        for rel in paths:
            target = dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            if (repo / rel).exists():
                shutil.copy2(repo / rel, target)
    return paths


# ----------------------------------------------------------------------------------------------------------------
# Task sets
# ----------------------------------------------------------------------------------------------------------------


def load_task_set(path: str | Path, *, require_snapshots: bool = True) -> TaskSet:
    """Load and validate a task set folder (or its ``tasks.jsonl``) and compute its content hash.

    Raises ``TaskSetError`` naming the file, line, instance, field and fix for: bad JSON, schema violations,
    duplicate ids, and (unless ``require_snapshots=False``) missing snapshots.
    """
    path = Path(path)
    tasks_file = path if path.suffix == ".jsonl" else path / TASKS_FILE
    root = tasks_file.parent
    records = _read_records(tasks_file)
    h = hashlib.sha256()
    for lineno, inst in records:
        h.update(canonical_record(inst).encode() + b"\n")
        snap = snapshot_path(root, inst.instance_id)
        if snap is None:
            if require_snapshots:
                raise TaskSetError(
                    f"{tasks_file}:{lineno} (instance {inst.instance_id!r}): no snapshot; fix: put the repository "
                    f"at base_commit in {SNAPSHOTS_DIR}/{inst.instance_id}/ or {SNAPSHOTS_DIR}/{inst.instance_id}.tar.gz"
                )
            h.update(b"snapshot:none\n")
        else:
            h.update(snapshot_digest(snap).encode() + b"\n")
    return TaskSet(name=root.resolve().name, path=str(root), sha256=h.hexdigest(),
                   instances=[inst for _, inst in records])


SnapshotFormat = Literal["dir", "tar.gz"]


def snapshot_archive(files: Mapping[str, bytes]) -> bytes:
    """A deterministic ``.tar.gz`` of ``files`` (sorted, mode 0644, mtime 0, no owner names, gzip mtime 0)."""
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0, compresslevel=6) as gz:
        with tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for rel in sorted(files):
                info = tarfile.TarInfo(rel)
                info.size, info.mode, info.mtime = len(files[rel]), 0o644, 0
                tar.addfile(info, io.BytesIO(files[rel]))
    return buf.getvalue()


def write_task_set(
    out_dir: str | Path,
    instances: Iterable[TaskInstance],
    snapshots: Mapping[str, Mapping[str, bytes]],
    *,
    overwrite: bool = False,
    snapshot_format: SnapshotFormat = "dir",
) -> Path:
    """Write ``tasks.jsonl`` and one snapshot per instance; returns the folder.

    ``snapshots`` maps instance id -> {relative path: bytes}. ``snapshot_format="dir"`` writes plain
    ``snapshots/<instance_id>/`` folders (easy to browse); ``"tar.gz"`` writes one deterministic
    ``snapshots/<instance_id>.tar.gz`` each (one file per task instead of one per repository file: much faster for
    thousands of tasks). Refuses to overwrite an existing task set unless ``overwrite`` (then the old
    ``tasks.jsonl`` and ``snapshots/`` are removed first).
    """
    if snapshot_format not in ("dir", "tar.gz"):
        raise ValueError(f"snapshot_format must be 'dir' or 'tar.gz', got {snapshot_format!r}")
    out = Path(out_dir)
    tasks_file = out / TASKS_FILE
    if tasks_file.exists() or (out / SNAPSHOTS_DIR).exists():
        if not overwrite:
            raise FileExistsError(f"{out} already holds a task set; choose another folder or pass overwrite=True")
        tasks_file.unlink(missing_ok=True)
        shutil.rmtree(out / SNAPSHOTS_DIR, ignore_errors=True)
    (out / SNAPSHOTS_DIR).mkdir(parents=True, exist_ok=True)
    lines = []
    for inst in instances:
        files = snapshots.get(inst.instance_id)
        if files is None:
            raise ValueError(f"write_task_set: no snapshot files given for {inst.instance_id!r}")
        if snapshot_format == "tar.gz":
            (out / SNAPSHOTS_DIR / f"{inst.instance_id}.tar.gz").write_bytes(snapshot_archive(files))
        else:
            base = out / SNAPSHOTS_DIR / inst.instance_id
            for rel, data in files.items():
                target = base / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data)
        lines.append(json.dumps(_record(inst), separators=(",", ":"), ensure_ascii=False) + "\n")
    tasks_file.write_text("".join(lines), encoding="utf-8")
    return out
