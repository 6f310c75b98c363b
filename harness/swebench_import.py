"""Turn SWE-bench records plus local git clones into a task set (``tgsuite tasks import-swebench``).

For each record (JSON Lines or a JSON list, SWE-bench's field names) the repository ``owner/name`` is looked up in
``--repos DIR`` as ``owner__name/``, ``owner/name/`` or ``name/`` (a git clone that contains ``base_commit``); the
files at ``base_commit`` (``git archive``) become the instance's snapshot, ``snapshots/<id>.tar.gz``.

What is kept: every SWE-bench field; fields the schema does not know (``hints_text``, ``version``,
``environment_setup_commit``, ``created_at``, and any other) go to ``extra`` instead of being refused, and so does
the original ``base_commit`` (``extra["swebench_base_commit"]``): the record's ``base_commit`` becomes the commit
the plain-file snapshot materialises to (``harness.tasks.materialize_snapshot``, checked on the written snapshot),
which grading diffs against.
``FAIL_TO_PASS``/``PASS_TO_PASS`` may be JSON strings as in the Hugging Face dumps. When the ``swebench`` package
is installed, the name of SWE-bench's log parser for the repository goes to ``extra["swebench_log_parser"]``
(``harness.swebench_compat``; e.g. ``parse_log_django``).

Test command: the record's own ``test_cmd`` when it has one, else ``--test-cmd`` (default ``python -m pytest``);
``--env KEY=VALUE`` prefixes it with ``env KEY=VALUE`` (the grading script runs it under ``timeout``, which takes a
command, not shell assignments). How its result is read: the record's own ``test_log_parser`` when it has one,
else ``--test-log-parser`` (default ``junit``: pytest's JUnit report; any other value names one of swebench's
``parse_log_<name>`` parsers, e.g. ``django`` for unittest's verbose output, which then grades the command's
printed log: ``harness.grading``). A repository that SWE-bench grades with a parser other than pytest's, imported
with ``junit``, is warned about: its tests are likely not run by pytest (Django, sympy).

Environments per (repository, version): ``environments={"owner/name": {"VERSION": ["pkg==1.0", ...]}}`` (the
record's ``version`` field picks the entry) and ``image_for(pins) -> tag`` (``harness.env_images.ensure_env_image``
from the CLI: wheels downloaded on the host, installed offline, cached by content hash) set the instance's
``image``; the pins are kept in ``extra["environment"]``. Records without an entry run in the base image.

Not covered (refused or left out, never faked): symbolic links in the snapshot are dropped (counted in
``extra["snapshot_symlinks_dropped"]``); git submodules are not fetched; the repository itself is not installed
(a ``src/`` layout needs ``--env PYTHONPATH=src:/opt/tgsuite-env``);
file modes are not kept (snapshots are mode 0644: run scripts through the interpreter, e.g. ``python bin/test``).
"""

from __future__ import annotations

import contextlib
import io
import logging
import subprocess
import tarfile
import tempfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.json_records import decode_utf8, json_list_or_lines
from harness.schema import TaskInstance
from harness.tasks import TASKS_FILE, TaskSetError, git_commit_sha, materialize_snapshot, parse_record, write_task_set

log = logging.getLogger(__name__)

DEFAULT_TEST_CMD = "python -m pytest"
DEFAULT_LOG_PARSER = "junit"
_NOT_PYTEST_PARSERS = ("parse_log_django", "parse_log_sympy")  # the other swebench parsers read pytest output


@dataclass(frozen=True)
class ImportSummary:
    out: Path
    instances: int
    repos: list[str]
    symlinks_dropped: dict[str, int] = field(default_factory=dict)


