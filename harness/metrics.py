"""Offline per-episode metrics computed from a trajectory (pure), as ``harness.schema.EpisodeMetrics``.

``resolved``, ``behaviour_ok`` and ``joint_ok`` come from grading (``harness.grading``) and are not computed here.

Definitions (``compute_metrics``):

- ``steps``: assistant turns.
- ``tool_calls``: tool calls written (valid or not, including calls after ``finish``).
- ``tool_call_validity``: valid calls / calls (schema-valid, ``harness.tools.parse_tool_calls``); None if no call.
  The calls of drafts the agent loop sampled again (format retries) count too, in ``tool_calls`` as well, so
  resampling never hides a malformed call.
- ``format_retries``: turns the agent loop sampled again because it could not act on them (``discarded_for =
  "format"``; ``EpisodeLimits.format_retries``).
- ``edits``: ``edit_file`` calls that succeeded (their observation does not start with ``ERROR_PREFIX``).
- ``test_runs``: ``run_tests`` calls executed; ``rework``: test re-runs, ``max(0, test_runs - 1)``.
- ``hallucinations``: references to files or functions that do not exist in the repository, where "the
  repository" is the ``RepoIndex`` of the base snapshot plus what the agent created during the episode (files
  created with ``edit_file`` and ``def``/``class`` names written in ``edit_file``'s ``new`` text). Counted:
  1. tool calls whose path argument names nothing that exists: ``read_file``/``edit_file`` (non-creating) of a
     missing file, ``list_files``/``search`` of a missing path, ``run_tests`` naming a missing test file;
  2. in the final summary (the ``finish`` message): each distinct path-like token (a file with a source/config
     extension, e.g. ``calc.py``, ``src/calc.py``) that matches no file by full relative path or by path suffix
     (``calc.py`` matches ``src/calc.py``), and each distinct call-form name (``add()``, ``calc.add()``) whose
     last component is neither defined in the repository (``def``/``class`` in a ``.py`` file) nor a Python
     builtin.
  Names inside fenced code blocks of the summary are ignored (they are often example output).
- ``tokens``: ``Trajectory.n_tokens``; ``wall_s``: ``Trajectory.timings["wall_s"]``.
"""

from __future__ import annotations

import ast
import builtins
import io
import posixpath
import re
import tarfile
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from harness.schema import EpisodeMetrics, Message, TaskInstance, TaskSet, ToolCall, Trajectory
from harness.tools import ERROR_PREFIX, normalize_path

_EXT = r"(?:py|pyi|pyx|txt|md|rst|toml|cfg|ini|json|ya?ml|sh|lock|csv)"
_SUMMARY_PATH_RE = re.compile(rf"(?<![\w/.-])(?:[\w.-]+/)*[\w-]+(?:\.[\w-]+)*\.{_EXT}(?![\w/])")
_SUMMARY_CALL_RE = re.compile(r"(?<![\w.])([A-Za-z_][\w]*(?:\.[A-Za-z_]\w*)*)\(\)")
_FENCED_RE = re.compile(r"^\s{0,3}(`{3,}|~{3,}).*?^\s{0,3}\1\s*$", re.DOTALL | re.MULTILINE)
_DEF_RE = re.compile(r"^\s*(?:async\s+)?(?:def|class)\s+([A-Za-z_]\w*)", re.MULTILINE)
_BUILTINS = frozenset(dir(builtins))


