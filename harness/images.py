"""Offline base image: ``debootstrap --variant=minbase`` + ``docker import``, keyed by a content hash.

No registry is reachable, so the base image is built from the Debian mirror that this machine's apt sources
already name (read at run time from ``/etc/apt/sources.list`` and ``/etc/apt/sources.list.d/*``; no host name
is written into the repository). The recipe:

1. ``debootstrap --variant=minbase --include=<BASE_PACKAGES> <suite> <tmp>/rootfs <mirror>`` into a temp dir;
2. add a non-root user ``agent`` (uid/gid 1000, home ``/home/agent``) and ``/work``, ``/work/repo`` directories
   it owns; drop apt caches;
3. ``docker import`` under a temporary tag with labels recording the package manifest (``dpkg-query -W``);
4. verify in a throw-away container (python3 imports pytest, git and patch run, user is uid 1000, /work writable);
5. only then tag it ``tgsuite/base:<suite>-<hash>`` and point the alias ``tgsuite/base:latest`` at it.

The tag is ``sha256(recipe version, suite, package list)``: a second call with nothing changed finds the tag and
returns at once. Package *versions* come from the mirror at build time and are recorded in the
``tgsuite.manifest`` label (and so in each run manifest through :func:`image_digest`), not in the tag.
A failed build removes its temp dir and temp tag, so a tag that exists is always a verified image.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import hashlib
import logging
import os
import re
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from harness.sandbox import AGENT_HOME, SandboxUnavailable

if TYPE_CHECKING:  # the Docker SDK is imported where it is used; these names are for the annotations only
    from docker import DockerClient

log = logging.getLogger(__name__)

RECIPE_VERSION = 2  # 2: /work/repo ships in the image (PREMADE_DIRS)
DEFAULT_SUITE = "bookworm"
# Small on purpose: CI builds it from scratch each run. ``patch`` is needed by graders (apply fallback chain).
BASE_PACKAGES: tuple[str, ...] = ("python3", "python-is-python3", "python3-pytest", "git", "patch")
REPOSITORY = "tgsuite/base"
ALIAS_TAG = f"{REPOSITORY}:latest"
AGENT_USER = "agent"
AGENT_UID = 1000
MIN_BUILD_FREE_BYTES = 2 << 30
# Directories the image ships owned by uid 1000 (recipe 2+): sandboxes with these work dirs skip creating them.
PREMADE_DIRS: tuple[str, ...] = ("/work", "/work/repo")
API_VERSION = "1.41"
LABEL_KEY = "tgsuite.content_key"
LABEL_MANIFEST = "tgsuite.manifest"
LABEL_SUITE = "tgsuite.suite"
LABEL_PACKAGES = "tgsuite.packages"
LABEL_RECIPE = "tgsuite.recipe"
_DEFAULT_SOURCES = ("/etc/apt/sources.list", "/etc/apt/sources.list.d/*.list", "/etc/apt/sources.list.d/*.sources")


class ImageBuildError(RuntimeError):
    """The base image could not be built; the message names the cause and the fix."""


# --- pure helpers ------------------------------------------------------------------------------------------


def content_key(suite: str = DEFAULT_SUITE, packages: Sequence[str] = BASE_PACKAGES) -> str:
    """The hex content hash of (recipe version, suite, sorted package list)."""
    text = f"recipe={RECIPE_VERSION}\nsuite={suite}\npackages={','.join(sorted(set(packages)))}\n"
    return hashlib.sha256(text.encode()).hexdigest()


def base_image_tag(suite: str = DEFAULT_SUITE, packages: Sequence[str] = BASE_PACKAGES) -> str:
    """The tag of the base image for this recipe, e.g. ``tgsuite/base:bookworm-3f2a9c01b7de``."""
    return f"{REPOSITORY}:{suite}-{content_key(suite, packages)[:12]}"


def parse_apt_sources(text: str, *, deb822: bool) -> list[tuple[str, list[str], list[str]]]:
    """Parse apt sources text into ``(uri, suites, components)`` for ``deb`` entries (``deb-src`` ignored).

    ``deb822=True`` reads the ``.sources`` stanza format, otherwise the one-line ``deb URI SUITE COMP...`` format.
    """
    out: list[tuple[str, list[str], list[str]]] = []
    if not deb822:
        for raw in text.splitlines():
            line = raw.split("#", 1)[0].strip()
            line = re.sub(r"\[[^\]]*\]", " ", line)  # drop "[arch=amd64 signed-by=...]" options
            parts = line.split()
            if len(parts) >= 3 and parts[0] == "deb":
                out.append((parts[1], [parts[2]], parts[3:]))
        return out
    for stanza in re.split(r"\n\s*\n", text):
        fields: dict[str, str] = {}
        for raw in stanza.splitlines():
            if raw.lstrip().startswith("#") or ":" not in raw or raw[:1].isspace():
                continue
            key, _, value = raw.partition(":")
            fields[key.strip().lower()] = value.strip()
        if "deb" not in fields.get("types", "").split() or fields.get("enabled", "yes").lower() == "no":
            continue
        for uri in fields.get("uris", "").split():
            out.append((uri, fields.get("suites", "").split(), fields.get("components", "").split()))
    return out


def find_apt_mirror(suite: str = DEFAULT_SUITE, patterns: Sequence[str] = _DEFAULT_SOURCES) -> str:
    """The first apt source URI on this machine that serves ``suite`` with the ``main`` component."""
    seen: list[str] = []
    for pattern in patterns:
        for path in sorted(glob.glob(pattern)):
            try:
                text = Path(path).read_text(encoding="utf-8", errors="replace")
            except OSError:
                continue
            for uri, suites, comps in parse_apt_sources(text, deb822=path.endswith(".sources")):
                seen.append(f"{uri} {' '.join(suites)}")
                if suite in suites and "main" in comps:
                    return uri
    raise ImageBuildError(
        f"no apt source on this machine serves suite '{suite}' (component main); read {list(patterns)}, "
        f"found {seen or 'none'}. Fix: pass --mirror URL (a Debian mirror carrying '{suite}'), or --suite "
        "with a suite your apt sources name."
    )


# --- engine connection -------------------------------------------------------------------------------------


# One client serves every worker thread of a run (evaluation runs up to 24 episodes at once, each with its own
# sandbox calls); the SDK's default pool keeps 10 connections and logs "Connection pool is full, discarding
# connection" for every extra one.
POOL_SIZE = 64


def connect(timeout: float = 120.0) -> DockerClient:
    """A Docker SDK client pinned to API 1.41 with an explicit timeout and a ``POOL_SIZE`` connection pool, or
    ``SandboxUnavailable``.

    Honours ``DOCKER_HOST``. Errors say what is wrong and how to fix it.
    """
    import docker  # local import: evaluation code that never touches Docker need not have it installed

    try:
        client = docker.from_env(version=API_VERSION, timeout=int(max(1, timeout)), max_pool_size=POOL_SIZE)
        client.ping()
        return client
    except Exception as exc:  # docker raises DockerException, requests errors, PermissionError ...
        host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
        text = str(exc)
        if "ermission denied" in text:
            cause = "permission denied on the engine socket"
            fix = "run as root, or add your user to the 'docker' group (then log in again)"
        else:
            if "No such file or directory" in text:
                cause = "no engine socket there (dockerd is not running)"
            elif "Connection refused" in text:
                cause = "connection refused (dockerd is not running or is restarting)"
            elif "timed out" in text.lower():
                cause = f"the engine did not answer within {timeout:g} s (overloaded or hung)"
            else:
                cause = text
            fix = "start the engine: `bash scripts/setup.sh` (or `sudo dockerd --bridge=none --iptables=false &`)"
        raise SandboxUnavailable(
            f"Docker engine not reachable at {host}: {cause}. Fix: {fix}.", kind="DOCKER_DAEMON"
        ) from exc


def image_present(client: DockerClient, tag: str) -> bool:
    import docker

    try:
        client.images.get(tag)
        return True
    except docker.errors.ImageNotFound:
        return False


def image_digest(client: DockerClient, tag: str) -> str:
    """The local image id (``sha256:...``) behind ``tag``; use it in run manifests."""
    return str(client.images.get(tag).id)


def image_manifest(client: DockerClient, tag: str) -> dict[str, str]:
    """``{package: version}`` recorded in the image's ``tgsuite.manifest`` label at build time."""
    label = (client.images.get(tag).labels or {}).get(LABEL_MANIFEST, "")
    return dict(item.split("=", 1) for item in label.split(",") if "=" in item)