def read_records(path: str | Path) -> list[tuple[str, dict[str, Any]]]:
    """(where, record) pairs from JSON Lines or one JSON list; raises TaskSetError naming the line."""
    path = Path(path)
    try:
        pairs = json_list_or_lines(path, decode_utf8(path, path.read_bytes(), "records"), "SWE-bench record")
    except ValueError as exc:
        raise TaskSetError(str(exc)) from None
    for where, obj in pairs:
        if not isinstance(obj, dict):
            raise TaskSetError(f"{where}: a record must be a JSON object, got {type(obj).__name__}; fix: one SWE-bench "
                               "record (a JSON object) per line, or a JSON list of them")
    if not pairs:
        raise TaskSetError(f"{path}: no records; fix: one SWE-bench record (a JSON object) per line")
    return pairs


def find_clone(repos_dir: Path, repo: str, where: str) -> Path:
    """The local clone of ``owner/name`` under ``repos_dir`` (``owner__name``, ``owner/name`` or ``name``)."""
    owner, _, name = repo.partition("/")
    for cand in (repos_dir / f"{owner}__{name}", repos_dir / owner / name, repos_dir / (name or owner)):
        if (cand / ".git").exists():
            return cand
    raise TaskSetError(f"{where}: no git clone of {repo!r} in {repos_dir} (looked for {owner}__{name}/, {repo}/, "
                       f"{name}/); fix: git clone https://github.com/{repo} {repos_dir / f'{owner}__{name}'}")


def files_at(clone: Path, commit: str, where: str) -> tuple[dict[str, bytes], int]:
    """Regular files of ``commit`` (``git archive``) and the number of symbolic links left out."""
    res = subprocess.run(["git", "-c", "safe.directory=*", "archive", "--format=tar", commit], cwd=clone,
                         capture_output=True, timeout=600)
    if res.returncode != 0:
        raise TaskSetError(f"{where}: {clone} has no commit {commit} ({res.stderr.decode(errors='replace').strip()}); "
                           "fix: git fetch the full history into the clone")
    files: dict[str, bytes] = {}
    links = 0
    with tarfile.open(fileobj=io.BytesIO(res.stdout)) as tar:
        for member in tar.getmembers():
            if member.issym() or member.islnk():
                links += 1
            elif member.isfile():
                data = tar.extractfile(member)
                files[member.name] = data.read() if data is not None else b""
    return files, links


def to_instance(rec: dict[str, Any], files: dict[str, bytes], *, where: str, test_cmd: str,
                env: dict[str, str], links: int, image: str | None = None,
                environment: list[str] | None = None, test_log_parser: str = DEFAULT_LOG_PARSER) -> TaskInstance:
    """One record → ``TaskInstance`` (module docstring: unknown fields to ``extra``, base commit remapped)."""
    known = set(TaskInstance.model_fields)
    extra = dict(rec.get("extra") or {}) | {k: v for k, v in rec.items() if k not in known}
    extra["swebench_base_commit"] = rec.get("base_commit")
    if links:
        extra["snapshot_symlinks_dropped"] = links
    if environment:
        extra["environment"] = list(environment)
    parser = _log_parser(rec["repo"])
    if parser is not None:
        extra["swebench_log_parser"] = parser
    cmd = rec.get("test_cmd") or test_cmd
    if env:
        cmd = "env " + " ".join(f"{k}={v}" for k, v in env.items()) + " " + cmd
    body = {k: v for k, v in rec.items() if k in known} | {"extra": extra, "test_cmd": cmd,
                                                            "base_commit": git_commit_sha(files)}
    body.setdefault("test_log_parser", test_log_parser)
    if parser in _NOT_PYTEST_PARSERS and body["test_log_parser"] == DEFAULT_LOG_PARSER:
        log.warning("%s: SWE-bench grades %s with %s, this task with pytest's JUnit report; if its tests are not run "
                    "by pytest, fix: --test-log-parser %s and the repository's own --test-cmd", where, rec["repo"],
                    parser, parser.removeprefix("parse_log_"))
    if image is not None:
        body["image"] = image
    return parse_record(body, where=where)


def _heads(out: Path, instances: list[TaskInstance]) -> list[str]:
    """The commit each written snapshot materialises to (what grading diffs against); equal to
    ``git_commit_sha(files)`` unless git rewrites files on ``add`` (attributes), which only git itself knows."""
    heads = []
    with tempfile.TemporaryDirectory(prefix="tgsuite-import-") as tmp:
        for inst in instances:
            with _quiet_tasks_log():
                heads.append(materialize_snapshot(out, inst, Path(tmp) / inst.instance_id))
    return heads