@dataclass(frozen=True)
class RepoIndex:
    """Files, directories and defined Python names (``def``/``class``, any nesting) of a repository snapshot."""

    files: frozenset[str]
    dirs: frozenset[str]
    symbols: frozenset[str]

    @classmethod
    def from_files(cls, files: Mapping[str, str]) -> RepoIndex:
        """From ``{relative path: text}``; ``.py`` files are parsed with ``ast`` (regex fallback on syntax errors)."""
        paths = {posixpath.normpath(p) for p in files}
        dirs = {"."}
        for p in paths:
            parent = posixpath.dirname(p)
            while parent:
                dirs.add(parent)
                parent = posixpath.dirname(parent)
        symbols: set[str] = set()
        for p, text in files.items():
            if p.endswith(".py"):
                symbols |= python_definitions(text)
        return cls(frozenset(paths), frozenset(dirs), frozenset(symbols))

    @classmethod
    def from_dir(cls, root: Path) -> RepoIndex:
        """From a snapshot directory on the host (``.git`` and ``__pycache__`` skipped)."""
        files: dict[str, str] = {}
        for path in sorted(Path(root).rglob("*")):
            rel = path.relative_to(root).as_posix()
            if path.is_file() and not any(part in (".git", "__pycache__") for part in rel.split("/")):
                files[rel] = path.read_text(errors="replace") if path.suffix == ".py" else ""
        return cls.from_files(files)

    @classmethod
    def from_tar(cls, archive: Path) -> RepoIndex:
        """From a snapshot ``.tar.gz`` (a single top-level directory, if any, is stripped)."""
        files: dict[str, str] = {}
        with tarfile.open(archive) as tar:
            members = [m for m in tar.getmembers() if m.isfile()]
            names = [m.name.removeprefix("./") for m in members]
            tops = {n.split("/", 1)[0] for n in names}
            strip = len(tops) == 1 and all("/" in n for n in names)
            for m, name in zip(members, names, strict=True):
                rel = name.split("/", 1)[1] if strip else name
                fh = tar.extractfile(m)
                data = fh.read() if fh is not None and rel.endswith(".py") else b""
                files[rel] = io.TextIOWrapper(io.BytesIO(data), errors="replace").read()
        return cls.from_files(files)