# --- build -------------------------------------------------------------------------------------------------


@contextlib.contextmanager
def _build_lock() -> Iterator[None]:
    """Serialise builds on this machine (two set-up scripts at once must not both build)."""
    path = Path(tempfile.gettempdir()) / "tgsuite-image-build.lock"
    with open(path, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def ensure_base_image(
    client: DockerClient | None = None,
    *,
    force: bool = False,
    suite: str = DEFAULT_SUITE,
    packages: Sequence[str] = BASE_PACKAGES,
    mirror: str | None = None,
    build_dir: str | None = None,
) -> str:
    """Return the base image tag, building it first when it is missing (or when ``force``).

    Fast path (tag present): one API call. Raises ``ImageBuildError`` (with cause and fix) or
    ``SandboxUnavailable`` (engine not reachable).
    """
    client = client or connect()
    tag = base_image_tag(suite, packages)
    if not force and image_present(client, tag):
        _point_alias(client, tag)
        return tag
    with _build_lock():
        if not force and image_present(client, tag):  # another process built it while we waited
            _point_alias(client, tag)
            return tag
        _build(client, tag, suite=suite, packages=packages, mirror=mirror, build_dir=build_dir)
    return tag


def _point_alias(client: DockerClient, tag: str) -> None:
    image = client.images.get(tag)
    if f"{ALIAS_TAG}" not in (image.tags or []):
        image.tag(REPOSITORY, "latest")


def _preflight_build(build_root: str) -> None:
    if os.geteuid() != 0:
        raise ImageBuildError(
            "building the base image needs root (debootstrap creates device nodes and chowns files). "
            "Fix: run `sudo tgsuite images build` (or `sudo bash scripts/setup.sh`)."
        )
    if shutil.which("debootstrap") is None:
        raise ImageBuildError(
            "debootstrap is not installed. Fix: `sudo apt-get install debootstrap` (scripts/setup.sh does it)."
        )
    free = shutil.disk_usage(build_root).free
    if free < MIN_BUILD_FREE_BYTES:
        raise ImageBuildError(
            f"only {free / 2**30:.1f} GiB free in {build_root}; the build needs {MIN_BUILD_FREE_BYTES / 2**30:.0f} "
            "GiB. Fix: free disk space, or set TMPDIR / pass --build-dir to a larger disk."
        )


def _build(
    client: DockerClient, tag: str, *, suite: str, packages: Sequence[str], mirror: str | None, build_dir: str | None
) -> None:
    build_root = build_dir or os.environ.get("TGSUITE_BUILD_DIR") or tempfile.gettempdir()
    _preflight_build(build_root)
    _remove_stale(client, build_root)
    mirror = mirror or find_apt_mirror(suite)
    tmp = Path(tempfile.mkdtemp(prefix="tgsuite-base-", dir=build_root))
    temp_tag = f"{REPOSITORY}:tmp-{uuid.uuid4().hex[:12]}"
    log.info("building %s from %s (%s) in %s; this takes a few minutes", tag, mirror, suite, tmp)
    try:
        rootfs = tmp / "rootfs"
        log.info("1/4 debootstrap --variant=minbase %s (+ %s)", suite, ", ".join(sorted(set(packages))))
        _debootstrap(rootfs, suite=suite, packages=packages, mirror=mirror, log_path=tmp / "debootstrap.log")
        log.info("2/4 add user %s (uid %d) and %s", AGENT_USER, AGENT_UID, ", ".join(PREMADE_DIRS))
        _customise_rootfs(rootfs)
        manifest = _dpkg_manifest(rootfs)
        tarball = tmp / "rootfs.tar"
        log.info("3/4 docker import (%d packages recorded in the labels)", len(manifest))
        _run(["tar", "--numeric-owner", "-C", str(rootfs), "-cf", str(tarball), "."], what="tar the rootfs")
        shutil.rmtree(rootfs, ignore_errors=True)
        labels = {
            LABEL_KEY: content_key(suite, packages),
            LABEL_SUITE: suite,
            LABEL_PACKAGES: ",".join(sorted(set(packages))),
            LABEL_RECIPE: str(RECIPE_VERSION),
            LABEL_MANIFEST: ",".join(f"{k}={v}" for k, v in sorted(manifest.items())),
        }
        changes = [f'LABEL {k}="{v}"' for k, v in labels.items()]
        changes += ["ENV LANG=C.UTF-8", f"ENV HOME={AGENT_HOME}", f"USER {AGENT_UID}:{AGENT_UID}", "WORKDIR /work"]
        repo, _, ttag = temp_tag.partition(":")
        client.api.import_image(src=str(tarball), repository=repo, tag=ttag, changes=changes)
        log.info("4/4 verify in a throw-away container")
        _verify(client, temp_tag)
        image = client.images.get(temp_tag)
        image.tag(*tag.split(":", 1))
        image.tag(REPOSITORY, "latest")
        log.info("built %s (%s, %d packages)", tag, image.id, len(manifest))
    except SandboxUnavailable:
        raise
    except ImageBuildError:
        raise
    except Exception as exc:
        raise ImageBuildError(f"building {tag} failed: {exc}. Fix: see the log above; rerun with --force.") from exc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        with contextlib.suppress(Exception):
            client.images.remove(temp_tag, noprune=False)


def _remove_stale(client: DockerClient, build_root: str) -> None:
    """Leftovers of a build that was killed (SIGKILL, power loss): temp tags and rootfs dirs. We hold the build
    lock, so no other build on this machine owns them."""
    for image in client.images.list(name=REPOSITORY):
        for t in image.tags or []:
            if t.startswith(f"{REPOSITORY}:tmp-"):
                log.info("removing stale temp tag %s", t)
                with contextlib.suppress(Exception):
                    client.images.remove(t)
    for path in glob.glob(os.path.join(build_root, "tgsuite-base-*")):
        log.info("removing stale build dir %s", path)
        shutil.rmtree(path, ignore_errors=True)


def _run(cmd: list[str], *, what: str, log_path: Path | None = None) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if log_path is not None:
        log_path.write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        raise ImageBuildError(f"could not {what} (`{' '.join(cmd[:4])} ...` exit {proc.returncode}):\n{tail}")
    return proc.stdout


def _debootstrap(rootfs: Path, *, suite: str, packages: Sequence[str], mirror: str, log_path: Path) -> None:
    cmd = ["debootstrap", "--variant=minbase", f"--include={','.join(sorted(set(packages)))}", suite, str(rootfs)]
    try:
        _run(cmd + [mirror], what=f"debootstrap {suite} from {mirror}", log_path=log_path)
    except ImageBuildError as exc:
        raise ImageBuildError(
            f"{exc}\nFix: check that {mirror} is reachable from this machine (apt-get update works) and carries "
            f"'{suite}' and the packages {sorted(set(packages))}; or pass --mirror URL."
        ) from exc


def _customise_rootfs(rootfs: Path) -> None:
    """Add the non-root ``agent`` user and ``/work``; drop apt caches. Plain file edits, no chroot needed."""
    uid = AGENT_UID
    with open(rootfs / "etc/passwd", "a") as fh:
        fh.write(f"{AGENT_USER}:x:{uid}:{uid}:tgsuite agent:/home/{AGENT_USER}:/bin/bash\n")
    with open(rootfs / "etc/group", "a") as fh:
        fh.write(f"{AGENT_USER}:x:{uid}:\n")
    if (rootfs / "etc/shadow").exists():
        with open(rootfs / "etc/shadow", "a") as fh:
            fh.write(f"{AGENT_USER}:!:19000:0:99999:7:::\n")
    for d in (rootfs / "home" / AGENT_USER, *(rootfs / p.lstrip("/") for p in PREMADE_DIRS)):
        d.mkdir(parents=True, exist_ok=True)
        os.chown(d, uid, uid)
        d.chmod(0o755)
    for pattern in ("var/cache/apt/archives/*.deb", "var/lib/apt/lists/*_*", "var/log/*.log"):
        for path in glob.glob(str(rootfs / pattern)):
            with contextlib.suppress(OSError):
                os.unlink(path)


def _dpkg_manifest(rootfs: Path) -> dict[str, str]:
    out = _run(
        ["dpkg-query", f"--admindir={rootfs}/var/lib/dpkg", "-W", "-f", "${Package}=${Version}\\n"],
        what="list installed packages",
    )
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


_VERIFY_SCRIPT = (
    "set -e; test \"$(id -u)\" = 1000; python3 -c 'import pytest, sys; assert sys.version_info >= (3, 9)'; "
    "git --version >/dev/null; patch --version >/dev/null; timeout --version >/dev/null; "
    "touch /work/.w /work/repo/.w && rm /work/.w /work/repo/.w; echo tgsuite-verify-ok"
)


def _verify(client: DockerClient, tag: str) -> None:
    try:
        out = client.containers.run(
            tag, ["sh", "-c", _VERIFY_SCRIPT], remove=True, network_mode="none", stdout=True, stderr=True
        )
    except Exception as exc:
        raise ImageBuildError(f"the freshly imported image failed verification: {exc}") from exc
    if b"tgsuite-verify-ok" not in out:
        raise ImageBuildError(f"the freshly imported image failed verification: {out[-2000:]!r}")
