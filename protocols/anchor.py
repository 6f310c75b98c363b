"""Tamper evidence for a frozen record: a git commit on a dedicated ref, and an optional Ed25519 signature.

``anchor_record`` commits the record's exact bytes to ``refs/tgsuite/prereg`` of the git repository that encloses
the record (``git init`` makes one in the record's folder when there is none). It uses a temporary index and
plumbing only (``hash-object``, ``update-index``, ``write-tree``, ``commit-tree``, ``update-ref``), so the user's
branch, index and working tree are never touched. The anchor (commit, ref, time, HEAD of the checkout, signature)
is written next to the record as ``<record>.anchor.json``.

``verify_anchor`` checks, each reported separately: the commit exists; it is on the ref's history (the ref was not
rewritten); its tree holds the record byte for byte; it is older than every given time (first training checkpoint,
every run); the code commit recorded at freeze is an ancestor of the current HEAD (when both are in git); and the
signature (when present) verifies — against a public key given from outside when one is given.

Covered: evidence against editing a record after the fact without rewriting git history or re-signing.
Not covered: an adversary who controls the repository and the key (git times and refs can be forged locally);
publish the commit (push the ref, OSF, RFC 3161) or pin the public key for stronger guarantees.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from protocols.load import ProtocolError
from protocols.schema import FreezeAnchor

PREREG_REF = "refs/tgsuite/prereg"
_GIT_ID = {"GIT_AUTHOR_NAME": "tgsuite", "GIT_AUTHOR_EMAIL": "tgsuite@localhost",
           "GIT_COMMITTER_NAME": "tgsuite", "GIT_COMMITTER_EMAIL": "tgsuite@localhost"}  # fmt: skip
CheckStatus = Literal["pass", "fail", "not_available"]


@dataclass(frozen=True)
class AnchorCheck:
    name: str
    status: CheckStatus
    detail: str


def anchor_path(record_path: str | Path) -> Path:
    p = Path(record_path)
    return p.with_name(p.name + ".anchor.json")


def _git(args: list[str], cwd: Path, env: dict[str, str] | None = None, check: bool = True) -> str:
    res = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=30,
                         env={**os.environ, **(env or {})})  # fmt: skip
    if check and res.returncode != 0:
        raise ProtocolError(f"git {' '.join(args)} failed in {cwd}: {res.stderr.strip()}")
    return res.stdout.strip()


def git_toplevel(folder: Path) -> Path | None:
    res = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=folder, capture_output=True, text=True, timeout=10)
    return Path(res.stdout.strip()) if res.returncode == 0 else None


def _head(top: Path) -> str | None:
    res = subprocess.run(["git", "rev-parse", "--verify", "HEAD"], cwd=top, capture_output=True, text=True, timeout=10)
    return res.stdout.strip() if res.returncode == 0 else None


def commit_to_ref(top: Path, rel: str, blob_bytes: bytes) -> str:
    """Commit one file (``rel``) onto PREREG_REF with a temporary index; returns the commit id."""
    with tempfile.TemporaryDirectory() as tmp:
        env = {**_GIT_ID, "GIT_INDEX_FILE": str(Path(tmp) / "index")}
        src = Path(tmp) / "blob"
        src.write_bytes(blob_bytes)
        blob = _git(["hash-object", "-w", str(src)], top, env)
        parent = _git(["rev-parse", "--verify", "-q", PREREG_REF], top, env, check=False)
        if parent:
            _git(["read-tree", parent], top, env)
        _git(["update-index", "--add", "--cacheinfo", f"100644,{blob},{rel}"], top, env)
        tree = _git(["write-tree"], top, env)
        commit = _git(["commit-tree", tree, *(["-p", parent] if parent else []), "-m", f"tgsuite prereg: {rel}"], top, env)
        _git(["update-ref", PREREG_REF, commit, *([parent] if parent else [])], top, env)
    return commit


def sign_bytes(data: bytes, private_key_pem: bytes) -> tuple[str, str]:
    """Ed25519 signature (hex) of ``data`` and the raw public key (hex). The key is a PEM PKCS8 private key."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = serialization.load_pem_private_key(private_key_pem, password=None)
    if not isinstance(key, Ed25519PrivateKey):
        raise ProtocolError("the signing key is not an Ed25519 private key; make one with `tgsuite protocol keygen`")
    pub = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return key.sign(data).hex(), pub.hex()


def generate_key(private_path: str | Path) -> str:
    """Write a new Ed25519 private key (PEM, mode 600) to ``private_path``; return the public key (hex)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    p = Path(private_path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(pem)
    p.chmod(0o600)
    return key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw).hex()


def anchor_record(record_path: str | Path, *, sign_key: str | Path | None = None) -> FreezeAnchor:
    """Commit the record to PREREG_REF of its enclosing repository (or a new one in its folder); write the anchor."""
    rec = Path(record_path).resolve()
    data = rec.read_bytes()
    top = git_toplevel(rec.parent)
    if top is None:
        _git(["init", "-q"], rec.parent)
        top = rec.parent
    rel = rec.relative_to(top.resolve()).as_posix()
    commit = commit_to_ref(top, rel, data)
    when = _git(["show", "-s", "--format=%ct", commit], top)
    digest = hashlib.sha256(data).hexdigest()
    sig = pub = None
    if sign_key is not None:
        sig, pub = sign_bytes(digest.encode("ascii"), Path(sign_key).read_bytes())
    anchor = FreezeAnchor(record_sha256=digest, repo=str(top), ref=PREREG_REF, commit=commit,
                          commit_time=datetime.fromtimestamp(int(when), UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                          path_in_repo=rel, code_commit=_head(top), signature=sig, public_key=pub)  # fmt: skip
    anchor_path(rec).write_text(anchor.model_dump_json(indent=2) + "\n", encoding="utf-8")
    return anchor


def read_anchor(record_path: str | Path, *, purpose: str = "") -> FreezeAnchor:
    """The anchor written next to a frozen record, or a ProtocolError naming the fix (``purpose``: why it is needed,
    appended to the message)."""
    apath = anchor_path(record_path)
    if not apath.is_file():
        raise ProtocolError(f"{record_path}: no {apath.name} next to the record{purpose}; fix: freeze the plan with "
                            "`tgsuite protocol freeze PLAN --out RECORD` (it writes both) and use that record, or "
                            "restore the anchor from where the record was frozen")
    try:
        return FreezeAnchor.model_validate_json(apath.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise ProtocolError(f"{apath}: not a valid anchor ({exc}); fix: restore it from where the record was "
                            "frozen") from None


def verify_signature(anchor: FreezeAnchor, digest: str, public_key: str | None) -> AnchorCheck:
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    if anchor.signature is None:
        return AnchorCheck("signature", "not_available", "the record was not signed at freeze")
    key_hex = public_key or anchor.public_key or ""
    pinned = "the public key given to the analysis" if public_key else "the key stored in the anchor (not pinned)"
    try:
        Ed25519PublicKey.from_public_bytes(bytes.fromhex(key_hex)).verify(bytes.fromhex(anchor.signature),
                                                                            digest.encode("ascii"))  # fmt: skip
    except (InvalidSignature, ValueError):
        return AnchorCheck("signature", "fail", f"the Ed25519 signature does not verify with {pinned}")
    return AnchorCheck("signature", "pass", f"Ed25519 signature over the record's sha256 verifies with {pinned}")