def python_definitions(text: str) -> set[str]:
    """Names bound by ``def``/``class`` anywhere in a Python source (regex fallback if it does not parse)."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return set(_DEF_RE.findall(text))
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return {n.name for n in ast.walk(tree) if isinstance(n, kinds)}


def calls_with_results(messages: list[Message]) -> list[tuple[ToolCall, Message | None]]:
    """Each assistant tool call paired with its tool observation (by order within the turn; None if not run)."""
    out: list[tuple[ToolCall, Message | None]] = []
    i = 0
    while i < len(messages):
        msg = messages[i]
        i += 1
        if msg.role != "assistant":
            continue
        results = []
        while i < len(messages) and messages[i].role == "tool":
            results.append(messages[i])
            i += 1
        for j, call in enumerate(msg.tool_calls):
            out.append((call, results[j] if j < len(results) else None))
    return out


def _failed(obs: Message | None) -> bool:
    return obs is None or obs.content.startswith(ERROR_PREFIX)


def _exists(path: str, files: set[str], dirs: frozenset[str] | set[str]) -> bool:
    norm = normalize_path(path)
    return norm is not None and (norm in files or norm in dirs)


def _tool_hallucination(call: ToolCall, files: set[str], dirs: set[str]) -> bool:
    """Whether one valid call names a path that does not exist (before the call runs)."""
    args = call.arguments
    if call.name in ("read_file", "list_files", "search"):
        return not _exists(str(args.get("path", ".")), files, dirs)
    if call.name == "edit_file":
        return args.get("old", "") != "" and not _exists(str(args.get("path", "")), files, dirs)
    if call.name == "run_tests":
        return any(not _exists(str(t).split("::", 1)[0], files, dirs) for t in args.get("tests", []))
    return False


def summary_hallucinations(summary: str, files: Iterable[str], symbols: Iterable[str]) -> list[str]:
    """Distinct file paths and call-form names in ``summary`` that do not exist (see module docstring)."""
    text = _FENCED_RE.sub(" ", summary)
    file_set = set(files)
    sym_set = set(symbols) | _BUILTINS
    bad: list[str] = []
    for p in dict.fromkeys(m.group(0) for m in _SUMMARY_PATH_RE.finditer(text)):
        norm = normalize_path(p) or p
        if norm not in file_set and not any(f.endswith("/" + norm) for f in file_set):
            bad.append(p)
    for name in dict.fromkeys(m.group(1) for m in _SUMMARY_CALL_RE.finditer(_SUMMARY_PATH_RE.sub(" ", text))):
        if name.rsplit(".", 1)[-1] not in sym_set:
            bad.append(name + "()")
    return bad


def count_hallucinations(trajectory: Trajectory, index: RepoIndex) -> tuple[int, list[str]]:
    """(count, descriptions) of hallucinated references in tool calls and the final summary."""
    files, dirs, symbols = set(index.files), set(index.dirs), set(index.symbols)
    found: list[str] = []
    for call, obs in calls_with_results(trajectory.messages):
        if not call.valid:
            continue
        if _tool_hallucination(call, files, dirs):
            found.append(f"{call.name}({call.arguments.get('path', call.arguments.get('tests'))!r})")
        if call.name == "edit_file" and not _failed(obs):
            path = normalize_path(str(call.arguments["path"]))
            if path:
                files.add(path)
                parent = posixpath.dirname(path)
                while parent:
                    dirs.add(parent)
                    parent = posixpath.dirname(parent)
            symbols |= set(_DEF_RE.findall(str(call.arguments.get("new", ""))))
    if trajectory.final_message:
        found += [f"summary: {x}" for x in summary_hallucinations(trajectory.final_message, files, symbols)]
    return len(found), found


def format_drafts(trajectory: Trajectory) -> list[Message]:
    """The drafts the agent loop sampled again because it could not act on them (``harness.agent.format_error``)."""
    return [d for d in trajectory.discarded_drafts if d.discarded_for == "format"]


def format_draft_calls(trajectory: Trajectory) -> list[ToolCall]:
    return [c for d in format_drafts(trajectory) for c in d.tool_calls]


def compute_metrics(trajectory: Trajectory, index: RepoIndex) -> EpisodeMetrics:
    """Per-episode metrics (module docstring); ``index`` is the base snapshot's ``RepoIndex``
    (``RepoIndex.from_dir(task_set_dir / "snapshots" / instance_id)`` or ``RepoIndex.from_tar(...)``)."""
    pairs = calls_with_results(trajectory.messages)
    calls = [c for c, _ in pairs] + format_draft_calls(trajectory)
    valid = sum(1 for c in calls if c.valid)
    edits = sum(1 for c, o in pairs if c.valid and c.name == "edit_file" and not _failed(o))
    test_runs = sum(1 for c, o in pairs if c.valid and c.name == "run_tests" and o is not None)
    return EpisodeMetrics(
        steps=sum(1 for m in trajectory.messages if m.role == "assistant"),
        tool_calls=len(calls),
        tool_call_validity=(valid / len(calls)) if calls else None,
        edits=edits,
        test_runs=test_runs,
        rework=max(0, test_runs - 1),
        hallucinations=count_hallucinations(trajectory, index)[0],
        tokens=trajectory.n_tokens,
        wall_s=float(trajectory.timings.get("wall_s", 0.0)),
        format_retries=len(format_drafts(trajectory)),
    )


def snapshot_index(task_set_dir: str | Path, instance_id: str) -> RepoIndex:
    """``RepoIndex`` of a task set's snapshot (``snapshots/<id>/`` folder or ``snapshots/<id>.tar.gz``)."""
    from harness.tasks import snapshot_path

    path = snapshot_path(Path(task_set_dir), instance_id)
    if path is None:
        raise FileNotFoundError(
            f"{task_set_dir}: no snapshots/{instance_id}/ or snapshots/{instance_id}.tar.gz; hallucinations are "
            "judged against the snapshot, so the task set must keep its snapshots (re-run `tgsuite tasks make-mini`)"
        )
    return RepoIndex.from_dir(path) if path.is_dir() else RepoIndex.from_tar(path)


def metrics_for(task_set: TaskSet) -> Callable[[Trajectory, TaskInstance], EpisodeMetrics]:
    """A ``(trajectory, instance) -> EpisodeMetrics`` callable for the runner (``run_eval(metrics_for=...)``);
    snapshot indexes are built once per instance and cached (thread-safe)."""
    cache: dict[str, RepoIndex] = {}
    lock = threading.Lock()

    def compute(trajectory: Trajectory, instance: TaskInstance) -> EpisodeMetrics:
        with lock:
            index = cache.get(instance.instance_id)
            if index is None:
                index = cache[instance.instance_id] = snapshot_index(task_set.path, instance.instance_id)
        return compute_metrics(trajectory, index)

    return compute
