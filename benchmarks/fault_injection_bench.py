"""Fault injection (issue #38, last deliverable): N episodes under faults of 15 kinds (10 without Docker); counts lost episodes and
misclassified outcomes, which must both be 0.

A run of ``tgsuite eval``'s runner (``harness.runner.run_eval``, real sandboxes: Docker by default) on a generated
mini task set, with three arms: ``oracle`` (applies the gold patch: every final result must be resolved),
``null`` (finishes without a change) and ``spoofer`` (adds a ``conftest.py`` that marks every test passed: a wrong
patch, which must be graded unresolved). The run goes on in child processes; this process injects the runner faults
and resumes the run until it is complete:

- in the children (``fault_injection_faults``, drawn per sandbox at ``--rate`` on attempts 0 and 1): create_fail,
  exec_transport, kill_exec, kill_idle, pause, oci_126, policy_crash, copy_out_fail, kill_grade, grader_crash,
  grade_transport (the kill / pause / OCI ones need Docker);
- from here: ``sigint`` / ``sigterm`` (the child must stop, leave no container and exit 128+signal), ``kill9``
  (the next child removes the orphans), ``disk_full`` (the run directory lives on a small tmpfs, which a filler
  file fills; needs root; the child must stop with the disk-full message), each after a random number of results.

Counted at the end, from the run directory and the faults log:
- ``lost``: planned episodes without a result; ``doubled``: an episode twice in results.jsonl;
- ``infra scored``: an attempt that got an injected infrastructure fault but was scored, or an ``oracle`` episode
  whose final result is scored and not resolved;
- ``agent as infra``: a final ``null`` / ``spoofer`` result that is an infrastructure error (their last attempt is
  never faulted), or a ``null`` / ``spoofer`` result resolved;
- ``containers left`` after each SIGINT/SIGTERM, ``tmp files`` left at the end.

    python benchmarks/fault_injection_bench.py --episodes 420 --workers 2          # the issue's size
    python benchmarks/fault_injection_bench.py --episodes 60 --sandbox local       # no Docker faults (10 kinds)
"""

from __future__ import annotations

import argparse
import errno
import json
import math
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

ARMS = ("oracle", "null", "spoofer")
RUNNER_KINDS = ("sigint", "sigterm", "kill9", "disk_full")


FORGE = ("import pytest\n\n@pytest.hookimpl(hookwrapper=True)\ndef pytest_runtest_makereport(item, call):\n"
         "    outcome = yield\n    outcome.get_result().outcome = 'passed'\n")


def _spoofer():
    """An agent that fixes nothing and adds a ``conftest.py`` marking every test passed: a wrong patch that must
    be graded unresolved (the grader restores the file), never an infrastructure error."""
    from harness.interfaces import PolicyOutput

    class Spoofer:
        name = spec = "spoofer"

        def act(self, messages, *, tools, rng):  # noqa: ANN001
            first = not any(m.role == "assistant" for m in messages)
            call = ({"name": "edit_file", "arguments": {"path": "conftest.py", "old": "", "new": FORGE}} if first
                    else {"name": "finish", "arguments": {"message": "Added `conftest.py`."}})
            return PolicyOutput(f"<tool_call>\n{json.dumps(call)}\n</tool_call>")

    return Spoofer()


