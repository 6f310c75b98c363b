"""Environment images: the base image plus a repository's Python dependencies, built without network in Docker.

``ensure_env_image(client, ["six==1.17.0", ...])`` returns the tag ``tgsuite/env:<key>``, building it when missing:

1. the HOST downloads the wheels (``pip download --only-binary :all:`` for the image's Python, CPython 3.11 on
   manylinux x86_64, plus pip's own wheel) into a temporary wheelhouse;
2. a throw-away container from the base image, with ``network_mode="none"``, receives the wheelhouse and installs
   the requirements with pip run from its wheel: ``--no-index --find-links`` into ``/opt/tgsuite-env``;
3. the container is committed as the tag, with ``PYTHONPATH=/opt/tgsuite-env`` (the repository under test, first on
   ``sys.path`` in its work tree, still wins over an installed copy), user 1000 and ``/work`` as before.

The key is a content hash, like the base image's: recipe version, the base image's tag and the sorted, pinned
requirements (``name==version`` only: an unpinned requirement would make the key lie). A present tag is reused
(a second call costs one image lookup). Instances use it through their ``image`` field (a literal tag).
What is not covered: sdist-only requirements (no wheel: refused by pip with its message), packages needing system
libraries the base image lacks, and anything that must run at install time (no network there by design).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import logging
import re
import subprocess
import sys
import tarfile
import tempfile
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from harness import images
from harness.images import ImageBuildError

if TYPE_CHECKING:  # the Docker SDK is imported where it is used; these names are for the annotations only
    from docker import DockerClient

log = logging.getLogger(__name__)

ENV_REPOSITORY = "tgsuite/env"
ENV_RECIPE = 1
SITE_DIR = "/opt/tgsuite-env"
LABEL_REQUIREMENTS = "tgsuite.requirements"
LABEL_BASE = "tgsuite.base_image"
PIN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9,._-]+\])?==[A-Za-z0-9.!+_-]+$")
PIP_TARGET = ["--python-version", "3.11", "--implementation", "cp", "--abi", "cp311", "--platform",
              "manylinux_2_28_x86_64", "--platform", "manylinux2014_x86_64", "--platform", "linux_x86_64",
              "--only-binary", ":all:"]


def check_requirements(requirements: Sequence[str]) -> list[str]:
    """Sorted, de-duplicated pins; raises ValueError naming the first requirement that is not ``name==version``."""
    bad = [r for r in requirements if not PIN.match(r.strip())]
    if bad:
        raise ValueError(f"environment requirement {bad[0]!r} is not pinned; fix: write name==version (the image "
                         "key must say exactly what is inside)")
    if not requirements:
        raise ValueError("an environment image needs at least one requirement")
    return sorted({r.strip() for r in requirements})


def env_key(requirements: Sequence[str], base_tag: str) -> str:
    text = f"recipe={ENV_RECIPE}\nbase={base_tag}\n" + "".join(f"req={r}\n" for r in check_requirements(requirements))
    return hashlib.sha256(text.encode()).hexdigest()


def env_image_tag(requirements: Sequence[str], base_tag: str | None = None) -> str:
    return f"{ENV_REPOSITORY}:{env_key(requirements, base_tag or images.base_image_tag())[:16]}"


def download_wheels(requirements: Sequence[str], dest: Path) -> Path:
    """Wheels of the requirements and their dependencies for the image's Python, and pip's own; returns pip's."""
    pip_version = subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True, text=True,
                                 check=True).stdout.split()[1]
    for reqs in (list(requirements), [f"pip=={pip_version}"]):
        res = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "-d", str(dest), *PIP_TARGET, *reqs],
                             capture_output=True, text=True, timeout=1800)
        if res.returncode != 0:
            raise ImageBuildError(f"pip download {' '.join(reqs)} failed on the host: {res.stderr.strip()[-800:]}. "
                                  "Fix: check the pins (a wheel must exist for CPython 3.11 on Linux x86_64).")
    (pip_wheel,) = dest.glob(f"pip-{pip_version}-*.whl")
    return pip_wheel


def _tar_dir(src: Path, arcname: str) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(src, arcname=arcname)
    return buf.getvalue()


def _install(client: DockerClient, base_tag: str, wheels: Path, pip_wheel: Path, reqs: list[str], tag: str) -> None:
    (wheels / "requirements.txt").write_text("".join(r + "\n" for r in reqs))
    name = f"tgsuite-envbuild-{uuid.uuid4().hex[:10]}"
    box = client.containers.create(base_tag, ["sleep", "3600"], name=name, user="root", network_mode="none",
                                   labels={"tgsuite.envbuild": "1"})
    try:
        box.start()
        box.put_archive("/tmp", _tar_dir(wheels, "wheels"))
        cmd = ["python3", f"/tmp/wheels/{pip_wheel.name}/pip", "install", "--no-index", "--find-links", "/tmp/wheels",
               "--target", SITE_DIR, "--no-compile", "--disable-pip-version-check", "-r", "/tmp/wheels/requirements.txt"]
        res = box.exec_run(cmd, user="root")
        if res.exit_code != 0:
            raise ImageBuildError(f"installing {', '.join(reqs)} offline failed: {res.output.decode()[-800:]}")
        box.exec_run(["rm", "-rf", "/tmp/wheels"], user="root")
        box.stop(timeout=1)
        repo, _, ttag = tag.partition(":")
        changes = [f"ENV PYTHONPATH={SITE_DIR}", f"USER {images.AGENT_UID}:{images.AGENT_UID}", "WORKDIR /work",
                   'CMD ["/bin/bash"]', f'LABEL {LABEL_REQUIREMENTS}="{" ".join(reqs)}"', f'LABEL {LABEL_BASE}="{base_tag}"']
        box.commit(repository=repo, tag=ttag, changes=changes)
    finally:
        with contextlib.suppress(Exception):
            box.remove(force=True)


def ensure_env_image(client: DockerClient, requirements: Sequence[str], *, base_tag: str | None = None) -> tuple[str, bool]:
    """(tag, built): the environment image for ``requirements`` on the base image, built when missing (module
    docstring). Raises ``ValueError`` for unpinned requirements and ``ImageBuildError`` when a step fails."""
    base = base_tag or images.base_image_tag()
    reqs = check_requirements(requirements)
    tag = env_image_tag(reqs, base)
    if images.image_present(client, tag):
        return tag, False
    if not images.image_present(client, base):
        raise ImageBuildError(f"base image {base} is missing; fix: tgsuite images build")
    log.info("building %s (%s) offline on %s", tag, ", ".join(reqs), base)
    with tempfile.TemporaryDirectory(prefix="tgsuite-wheels-") as tmp:
        pip_wheel = download_wheels(reqs, Path(tmp))
        _install(client, base, Path(tmp), pip_wheel, reqs, tag)
    return tag, True


__all__ = ["ENV_REPOSITORY", "SITE_DIR", "check_requirements", "download_wheels", "ensure_env_image", "env_image_tag"]
