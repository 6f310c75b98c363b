"""Agent tool latency: each tool call through ``harness.tools.ToolExecutor`` against the bare sandbox operation it
wraps, measured in the same invocation on the same sandbox (ratio = tool / baseline, medians over ``--n`` calls).

What the ratios show: the price of the path-safety check (one extra ``exec`` that resolves the path inside the
sandbox, so symlinks cannot leave the repository) and of observation formatting. Baselines:

- ``read_file``: ``sandbox.read_file`` of the same file;
- ``list_files`` / ``search``: the same ``find`` / ``grep`` argv run with ``sandbox.exec``;
- ``edit_file``: ``sandbox.read_file`` + ``sandbox.write_file`` of the same text;
- ``run_tests``: the same pytest command with ``sandbox.exec``.

Also prints peak resident memory of this process (``getrusage``; container memory is not included).

Usage::

    .venv/bin/python benchmarks/tools_bench.py --sandbox local --n 30
    .venv/bin/python benchmarks/tools_bench.py --sandbox docker --n 20 --json tools.json
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.sandbox import SANDBOX_KINDS, Sandbox, SandboxSpec  # noqa: E402
from harness.schema import TaskInstance  # noqa: E402
from harness.tools import DEFAULT_TEST_CMD, ToolExecutor, format_tool_call, parse_tool_calls  # noqa: E402

MODULE = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n" + "# filler\n" * 200
TESTS = "from calc import add, sub\n\n\ndef test_add():\n    assert add(2, 2) == 4\n"


def _sandbox(kind: str) -> Sandbox:
    spec = SandboxSpec(cpus=1.0, mem_bytes=1 << 30, pids=256)
    if kind == "local":
        from harness.sandbox_local import LocalSandbox

        return LocalSandbox(spec)
    from harness.sandbox_docker_provider import DockerSandboxProvider

    provider = DockerSandboxProvider(run_id=f"toolsbench-{int(time.time())}")
    provider.preflight()
    return provider.create(spec, instance_id="toolsbench")


def _median(fn: Callable[[], object], n: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def bench(box: Sandbox, n: int) -> dict[str, dict[str, float]]:
    inst = TaskInstance(instance_id="b", repo="b", base_commit="x", problem_statement="p", patch="", test_patch="",
                        FAIL_TO_PASS=["tests/test_calc.py::test_add"])
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "tests").mkdir()
        (Path(d) / "calc.py").write_text(MODULE)
        (Path(d) / "tests" / "test_calc.py").write_text(TESTS)
        box.copy_in(Path(d), ".")
    ex = ToolExecutor(box, inst, timeout=120, cap_chars=8000)

    def tool(name: str, **args: object) -> Callable[[], object]:
        (call,) = parse_tool_calls(format_tool_call(name, args))
        return lambda: ex.run(call)

    def rewrite() -> None:
        box.write_file("calc.py", box.read_file("calc.py").replace(b"a + b", b"a + b"))

    find = ["find", ".", "-name", ".git", "-prune", "-o", "-name", "__pycache__", "-prune", "-o", "-type", "f",
            "-print"]
    cases: dict[str, tuple[Callable[[], object], Callable[[], object]]] = {
        "read_file": (tool("read_file", path="calc.py"), lambda: box.read_file("calc.py")),
        "list_files": (tool("list_files"), lambda: box.exec(find, timeout=60)),
        "search": (tool("search", pattern="def add"),
                   lambda: box.exec(["grep", "-rnIE", "-e", "def add", "--", "."], timeout=60)),
        "edit_file": (tool("edit_file", path="calc.py", old="return a + b", new="return a + b"), rewrite),
        "run_tests": (tool("run_tests"), lambda: box.exec(DEFAULT_TEST_CMD, timeout=120)),
    }
    out = {}
    for name, (with_tool, baseline) in cases.items():
        t_tool, t_base = _median(with_tool, n), _median(baseline, n)
        out[name] = {"tool_s": t_tool, "baseline_s": t_base, "ratio": t_tool / t_base}
        print(f"{name:11s} tool {t_tool * 1e3:8.1f} ms   baseline {t_base * 1e3:8.1f} ms   ratio {t_tool / t_base:5.2f}x")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sandbox", choices=SANDBOX_KINDS, default="local")
    ap.add_argument("--n", type=int, default=20, help="calls per measurement (median reported)")
    ap.add_argument("--json", type=Path, default=None, help="also write the numbers here")
    args = ap.parse_args()
    with _sandbox(args.sandbox) as box:
        res = bench(box, args.n)
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS of this process: {peak_mib:.0f} MiB")
    if args.json:
        args.json.write_text(json.dumps({"sandbox": args.sandbox, "n": args.n, "results": res,
                                         "peak_rss_mib": peak_mib}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
