"""Sandbox overhead benchmark: LocalSandbox vs DockerSandbox, against a bare-subprocess baseline in the same run.

Measures
1. lifecycle latency: create -> exec(``python3 -c pass``) -> close, N times; median and p90 of each phase and of
   the total, and the ratio of the total to the baseline (a bare ``subprocess.run([python3, -c, pass])`` on the
   host, measured in the same run);
2. throughput: episodes/minute with 1 and 2 worker threads, where an "episode" is the sandbox work of one agent
   episode without model time: create, copy_in a 20-file repo, 4 execs (``ls``, ``python3 -c pass`` x2,
   ``git init -q``), write_file, read_file, close;
3. peak memory (max RSS) of this process and of its children.

Target (issue #2): Docker sandbox overhead (the lifecycle total, 1.) <= 1.0 s median per episode on a 2-core
machine. Numbers depend on the machine's load: the load average is printed at the start and the end.

    .venv/bin/python benchmarks/sandbox_bench.py                 # both kinds, N=20, 12 episodes per setting
    .venv/bin/python benchmarks/sandbox_bench.py --kinds local --n 50 --json-out /tmp/bench.json
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from harness.sandbox import Sandbox, SandboxSpec

SPEC = SandboxSpec(cpus=1.0, mem_bytes=1 << 30, pids=256)
TARGET_DOCKER_EPISODE_S = 1.0
# The interpreter the base image ships (Debian's python3); falls back to this interpreter.
BASELINE_PYTHON = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable


def _factory(kind: str) -> Callable[[], Sandbox]:
    if kind == "local":
        from harness.sandbox_local import LocalSandbox

        return lambda: LocalSandbox(SPEC)
    from harness.sandbox_docker_provider import DockerSandboxProvider

    provider = DockerSandboxProvider(run_id=f"bench-{int(time.time())}")
    provider.preflight()
    return lambda: provider.create(SPEC, instance_id="bench")


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def baseline(n: int) -> float:
    times = []
    for _ in range(n):
        t = time.perf_counter()
        subprocess.run([BASELINE_PYTHON, "-c", "pass"], check=True)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def lifecycle(make: Callable[[], Sandbox], n: int) -> dict[str, float]:
    phases: dict[str, list[float]] = {"create": [], "exec": [], "close": [], "total": []}
    for _ in range(n):
        t0 = time.perf_counter()
        box = make()
        t1 = time.perf_counter()
        res = box.exec(["python3", "-c", "pass"], timeout=30)
        t2 = time.perf_counter()
        box.close()
        t3 = time.perf_counter()
        assert res.returncode == 0, res
        for key, value in zip(phases, (t1 - t0, t2 - t1, t3 - t2, t3 - t0), strict=True):
            phases[key].append(value)
    out = {f"{k}_median_s": statistics.median(v) for k, v in phases.items()}
    out["total_p90_s"] = _pct(phases["total"], 0.9)
    return out


def _episode(make: Callable[[], Sandbox], repo: Path) -> float:
    t = time.perf_counter()
    with make() as box:
        box.copy_in(repo, ".")
        for cmd in ("ls -la", "python3 -c pass", "python3 -c pass", "git init -q"):
            res = box.exec(cmd, timeout=30)
            assert res.returncode == 0, res
        box.write_file("notes.txt", b"x" * 1000)
        assert len(box.read_file("notes.txt")) == 1000
    return time.perf_counter() - t


def throughput(make: Callable[[], Sandbox], episodes: int, workers: int, repo: Path) -> dict[str, float]:
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        durations = list(pool.map(lambda _: _episode(make, repo), range(episodes)))
    wall = time.perf_counter() - start
    return {"episodes_per_min": episodes / wall * 60, "episode_median_s": statistics.median(durations)}


def _make_repo(root: Path) -> Path:
    for i in range(20):
        sub = root / f"pkg{i % 4}"
        sub.mkdir(parents=True, exist_ok=True)
        (sub / f"mod{i}.py").write_text(f"def f{i}(x):\n    return x + {i}\n" * 20)
    return root


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kinds", default="local,docker", help="comma list of local, docker")
    parser.add_argument("--n", type=int, default=20, help="lifecycle repetitions per kind")
    parser.add_argument("--episodes", type=int, default=12, help="episodes per throughput setting")
    parser.add_argument("--json-out", type=Path, default=None)
    args = parser.parse_args(argv)
    results: dict[str, object] = {"baseline_subprocess_median_s": baseline(args.n)}
    base = float(results["baseline_subprocess_median_s"])  # type: ignore[arg-type]
    load = os.getloadavg()
    results["host"] = {"cpus": os.cpu_count(), "loadavg_1_5_15": load}
    print(f"host: {os.cpu_count()} CPUs, load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} (1/5/15 min)")
    print(f"baseline: bare `{BASELINE_PYTHON} -c pass` subprocess, median {base * 1000:.1f} ms")
    with tempfile.TemporaryDirectory() as tmp:
        repo = _make_repo(Path(tmp) / "repo")
        for kind in [k.strip() for k in args.kinds.split(",") if k.strip()]:
            make = _factory(kind)
            lc = lifecycle(make, args.n)
            lc["total_vs_baseline_ratio"] = lc["total_median_s"] / base
            tp = {f"workers_{w}": throughput(make, args.episodes, w, repo) for w in (1, 2)}
            results[kind] = {"lifecycle": lc, "throughput": tp}
            print(f"\n{kind}: create {lc['create_median_s'] * 1000:.0f} ms, exec {lc['exec_median_s'] * 1000:.0f} ms, "
                  f"close {lc['close_median_s'] * 1000:.0f} ms; total median {lc['total_median_s'] * 1000:.0f} ms "
                  f"(p90 {lc['total_p90_s'] * 1000:.0f} ms) = {lc['total_vs_baseline_ratio']:.1f}x baseline")
            for w, t in tp.items():
                print(f"  {w}: {t['episodes_per_min']:.0f} episodes/min (episode median {t['episode_median_s'] * 1000:.0f} ms)")
            if kind == "docker":
                ok = lc["total_median_s"] <= TARGET_DOCKER_EPISODE_S
                lc["target_met"] = ok
                print(f"  target: sandbox overhead (create -> exec -> close) <= {TARGET_DOCKER_EPISODE_S:.1f} s median: "
                      f"{'MET' if ok else 'MISSED'} ({lc['total_median_s']:.2f} s at load {os.getloadavg()[0]:.1f})")
    self_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    child_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    results["peak_rss_mib"] = {"self": self_kb / 1024, "children": child_kb / 1024}
    load = os.getloadavg()
    print(f"\nload average at the end {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}")
    print(f"peak RSS: this process {self_kb / 1024:.0f} MiB, largest child {child_kb / 1024:.0f} MiB")
    if args.json_out:
        args.json_out.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
