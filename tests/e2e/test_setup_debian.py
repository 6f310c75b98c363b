"""scripts/setup.sh on a minimal Debian (the project's base image: debootstrap minbase bookworm + python3, no
python3-venv), in a container without network.

What this covers: that set-up's first step finds venv unusable (no ensurepip: the stock-bookworm failure), tries to
install python3-venv before creating .venv (without network that attempt fails with the message naming it), and —
given the .deb files python3-venv needs, downloaded on the host with ``apt-get download`` at the image's python3.11
version — installs them offline (``TGSUITE_DEBS``), creates a working ``.venv`` (``pip`` runs) and stops there
(``TGSUITE_SETUP_UNTIL=venv``); a second run keeps that venv. What it does NOT cover: the pip installs of torch and
tgsuite (they need a package index, which the container cannot reach), Docker-in-Docker and the base image build.
The TGSUITE_TORCH choice is checked without a container (argument handling only).
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import tarfile
import uuid
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
# python3-venv's dependency closure that minbase + python3 lacks; python3.11-venv and openssl are pinned to the
# image's python3.11 and libssl3 versions (same source packages).
DEBS = ("python3-venv", "python3-pip-whl", "python3-setuptools-whl", "python3-distutils", "python3-lib2to3",
        "ca-certificates")


def _tar(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o755 if name.endswith(".sh") else 0o644
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _download_debs(dest: Path, versions: dict[str, str]) -> None:
    if shutil.which("apt-get") is None:
        pytest.skip("needs apt-get on the host to fetch python3-venv's .deb files")
    names = [*DEBS, f"python3.11-venv={versions['python3.11']}", f"openssl={versions['libssl3']}"]
    proc = subprocess.run(["apt-get", "download", *names], cwd=dest, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        pytest.skip(f"apt-get download {' '.join(names)} failed (needs Debian's archive): {proc.stderr[-300:]}")


def _run(container: Any, cmd: str) -> tuple[int, str]:
    res = container.exec_run(["bash", "-c", cmd], user="root", demux=False)
    return res.exit_code, res.output.decode(errors="replace")


@pytest.mark.docker
def test_setup_installs_python3_venv_before_creating_the_venv(docker_client: Any, base_image: str,
                                                              tmp_path: Path) -> None:
    container = docker_client.containers.run(
        base_image, ["sleep", "600"], detach=True, network_mode="none", user="root",
        labels={"tgsuite.test": f"setup-{uuid.uuid4().hex[:8]}"})
    try:
        code, out = _run(container, "dpkg-query -W -f='${Package} ${Version}\\n' python3.11 libssl3")
        assert code == 0, out
        versions = dict(line.split(" ", 1) for line in out.splitlines() if line.strip())
        code, out = _run(container, "python3 -m venv /tmp/plain")
        assert code != 0 and "ensurepip" in out  # the stock-bookworm failure this step exists for
        _download_debs(tmp_path, versions)
        files = {"src/scripts/setup.sh": (ROOT / "scripts" / "setup.sh").read_bytes(),
                 "src/pyproject.toml": (ROOT / "pyproject.toml").read_bytes()}
        files |= {f"debs/{p.name}": p.read_bytes() for p in tmp_path.glob("*.deb")}
        container.put_archive("/", _tar(files))
        code, out = _run(container, "cd /src && TGSUITE_SETUP_UNTIL=venv bash scripts/setup.sh")
        assert code != 0 and "installing python3 python3-venv ca-certificates" in out, out
        assert not container.exec_run(["test", "-e", "/src/.venv/bin/python"]).exit_code == 0
        code, out = _run(container, "cd /src && TGSUITE_DEBS=/debs TGSUITE_SETUP_UNTIL=venv bash scripts/setup.sh")
        assert code == 0, out
        assert "from /debs (offline" in out and "creating virtual environment" in out and "stopping after" in out
        code, out = _run(container, "/src/.venv/bin/python -m pip --version")
        assert code == 0 and "pip" in out, out
        code, out = _run(container, "cd /src && TGSUITE_SETUP_UNTIL=venv bash scripts/setup.sh")
        assert code == 0 and "creating virtual environment" not in out and "installing" not in out, out
    finally:
        container.remove(force=True)


def test_setup_refuses_an_unknown_torch_build(tmp_path: Path) -> None:
    py = shutil.which("python3") or "python3"
    if subprocess.run([py, "-c", "import ensurepip, venv"], capture_output=True).returncode != 0:
        pytest.skip("the host's python3 has no venv: step 0 would install Debian packages on this machine")
    env = {**os.environ, "TGSUITE_TORCH": "rocm", "PYTHON": py}
    work = tmp_path / "src"
    (work / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "setup.sh", work / "scripts" / "setup.sh")
    shutil.copy(ROOT / "pyproject.toml", work / "pyproject.toml")
    proc = subprocess.run(["bash", str(work / "scripts" / "setup.sh")], capture_output=True, text=True, env=env,
                          timeout=120)
    assert proc.returncode == 2 and "TGSUITE_TORCH=rocm: use cpu, cuda or auto" in proc.stderr
    assert not (work / ".venv").exists()
