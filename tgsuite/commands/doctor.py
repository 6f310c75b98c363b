"""``tgsuite doctor``: is this machine ready? One line per check; for each problem the cause and the fix."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from typing import Literal, NamedTuple

Status = Literal["ok", "warn", "fail"]

EPILOG = """\
example:
  $ tgsuite doctor
  ok   python         3.11.7
  ok   torch          2.13.0+cpu (cpu build)
  ok   cpus           2
  ok   gpu            none (CPU only: gpu tests skip, training runs on CPU)
  ok   disk           78.1 GiB free in /home/you/tgsuite
  ok   docker         engine 20.10.24+dfsg1, API 1.41
  ok   base image     tgsuite/base:bookworm-e65e8dbe3f3e (sha256:48ca5097239f)
  ok   debootstrap    /usr/sbin/debootstrap
  ok   local sandbox  process cap via a pids cgroup (root; not isolated: isolated=False)

Exit code 0 when everything required is present, 1 otherwise. `--no-docker` makes the Docker checks advisory
(LocalSandbox only: runs are recorded as isolated=False). `--json` prints the checks as JSON.
"""


class Check(NamedTuple):
    name: str
    status: Status
    detail: str
    fix: str = ""


def _python() -> Check:
    v = sys.version_info
    text = f"{v.major}.{v.minor}.{v.micro}"
    if v < (3, 11):
        return Check("python", "fail", f"{text} is older than 3.11", "use Python >= 3.11 (scripts/setup.sh makes .venv)")
    return Check("python", "ok", text)


def nvidia_gpus() -> list[str]:
    """GPUs ``nvidia-smi -L`` lists (empty without the tool or a driver); independent of the torch build."""
    import subprocess

    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in out.splitlines() if line.startswith("GPU ")]


def torch_checks(gpus: list[str] | None = None) -> list[Check]:
    try:
        import torch
    except Exception as exc:
        fix = "run `bash scripts/setup.sh` (installs torch 2.13.0; TGSUITE_TORCH=cpu|cuda chooses the build)"
        return [Check("torch", "fail", f"not importable ({exc})", fix), Check("gpu", "warn", "unknown (no torch)")]
    build = f"cuda {torch.version.cuda}" if torch.version.cuda else "cpu"
    checks = [Check("torch", "ok", f"{torch.__version__} ({build} build)")]
    visible = nvidia_gpus() if gpus is None else gpus
    if not torch.version.cuda and visible:
        checks[0] = Check("torch", "warn", f"{torch.__version__} (cpu build) but nvidia-smi lists {len(visible)} GPU(s)",
                          "TGSUITE_TORCH=cuda bash scripts/setup.sh installs the CUDA build")
    if torch.cuda.is_available():
        names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        checks.append(Check("gpu", "ok", ", ".join(names)))
    elif torch.version.cuda:
        checks.append(Check("gpu", "warn", "CUDA build of torch but no usable GPU", "check `nvidia-smi` and drivers"))
    else:
        checks.append(Check("gpu", "ok", "none (CPU only: gpu tests skip, training runs on CPU)"))
    return checks


def _disk(path: str, min_free_gb: float) -> Check:
    free = shutil.disk_usage(path).free / 2**30
    detail = f"{free:.1f} GiB free in {os.path.abspath(path)}"
    if free < min_free_gb:
        return Check("disk", "fail", f"{detail} (< {min_free_gb:g} GiB)", "free disk space or run from a larger disk")
    return Check("disk", "ok", detail)


def _docker(required: bool) -> list[Check]:
    from harness import images
    from harness.sandbox import SandboxUnavailable

    bad: Status = "fail" if required else "warn"
    try:
        client = images.connect(timeout=10)
        version = client.version()
    except SandboxUnavailable as exc:
        cause, _, fix = str(exc).partition(" Fix: ")
        return [Check("docker", bad, cause, fix.rstrip(".")), Check("base image", bad, "unknown (no engine)",
                                                                  "start the engine first, then `tgsuite images build`")]
    api = version.get("ApiVersion", "?")
    checks = [Check("docker", "ok", f"engine {version.get('Version', '?')}, API {api}")]
    if tuple(int(x) for x in api.split(".") if x.isdigit()) < (1, 41):
        checks[0] = Check("docker", bad, f"engine API {api} < 1.41", "install docker.io >= 20.10")
    tag = images.base_image_tag()
    if images.image_present(client, tag):
        checks.append(Check("base image", "ok", f"{tag} ({images.image_digest(client, tag)[:19]})"))
    else:
        checks.append(Check("base image", bad, f"{tag} is not built", "run `tgsuite images build` (root, a few minutes)"))
    root = client.info().get("DockerRootDir", "")
    if root and os.path.isdir(root) and shutil.disk_usage(root).free < 2 << 30:
        checks.append(Check("docker disk", bad, f"< 2 GiB free under {root}", "`docker system prune` or free disk"))
    return checks


def _debootstrap(image_ok: bool) -> Check:
    path = shutil.which("debootstrap")
    if path:
        return Check("debootstrap", "ok", path)
    if image_ok:
        return Check("debootstrap", "ok", "not installed (only needed to rebuild the image)")
    return Check("debootstrap", "fail", "not installed; needed to build the base image",
                 "`sudo apt-get install debootstrap` (scripts/setup.sh does it)")


def _local_sandbox() -> Check:
    """Can LocalSandbox cap processes here? (RLIMIT_NPROC as a normal user; a pids cgroup as root.)"""
    if os.geteuid() != 0:
        return Check("local sandbox", "ok", "process cap via RLIMIT_NPROC (not isolated: isolated=False)")
    from harness.sandbox_local import make_pids_cgroup

    probe = make_pids_cgroup(f"tgsuite-doctor-{os.getpid()}", 8)
    if probe is None:
        return Check("local sandbox", "warn", "running as root without a writable pids cgroup: no process cap",
                     "run as a normal user, or use the Docker sandbox")
    probe.rmdir()
    return Check("local sandbox", "ok", "process cap via a pids cgroup (root; not isolated: isolated=False)")


def run_checks(*, docker: bool = True, min_free_gb: float = 5.0, path: str = ".") -> list[Check]:
    """All checks, in display order. ``docker=False`` makes Docker problems warnings instead of failures."""
    checks = [_python(), *torch_checks()]
    checks.insert(2, Check("cpus", "ok" if (os.cpu_count() or 1) >= 2 else "warn", str(os.cpu_count())))
    checks.append(_disk(path, min_free_gb))
    docker_checks = _docker(required=docker)
    checks.extend(docker_checks)
    image_ok = any(c.name == "base image" and c.status == "ok" for c in docker_checks)
    deb = _debootstrap(image_ok)
    if not docker and deb.status == "fail":
        deb = deb._replace(status="warn")
    checks.append(deb)
    checks.append(_local_sandbox())
    return checks


def format_checks(checks: list[Check]) -> str:
    lines = []
    for c in checks:
        line = f"{c.status:<4} {c.name:<14} {c.detail}"
        if c.status != "ok" and c.fix:
            line += f" -- fix: {c.fix}"
        lines.append(line)
    return "\n".join(lines)


def _run(args: argparse.Namespace) -> int:
    from tgsuite.commands.common import CLIError

    if args.min_free_gb < 0:
        raise CLIError(f"--min-free-gb must be >= 0, got {args.min_free_gb}. Fix: e.g. --min-free-gb 5.")
    checks = run_checks(docker=not args.no_docker, min_free_gb=args.min_free_gb, path=args.path)
    if args.json:
        print(json.dumps([c._asdict() for c in checks], indent=2))
    else:
        print(format_checks(checks))
    failed = [c.name for c in checks if c.status == "fail"]
    if failed and not args.json:
        print(f"\n{len(failed)} required check(s) failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "doctor", help="check that this machine is ready (engine, image, torch, disk)", description=__doc__,
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--no-docker", action="store_true", help="Docker is optional (LocalSandbox only)")
    parser.add_argument("--min-free-gb", type=float, default=5.0, help="free disk required (default 5)")
    parser.add_argument("--path", default=".", help="where runs will be written (for the disk check)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.set_defaults(func=_run)
