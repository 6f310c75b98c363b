"""Verify a frozen record's anchor (``protocols.anchor``): each check is reported as pass / fail / not available.

Checks: ``anchor`` (the anchor file exists and names this record's bytes; a record file without one fails),
``commit_exists``, ``on_prereg_ref`` (the commit is on the prereg ref's history: the ref was not rewritten),
``record_in_commit`` (the commit's tree holds the record byte for byte), ``first_record`` (no earlier commit on the
ref holds a different record at the same path: the plan was not re-frozen in place), ``before_checkpoints`` and ``before_results`` (the commit is older than the first training
checkpoint and than every run), ``code_ancestor`` (the code commit recorded at freeze is an ancestor of the current
HEAD of the repository, when both exist), ``signature``.
"""

from __future__ import annotations

import hashlib
import subprocess
from datetime import datetime
from pathlib import Path

from pydantic import ValidationError

from protocols.anchor import AnchorCheck, anchor_path, verify_signature
from protocols.schema import FreezeAnchor


def _ts(s: str) -> datetime | None:
    try:
        return datetime.fromisoformat(s.replace("Z", "+00:00"))
    except ValueError:
        return None


def _git_ok(args: list[str], cwd: str) -> tuple[bool, str]:
    try:
        res = subprocess.run(["git", *args], cwd=cwd, capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        return False, str(exc)
    return res.returncode == 0, res.stdout.decode("utf-8", "replace").strip() if res.returncode == 0 else ""


def _git_bytes(args: list[str], cwd: str) -> bytes | None:
    try:
        res = subprocess.run(["git", *args], cwd=cwd, capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return res.stdout if res.returncode == 0 else None


def _time_check(name: str, anchor_t: datetime | None, times: dict[str, str], what: str) -> AnchorCheck:
    if not times:
        return AnchorCheck(name, "not_available", f"no {what} time to compare with")
    late = [k for k, v in times.items() if anchor_t is None or (t := _ts(v)) is None or t < anchor_t]
    if late:
        return AnchorCheck(name, "fail", f"{len(late)} {what}(s) predate the prereg commit or have no comparable "
                           f"time: {', '.join(sorted(late)[:5])}")  # fmt: skip
    return AnchorCheck(name, "pass", f"the prereg commit is older than all {len(times)} {what}(s)")


def _first_record(anchor: FreezeAnchor, data: bytes) -> AnchorCheck:
    """The prereg ref's history at the record's path: every earlier version must be these bytes. A record frozen,
    run, and then re-frozen with ``--overwrite`` leaves the first one on the ref, and that one is binding."""
    ok, listed = _git_ok(["rev-list", "--reverse", anchor.ref, "--", anchor.path_in_repo], anchor.repo)
    if not ok:
        return AnchorCheck("first_record", "fail", f"cannot read the history of {anchor.ref} in {anchor.repo}")
    for c in listed.split():
        if c == anchor.commit:
            break
        if _git_bytes(["show", f"{c}:{anchor.path_in_repo}"], anchor.repo) != data:
            return AnchorCheck("first_record", "fail",
                               f"{anchor.ref} holds an earlier, different record at {anchor.path_in_repo} (commit "
                               f"{c[:12]}): the plan was re-frozen at the same path, so results may predate this "
                               "version; a changed plan goes to a new file with a recorded deviation")  # fmt: skip
    return AnchorCheck("first_record", "pass", f"no earlier, different record at {anchor.path_in_repo} on {anchor.ref}")


def verify_anchor(record_path: str | Path | None, *, checkpoint_times: dict[str, str] | None = None,
                  result_times: dict[str, str] | None = None, public_key: str | None = None) -> list[AnchorCheck]:  # fmt: skip
    """Every anchor check for the record at ``record_path`` (None: an in-memory record, nothing to verify)."""
    if record_path is None:
        return [AnchorCheck("anchor", "not_available", "the record was passed in memory, not as a file")]
    rec, apath = Path(record_path), anchor_path(record_path)
    if not apath.is_file():
        return [AnchorCheck("anchor", "fail", f"no {apath.name} next to the record: nothing binds these bytes to a "
                            "time before the results (a loosened plan can be re-hashed and its anchor deleted); "
                            f"restore {apath.name} from where the record was frozen, or freeze the plan before "
                            "running (`tgsuite protocol freeze PLAN --out RECORD` writes both)")]  # fmt: skip
    try:
        anchor = FreezeAnchor.model_validate_json(apath.read_text(encoding="utf-8"))
    except ValidationError as exc:
        return [AnchorCheck("anchor", "fail", f"{apath}: not a valid anchor ({exc.errors()[0]['msg']})")]
    data = rec.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    out = [AnchorCheck("anchor", "pass" if digest == anchor.record_sha256 else "fail",
                       "the anchor names this record's bytes" if digest == anchor.record_sha256 else
                       "the record's bytes differ from those anchored at freeze: it was edited after freezing")]  # fmt: skip
    ok, kind = _git_ok(["cat-file", "-t", anchor.commit], anchor.repo)
    out.append(AnchorCheck("commit_exists", "pass" if ok and kind == "commit" else "fail",
                           f"commit {anchor.commit[:12]} in {anchor.repo}" + ("" if ok else " not found")))  # fmt: skip
    on_ref, _ = _git_ok(["merge-base", "--is-ancestor", anchor.commit, anchor.ref], anchor.repo)
    out.append(AnchorCheck("on_prereg_ref", "pass" if on_ref else "fail",
                           f"commit is on {anchor.ref}" if on_ref else f"commit is not on {anchor.ref} (history rewritten?)"))  # fmt: skip
    blob = _git_bytes(["show", f"{anchor.commit}:{anchor.path_in_repo}"], anchor.repo)
    same = blob is not None and blob == data
    out.append(AnchorCheck("record_in_commit", "pass" if same else "fail",
                           "the commit holds this record byte for byte" if same else
                           "the record differs from the committed one (or the commit lacks it)"))  # fmt: skip
    out.append(_first_record(anchor, data))
    ok_t, ct = _git_ok(["show", "-s", "--format=%cI", anchor.commit], anchor.repo)
    anchor_t = _ts(ct) if ok_t else None
    out.append(_time_check("before_checkpoints", anchor_t, checkpoint_times or {}, "training checkpoint"))
    out.append(_time_check("before_results", anchor_t, result_times or {}, "run"))
    ok_h, head = _git_ok(["rev-parse", "--verify", "HEAD"], anchor.repo)
    if anchor.code_commit is None or not ok_h:
        out.append(AnchorCheck("code_ancestor", "not_available", "no code commit at freeze or no HEAD now"))
    else:
        anc, _ = _git_ok(["merge-base", "--is-ancestor", anchor.code_commit, head], anchor.repo)
        out.append(AnchorCheck("code_ancestor", "pass" if anc else "fail",
                               f"code commit {anchor.code_commit[:12]} at freeze is {'' if anc else 'NOT '}an ancestor "
                               f"of HEAD {head[:12]}"))  # fmt: skip
    out.append(verify_signature(anchor, digest, public_key))
    return out