def child(args: argparse.Namespace) -> int:
    """One process of the run: run_eval with faulty sandboxes until done or stopped."""
    from fault_injection_faults import FaultyFactory, FaultyPolicy

    from harness.infra import ErrorRateGuard, RetryPolicy
    from harness.interfaces import EpisodeLimits
    from harness.policies.scripted import NullPolicy, OraclePolicy
    from harness.run_control import RunInterrupted, sandbox_run_id
    from harness.runner import RunAborted, run_eval
    from harness.runner_sandbox import TaskSandboxFactory
    from harness.sandbox import SandboxSpec
    from harness.tasks import load_task_set

    ts = load_task_set(args.tasks)
    run_id = sandbox_run_id(args.run)
    print(f"SANDBOX_RUN_ID {run_id}", flush=True)
    inner = TaskSandboxFactory(ts, kind=args.sandbox, run_id=run_id,
                               spec=SandboxSpec(mem_bytes=512 << 20, env={"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}))
    fac = FaultyFactory(inner, seed=args.seed, rate=args.rate, log_path=Path(args.faults_log),
                        docker=args.sandbox == "docker")
    policies = {"oracle": FaultyPolicy(OraclePolicy(ts)), "null": FaultyPolicy(NullPolicy()),
                "spoofer": FaultyPolicy(_spoofer())}
    try:
        inner.preflight()
        run_eval(ts, policies, [0], args.run, sandbox_factory=fac, workers=args.workers,
                 limits=EpisodeLimits(max_turns=30), retry=RetryPolicy(max_attempts=3, backoff_s=0.2),
                 guard=ErrorRateGuard(max_rate=0.95, min_attempts=8), grade_timeout_s=120)
    except RunInterrupted as exc:
        inner.close()
        print("INTERRUPTED", flush=True)
        os._exit(exc.exit_code)
    except RunAborted as exc:
        inner.close()
        print(f"ABORTED {exc}", flush=True)
        os._exit(1)
    inner.close()
    print("COMPLETE", flush=True)
    return 0


def _results(run: Path) -> int:
    return len(list(run.glob("episodes/*/*/s*/a*/result.json")))


def _containers(run_id: str) -> int:
    import docker

    api = docker.from_env().api
    return len(api.containers(all=True, filters={"label": [f"tgsuite.run_id={run_id}"]}))


def _mount_tmpfs(path: Path, mib: int) -> bool:
    if os.geteuid() != 0:
        return False
    path.mkdir(parents=True, exist_ok=True)
    return subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={mib}m", "tmpfs", str(path)],
                          capture_output=True).returncode == 0


def _start(args: argparse.Namespace, tasks: Path, run: Path, log: Path) -> subprocess.Popen:
    cmd = [sys.executable, __file__, "--child", "--tasks", str(tasks), "--run", str(run), "--faults-log", str(log),
           "--sandbox", args.sandbox, "--workers", str(args.workers), "--seed", str(args.seed), "--rate", str(args.rate)]
    return subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            start_new_session=True)


def _run_id_of(proc: subprocess.Popen) -> str:
    line = proc.stdout.readline() if proc.stdout else ""
    return line.split()[-1] if line.startswith("SANDBOX_RUN_ID") else ""


def drive(args: argparse.Namespace, tasks: Path, run: Path, log: Path, mnt: Path | None, planned: int) -> dict:
    """Start children until the run completes, injecting the runner faults in between (module docstring)."""
    rng = random.Random(args.seed)
    kinds = [k for k in RUNNER_KINDS if k != "disk_full" or mnt is not None]
    todo = [kinds[i % len(kinds)] for i in range(args.runner_faults)]
    rng.shuffle(todo)
    stats: dict = {"runner_faults": Counter(), "stop_s": [], "containers_left": 0, "children": 0}
    for _ in range(len(todo) + 12):
        proc = _start(args, tasks, run, log)
        stats["children"] += 1
        run_id = _run_id_of(proc)
        if todo and _results(run) + 3 < planned:  # only mid-run: a signal after the last result tests nothing
            kind = todo.pop()
            target = min(_results(run) + rng.randint(3, 12), planned - 1)
            while _results(run) < target and proc.poll() is None:
                time.sleep(0.2)
            if proc.poll() is None:
                stats["runner_faults"][kind] += 1
                _inject(kind, proc, run_id, mnt, stats, args.sandbox)
                continue
            todo.append(kind)  # the child ended first: inject into the next one
        out, _ = proc.communicate(timeout=7200)
        if "COMPLETE" in out:
            stats["runner_faults_not_injected"] = len(todo)
            return stats
    raise SystemExit(f"the run did not complete after {stats['children']} child processes")


def _inject(kind: str, proc: subprocess.Popen, run_id: str, mnt: Path | None, stats: dict, sandbox: str) -> None:
    t0 = time.monotonic()
    if kind in ("sigint", "sigterm"):
        sig = signal.SIGINT if kind == "sigint" else signal.SIGTERM
        proc.send_signal(sig)
        out, _ = proc.communicate(timeout=120)
        stats["stop_s"].append(time.monotonic() - t0)
        if proc.returncode != 128 + sig or "INTERRUPTED" not in out:
            stats.setdefault("bad_stops", []).append((kind, proc.returncode))
        if sandbox == "docker":
            stats["containers_left"] += _containers(run_id)
    elif kind == "kill9":
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    else:  # disk_full: fill the run directory's tmpfs, wait for the child's stop, free the space
        assert mnt is not None
        free = os.statvfs(mnt).f_bavail * os.statvfs(mnt).f_frsize
        try:
            (mnt / "filler").write_bytes(b"\0" * max(0, free - (64 << 10)))
        except OSError as exc:  # the child wrote meanwhile and the disk filled before the filler did: full either way
            if exc.errno != errno.ENOSPC:
                raise
        out, _ = proc.communicate(timeout=600)
        stats["stop_s"].append(time.monotonic() - t0)
        if "ABORTED" not in out or "full disk" not in out:
            stats.setdefault("bad_stops", []).append((kind, out.strip()[-200:]))
        (mnt / "filler").unlink()


def evaluate(run: Path, log: Path, planned: int) -> dict:
    from harness.rundir import episode_dirs
    from harness.runner import rebuild_results
    from harness.schema import EpisodeResult

    finals = rebuild_results(run)
    keys = Counter((r.instance_id, r.arm, r.seed) for r in finals)
    faults = [json.loads(line) for line in log.read_text().splitlines()] if log.is_file() else []
    faulted = {(f["instance_id"], f["attempt"], f["arm"]) for f in faults}
    infra_scored = agent_as_infra = attempts = 0
    for iid, arm, _seed, sdir in episode_dirs(run):
        for res_file in sorted(sdir.glob("a*/result.json")):
            r = EpisodeResult.model_validate_json(res_file.read_text())
            attempts += 1
            hit = (iid, r.attempt, arm) in faulted or (iid, r.attempt, None) in faulted
            infra_scored += bool(hit and r.scored)
    for r in finals:
        if r.arm == "oracle":
            infra_scored += bool(r.scored and not r.resolved)
        else:
            agent_as_infra += bool(r.failure_class == "infra" or r.resolved)
    return {"planned": planned, "results": len(finals), "lost": planned - len(keys),
            "doubled": sum(n - 1 for n in keys.values()), "attempts": attempts, "faults_in_children": len(faults),
            "fault_kinds_in_children": dict(Counter(f["kind"] for f in faults)),
            "infra_scored": infra_scored, "agent_as_infra": agent_as_infra,
            "finals": dict(Counter(f"{r.arm}:{r.status}" for r in finals)),
            "tmp_files": len(list(run.rglob("*.tmp")))}


def main(argv: list[str] | None = None) -> int:
    from harness.sandbox import SANDBOX_KINDS

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--episodes", type=int, default=420, help="planned episodes (rounded up to 3 arms x tasks)")
    p.add_argument("--sandbox", choices=SANDBOX_KINDS, default="docker")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--rate", type=float, default=0.12, help="share of sandboxes (attempts 0, 1) given a fault")
    p.add_argument("--runner-faults", type=int, default=8, help="signals / kill -9 / disk-full injected from here")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--keep", metavar="DIR", help="work in DIR and keep it (default: a temp dir, removed)")
    p.add_argument("--json-out", metavar="FILE")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    for name in ("--tasks", "--run", "--faults-log"):
        p.add_argument(name, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        return child(args)
    from harness.minirepos import make_mini

    work = Path(args.keep or tempfile.mkdtemp(prefix="tgs-faults-"))
    n_tasks = math.ceil(args.episodes / len(ARMS))
    repos = max(1, math.ceil(n_tasks / 6))
    tasks = work / "tasks"
    make_mini(tasks, split="heldout", repos=repos, tasks_per_repo=math.ceil(n_tasks / repos), seed=args.seed)
    from harness.tasks import load_task_set

    planned = len(load_task_set(tasks).instances) * len(ARMS)
    mnt = work / "disk"
    mounted = _mount_tmpfs(mnt, 128)
    run, log = (mnt if mounted else work) / "run", work / "faults.jsonl"
    t0 = time.monotonic()
    try:
        stats = drive(args, tasks, run, log, mnt if mounted else None, planned)
        counts = evaluate(run, log, planned)
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(mnt)], check=False)
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    kinds = set(counts["fault_kinds_in_children"]) | set(stats["runner_faults"])
    summary = {**counts, "runner_faults": dict(stats["runner_faults"]), "children": stats["children"],
               "fault_kinds": len(kinds), "faults": counts["faults_in_children"] + sum(stats["runner_faults"].values()),
               "stop_s_max": round(max(stats["stop_s"], default=0.0), 2), "containers_left": stats["containers_left"],
               "bad_stops": stats.get("bad_stops", []), "runner_faults_not_injected": stats["runner_faults_not_injected"], "wall_s": round(time.monotonic() - t0, 1),
               "sandbox": args.sandbox, "workers": args.workers, "load_avg": os.getloadavg()}
    print(json.dumps(summary, indent=1))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(summary, indent=1) + "\n")
    ok = not (summary["lost"] or summary["doubled"] or summary["infra_scored"] or summary["agent_as_infra"]
              or summary["containers_left"] or summary["bad_stops"] or summary["tmp_files"])
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