@contextlib.contextmanager
def _quiet_tasks_log() -> Iterator[None]:
    """materialize_snapshot warns when the head differs from the record; here that is what we are finding out."""
    tasks_log = logging.getLogger("harness.tasks")
    level = tasks_log.level
    tasks_log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        tasks_log.setLevel(level)


def _log_parser(repo: str) -> str | None:
    """SWE-bench's parser name for the repository (``harness.swebench_compat``), None without swebench."""
    from harness.swebench_compat import SwebenchUnavailable, parser_name

    try:
        return parser_name(repo)
    except SwebenchUnavailable:
        return None


def environment_for(rec: dict[str, Any], environments: Mapping[str, Mapping[str, list[str]]]) -> list[str] | None:
    """The pins of the record's (repository, version), or None when the mapping has no entry for them."""
    return (environments.get(rec["repo"]) or {}).get(str(rec.get("version", ""))) or None


def import_swebench(records: str | Path, repos_dir: str | Path, out_dir: str | Path, *,
                    test_cmd: str = DEFAULT_TEST_CMD, test_log_parser: str = DEFAULT_LOG_PARSER,
                    env: dict[str, str] | None = None, overwrite: bool = False,
                    environments: Mapping[str, Mapping[str, list[str]]] | None = None,
                    image_for: Callable[[list[str]], str] | None = None) -> ImportSummary:
    """Import every record (module docstring); raises TaskSetError naming the record and the fix."""
    if environments and image_for is None:
        raise ValueError("import_swebench: environments given without image_for (the image builder)")
    built: dict[tuple[str, ...], str] = {}
    instances, snapshots, dropped = [], {}, {}
    for where, rec in read_records(records):
        for key in ("instance_id", "repo", "base_commit"):
            if not isinstance(rec.get(key), str) or not rec[key]:
                raise TaskSetError(f"{where}: field {key!r} is missing or not a string; fix: a SWE-bench record has "
                                   "instance_id, repo (owner/name), base_commit, patch, test_patch, FAIL_TO_PASS")
        clone = find_clone(Path(repos_dir), rec["repo"], where)
        files, links = files_at(clone, rec["base_commit"], where)
        pins = environment_for(rec, environments or {})
        image = None
        if pins is not None and image_for is not None:
            pin_key = tuple(sorted(pins))
            image = built[pin_key] if pin_key in built else built.setdefault(pin_key, image_for(list(pin_key)))
        inst = to_instance(rec, files, where=where, test_cmd=test_cmd, env=dict(env or {}), links=links,
                           image=image, environment=pins, test_log_parser=test_log_parser)
        if inst.instance_id in snapshots:
            raise TaskSetError(f"{where}: instance {inst.instance_id!r} appears twice; fix: keep one record per id")
        instances.append(inst)
        snapshots[inst.instance_id] = files
        if links:
            dropped[inst.instance_id] = links
            log.warning("%s: %d symbolic link(s) at %s left out of the snapshot", inst.instance_id, links,
                        rec["base_commit"])
    out = write_task_set(out_dir, instances, snapshots, overwrite=overwrite, snapshot_format="tar.gz")
    fixed = [i.model_copy(update={"base_commit": head}) for i, head in zip(instances, _heads(out, instances),
                                                                            strict=True)]
    if fixed != instances:  # git normalised some files on commit (e.g. .gitattributes eol rules)
        (out / TASKS_FILE).write_text("".join(i.model_dump_json() + "\n" for i in fixed), encoding="utf-8")
    return ImportSummary(out=Path(out), instances=len(instances), repos=sorted({i.repo for i in instances}),
                         symlinks_dropped=dropped)


__all__ = ["DEFAULT_LOG_PARSER", "DEFAULT_TEST_CMD", "ImportSummary", "environment_for", "find_clone", "import_swebench", "read_records",
           "to_instance"]
