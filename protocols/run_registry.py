"""Runs registered under a frozen plan: every evaluation made under it is written to the prereg ref before it starts.

A frozen plan binds what is analysed, but not how often it was evaluated: without a record of the runs, an analyst
could evaluate twice and pass only the better run, or freeze a looser plan into a new file after seeing a run and
evaluate again. ``register_run`` closes that. Before the first episode of a run made under a frozen record
(``tgsuite eval --protocol``, the pipeline's main evaluation, ``run_eval(protocol_record=...)``), it commits the
run's manifest (less host facts and package versions) to ``.tgsuite/runs/<plan sha256>/<run id>.json`` on the ref
that anchors the record (``protocols.anchor.PREREG_REF``), with the same plumbing as the freeze: the user's branch,
index and working tree are never touched. A resume that adds arms, seeds or instances commits the file again; its
first commit is the registration time.

``registry_checks`` (run by ``tgsuite analyze``) reports two checks:

- ``registered_runs``: every run registered under this record that evaluated the plan's cells (its task set is the
  plan's, and an arm maps to a plan arm) is among the analysed runs, unless a ``data_exclusion`` deviation names it;
  an analysed run that says it was registered is still on the ref. An analysed run made without registration (begun
  before it existed, or by ``run_eval`` without ``protocol_record``) is "not available": nothing shows it was the
  only evaluation.
- ``no_earlier_runs``: no run under another record, on the plan's task set and cells, was registered before this
  record was anchored (its first registration commit is an ancestor of the anchor's commit on the ref), unless a
  ``run_before_freeze`` deviation names it (a plan revised after its results were seen is a new plan, and the
  report says so).

Covered: evaluating again and keeping the better run, and re-freezing a looser plan after a run, through the
commands and ``run_eval``. Not covered: someone who writes runs by hand or rewrites the ref (``on_prereg_ref`` of the
record still holds, since the ref only grows; the registry files themselves are not signed).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from protocols.anchor import (
    PREREG_REF,
    AnchorCheck,
    ProtocolError,
    anchor_path,
    commit_to_ref,
    git_toplevel,
    read_anchor,
)
from protocols.schema import DeviationKind, FreezeAnchor

REGISTRY_DIR = ".tgsuite/runs"
_DROPPED = ("host", "packages", "registration")  # machine facts, and the commit that registers it


@dataclass(frozen=True)
class Registration:
    """One registered run: the manifest as last registered (less ``run_dir``, the folder it was written to, kept
    apart), where its file is, and when it was first registered."""

    protocol_sha256: str
    run_id: str
    manifest: dict[str, object]
    run_dir: str
    registered_at: datetime | None
    first_commit: str | None  # the commit that first registered it (its order against a freeze is by ancestry)
    path_in_ref: str


def registry_path(protocol_sha256: str, run_id: str) -> str:
    if not run_id or "/" in run_id or run_id.startswith("."):
        raise ProtocolError(f"run id {run_id!r} cannot name a registry file; fix: a run id without '/' or a leading "
                            "'.' (the runner makes <folder>-<8 hex>)")
    return f"{REGISTRY_DIR}/{protocol_sha256}/{run_id}.json"


def registry_repo(record_path: str | Path) -> tuple[FreezeAnchor, Path]:
    """The record's anchor and the repository its runs are registered in; a ProtocolError naming the fix when a run
    cannot be registered under it (no anchor, or its repository is not on this machine)."""
    anchor = read_anchor(record_path, purpose=", so runs made under it cannot be registered and its analysis would "
                         "fail the anchor check")
    repo = Path(anchor.repo)
    if not (repo.is_dir() and git_toplevel(repo) is not None):
        raise ProtocolError(f"{anchor_path(record_path)}: the record's prereg repository {anchor.repo} is not on "
                            "this machine, so this run cannot be registered under the plan; fix: start the "
                            "evaluation where the record was frozen (the Ray executor runs its workers elsewhere "
                            "and registers from the driver)")
    return anchor, repo


def _display_dir(run_dir: Path, repo: Path) -> str:
    d = run_dir.resolve()
    try:
        return d.relative_to(repo.resolve()).as_posix()
    except ValueError:
        return str(d)


def register_run(record_path: str | Path, manifest: dict[str, object], run_dir: str | Path, *,
                 tries: int = 5) -> str:
    """Commit ``manifest`` (a run manifest's JSON) as a registration of its run under the record at ``record_path``;
    returns the commit that holds it. Idempotent: an unchanged registration makes no commit. Retries when another
    registration moved the ref at the same time."""
    from protocols.freeze import load_frozen

    _, repo = registry_repo(record_path)
    sha, plan_sha = manifest.get("protocol_hash"), load_frozen(record_path).sha256
    if sha != plan_sha:
        raise ProtocolError(f"run {manifest.get('run_id')}: its protocol hash {str(sha)[:12]} is not the record's "
                            f"{plan_sha[:12]} ({record_path}); fix: evaluate under one record")
    rel = registry_path(plan_sha, str(manifest["run_id"]))
    body = {k: v for k, v in manifest.items() if k not in _DROPPED} | {"run_dir": _display_dir(Path(run_dir), repo)}
    data = (json.dumps(body, indent=1, sort_keys=True) + "\n").encode("utf-8")
    last = ""
    with _registry_lock(repo):  # registrations from this machine take turns; the ref's compare-and-swap guards the rest
        for attempt in range(tries):
            time.sleep(0.1 * attempt)
            held = subprocess.run(["git", "show", f"{PREREG_REF}:{rel}"], cwd=repo, capture_output=True, timeout=30)
            if held.returncode == 0 and held.stdout == data:
                return subprocess.run(["git", "rev-list", "-1", PREREG_REF, "--", rel], cwd=repo, capture_output=True,
                                      text=True, timeout=30, check=True).stdout.strip()
            try:
                return commit_to_ref(repo, rel, data)
            except ProtocolError as exc:  # the ref moved under us (update-ref's old value no longer holds): again
                last = str(exc)
    raise ProtocolError(f"could not register run {manifest['run_id']} on {PREREG_REF} in {repo}: {last}")


@contextlib.contextmanager
def _registry_lock(repo: Path) -> Iterator[None]:
    """An exclusive flock on ``<git dir>/tgsuite-registry.lock`` (released by the kernel if the process dies)."""
    git_dir = subprocess.run(["git", "rev-parse", "--absolute-git-dir"], cwd=repo, capture_output=True, text=True,
                             timeout=30, check=True).stdout.strip()  # fmt: skip
    with open(Path(git_dir) / "tgsuite-registry.lock", "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _first_commit(repo: Path, rel: str) -> tuple[str | None, datetime | None]:
    """(id, commit time) of the commit that first added ``rel`` to the prereg ref; (None, None) if none did."""
    res = subprocess.run(["git", "log", "--reverse", "--format=%H %cI", PREREG_REF, "--", rel], cwd=repo,
                         capture_output=True, text=True, timeout=30)  # fmt: skip
    first = res.stdout.splitlines()[:1] if res.returncode == 0 else []
    if not first:
        return None, None
    commit, when = first[0].split()
    return commit, datetime.fromisoformat(when)


def _is_ancestor(repo: Path, older: str, newer: str) -> bool:
    return subprocess.run(["git", "merge-base", "--is-ancestor", older, newer], cwd=repo, capture_output=True,
                          timeout=30).returncode == 0  # fmt: skip


def registrations(repo: str | Path) -> list[Registration]:
    """Every run registered on the prereg ref of ``repo`` (any plan), in path order; [] when the ref is absent."""
    top = Path(repo)
    res = subprocess.run(["git", "ls-tree", "-r", "--name-only", PREREG_REF, "--", REGISTRY_DIR], cwd=top,
                         capture_output=True, text=True, timeout=30)  # fmt: skip
    if res.returncode != 0:
        return []
    out = []
    for rel in sorted(res.stdout.split()):
        parts = rel.split("/")
        if len(parts) != 4 or not rel.endswith(".json"):
            continue
        raw = subprocess.run(["git", "show", f"{PREREG_REF}:{rel}"], cwd=top, capture_output=True, timeout=30)
        try:
            manifest = json.loads(raw.stdout)
        except ValueError:
            manifest = {}
        manifest = manifest if isinstance(manifest, dict) else {}
        commit, when = _first_commit(top, rel)
        out.append(Registration(protocol_sha256=parts[2], run_id=parts[3].removesuffix(".json"),
                                run_dir=str(manifest.pop("run_dir", "?")), manifest=manifest,
                                registered_at=when, first_commit=commit, path_in_ref=rel))  # fmt: skip
    return out


def _describe(r: Registration) -> str:
    when = r.registered_at.isoformat() if r.registered_at else "an unknown time"
    return f"{r.run_id} (registered {when}, in {r.run_dir})"


def registry_checks(record_path: str | Path | None, protocol_sha256: str, analysed: dict[str, bool], *,
                    touches_plan: Callable[[dict[str, object]], bool],
                    excused: Callable[[DeviationKind, str], bool]) -> list[AnchorCheck]:
    """``registered_runs`` and ``no_earlier_runs`` (module docstring) for the record at ``record_path``.

    ``protocol_sha256``: the plan's hash (the record's ``sha256``, which run manifests name). ``analysed``: {run id:
    whether its manifest says it was registered}. ``touches_plan(manifest)``: whether a registered run evaluated
    cells of this plan. ``excused(kind, run_id)``: whether a deviation of that kind names the run."""
    names = ("registered_runs", "no_earlier_runs")
    if record_path is None:
        return [AnchorCheck(n, "not_available", "the record was passed in memory") for n in names]
    try:
        anchor = read_anchor(record_path)
    except ProtocolError:
        return [AnchorCheck(n, "not_available", "the record has no valid anchor (see the anchor check)") for n in names]
    if not Path(anchor.repo).is_dir():
        why = f"the record's prereg repository {anchor.repo} is not on this machine"
        return [AnchorCheck(n, "not_available", why) for n in names]
    regs = registrations(anchor.repo)
    return [_registered_runs(anchor, protocol_sha256, regs, analysed, touches_plan, excused),
            _no_earlier_runs(anchor, protocol_sha256, regs, touches_plan, excused)]


def _registered_runs(anchor: FreezeAnchor, sha: str, regs: list[Registration], analysed: dict[str, bool],
                     touches_plan: Callable[[dict[str, object]], bool],
                     excused: Callable[[DeviationKind, str], bool]) -> AnchorCheck:
    mine = [r for r in regs if r.protocol_sha256 == sha]
    ids = {r.run_id for r in mine}
    left = [r for r in mine if r.run_id not in analysed and touches_plan(r.manifest)]
    unexcused = [r for r in left if not excused("data_exclusion", r.run_id)]
    if unexcused:
        return AnchorCheck("registered_runs", "fail",
                           f"{len(unexcused)} run(s) registered under this plan evaluated its cells but are not "
                           f"in the analysis: {'; '.join(_describe(r) for r in unexcused[:3])}. Every evaluation "
                           "made under the plan counts, or the better of two could be kept; fix: pass it with "
                           "--runs (its cells must not overlap another run's), or, when it is set aside for a "
                           "reason you can state, `tgsuite protocol deviation --kind data_exclusion --run-id ID "
                           "...` (the report shows it)")  # fmt: skip
    gone = sorted(rid for rid, said in analysed.items() if said and rid not in ids)
    if gone:
        return AnchorCheck("registered_runs", "fail",
                           f"run(s) {', '.join(gone[:5])} say they were registered under this plan, but "
                           f"{anchor.ref} holds no such registration (the ref was rewritten, or the run was "
                           "registered under another record)")  # fmt: skip
    unregistered = sorted(rid for rid in analysed if rid not in ids)
    set_aside = f"; {len(left)} set aside by a recorded data_exclusion deviation" if left else ""
    if unregistered:
        return AnchorCheck("registered_runs", "not_available",
                           f"run(s) {', '.join(unregistered[:5])} were not registered under this plan (begun "
                           "before run registration, or by run_eval without protocol_record): nothing shows they "
                           f"are the only evaluation made{set_aside}")  # fmt: skip
    return AnchorCheck("registered_runs", "pass",
                       f"all {len(analysed)} analysed run(s) are registered under this plan, and no other "
                       f"registered run evaluated its cells{set_aside}")  # fmt: skip


def _no_earlier_runs(anchor: FreezeAnchor, sha: str, regs: list[Registration],
                     touches_plan: Callable[[dict[str, object]], bool],
                     excused: Callable[[DeviationKind, str], bool]) -> AnchorCheck:
    repo = Path(anchor.repo)  # on one ref, "registered before the freeze" is "an ancestor of the anchor's commit"
    earlier = [r for r in regs if r.protocol_sha256 != sha and touches_plan(r.manifest)
               and (r.first_commit is None or _is_ancestor(repo, r.first_commit, anchor.commit))]
    unexcused = [r for r in earlier if not excused("run_before_freeze", r.run_id)]
    if unexcused:
        return AnchorCheck("no_earlier_runs", "fail",
                           f"{len(unexcused)} run(s) under another plan record evaluated this plan's task set and "
                           f"arms before it was frozen ({anchor.commit_time}): "
                           f"{'; '.join(_describe(r) + ' under ' + r.protocol_sha256[:12] for r in unexcused[:3])}. "
                           "A plan frozen after results were seen is not preregistered against them; fix: state it, "
                           "`tgsuite protocol deviation --kind run_before_freeze --run-id ID ...` for each (the "
                           "report shows it), or analyse under the earlier plan")  # fmt: skip
    note = f" ({len(earlier)} declared by run_before_freeze deviations)" if earlier else ""
    return AnchorCheck("no_earlier_runs", "pass",
                       f"no run under another record evaluated this plan's cells before it was frozen{note}")
