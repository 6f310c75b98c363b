"""docs/ARCHITECTURE.md "Import rules": the direction of imports between packages, no import cycle between our
modules, no private name imported from another module; enforced by AST-scanning every module.

Every ``import`` / ``from ... import`` anywhere in a module counts (top level, inside functions, under
``TYPE_CHECKING``): a lazy import is still a dependency, so it may neither break a direction rule nor close a
cycle. Standard-library modules are always allowed. To change a rule, change docs/ARCHITECTURE.md first and then
the tables below, in the same commit.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
OURS = ("protocols", "harness", "evalsuite", "reports", "repro", "tgsuite")
# Small utilities any package may use (validation models, typing backports, progress bars).
UTILITIES = {"pydantic", "pydantic_core", "typing_extensions", "tqdm"}

# Which of OUR modules each package may import: a prefix ending in "." allows the whole package.
ALLOWED_INTERNAL: dict[str, tuple[str, ...]] = {
    "protocols": ("protocols.",),
    "harness": ("harness.", "protocols."),
    # harness.rundir: the one run-directory reader (it imports only harness.schema: no Docker, no torch)
    "evalsuite": ("evalsuite.", "protocols.", "harness.schema", "harness.rundir"),
    "reports": ("reports.", "protocols.", "harness.schema", "harness.rundir", "evalsuite.schema"),
    "repro": ("repro.", "harness.", "protocols."),  # the training library: never evalsuite, reports, tgsuite
    "tgsuite": ("tgsuite.", "repro.", "harness.", "evalsuite.", "reports.", "protocols."),  # the application
}
# Third-party top-level modules each package may import (None = no restriction).
ALLOWED_THIRD_PARTY: dict[str, set[str] | None] = {
    "protocols": {"cryptography"},  # Ed25519 signatures of frozen records (protocols.anchor)
    # swebench: its log parsers (harness.swebench_compat); ray: the Ray executor (harness.runner_ray, imported lazily);
    # mcp / mcp_types / anyio / uvicorn: the MCP server of `tgsuite serve-tools` (harness.mcp_server only: ONLY_IN)
    # inspect_ai: the Inspect log writer of `tgsuite export inspect` (harness.trajdata.inspect_export only: ONLY_IN)
    "harness": {"docker", "requests", "urllib3", "swebench", "ray", "mcp", "mcp_types", "anyio", "uvicorn",
                "inspect_ai"},
    "evalsuite": {"numpy", "scipy", "statsmodels", "pandas"},
    "reports": {"jinja2", "markupsafe", "matplotlib", "numpy"},
    "repro": None,
    "tgsuite": None,
}
# Optional integrations: these third-party packages may be imported by the named modules only (each imports them
# lazily, inside the functions that need them), so every other module loads without them installed.
ONLY_IN: dict[str, tuple[str, ...]] = {
    "mcp": ("harness.mcp_server", "tgsuite.commands.serve_tools"),
    "mcp_types": ("harness.mcp_server",),
    "anyio": ("harness.mcp_server",),
    "uvicorn": ("harness.mcp_server",),
    "inspect_ai": ("harness.trajdata.inspect_export", "tgsuite.commands.export"),
}
# harness policies (and only they) may load models.
POLICY_ONLY = {"transformers", "torch", "tokenizers", "safetensors", "numpy"}
NEVER: dict[str, set[str]] = {"evalsuite": {"torch", "docker"}, "reports": {"torch", "docker", "scipy", "statsmodels"}}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def imports_of(source: str, module: str, *, is_package: bool = False) -> list[tuple[int, str]]:
    """(line, absolute module name) for every import in ``source``; relative imports resolved against ``module``."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            # `from X import y` may name module X.y: record X.y so `from harness import sandbox` is caught.
            found += [(node.lineno, f"{name}.{a.name}" if name else a.name) for a in node.names]
    return found


def violations(source: str, module: str, *, is_package: bool = False) -> list[str]:
    """Human-readable rule violations of one module (empty when it follows ARCHITECTURE §1)."""
    pkg = module.split(".")[0]
    in_policies = module.startswith("harness.policies")
    problems = []
    for line, name in imports_of(source, module, is_package=is_package):
        top = name.split(".")[0]
        if top in sys.stdlib_module_names or top in UTILITIES or top == "__future__":
            continue
        if top in OURS:
            if not any(name == p.rstrip(".") or name.startswith(p if p.endswith(".") else p + ".")
                       for p in ALLOWED_INTERNAL[pkg]):
                problems.append(f"{module}:{line} imports {name} (allowed: {', '.join(ALLOWED_INTERNAL[pkg])})")
            continue
        if top in ONLY_IN and module not in ONLY_IN[top]:
            problems.append(f"{module}:{line} imports {top}, which only {', '.join(ONLY_IN[top])} may import")
            continue
        if top in NEVER.get(pkg, set()):
            problems.append(f"{module}:{line} imports {top}, which {pkg} must never import")
            continue
        allowed = ALLOWED_THIRD_PARTY[pkg]
        if allowed is None or top in allowed or (in_policies and top in POLICY_ONLY):
            continue
        problems.append(f"{module}:{line} imports third-party {top!r}, not in {pkg}'s allowed list {sorted(allowed)}")
    return problems


def _modules(pkg: str) -> list[Path]:
    return sorted(p for p in (ROOT / pkg).rglob("*.py") if "__pycache__" not in p.parts)


@pytest.mark.parametrize("pkg", OURS)
def test_package_follows_the_import_rules(pkg: str) -> None:
    files = _modules(pkg)
    assert files, f"package {pkg} has no modules under {ROOT / pkg}"
    problems = []
    for path in files:
        problems += violations(path.read_text(), _module_name(path), is_package=path.name == "__init__.py")
    assert not problems, "ARCHITECTURE §1 import rules broken:\n" + "\n".join(problems)


@pytest.mark.parametrize(
    ("module", "source", "expected"),
    [
        ("harness.runner", "import repro.train", "imports repro.train"),
        ("harness.runner", "def f():\n    from repro import cli", "imports repro"),
        ("harness.agent", "import torch", "third-party 'torch'"),
        ("evalsuite.rates", "from harness import sandbox", "imports harness.sandbox"),
        ("evalsuite.rates", "from harness.runner import run", "imports harness.runner"),
        ("evalsuite.rates", "import docker", "must never import"),
        ("reports.build", "from evalsuite.rates import x", "imports evalsuite.rates"),
        ("reports.build", "import scipy.stats", "must never import"),
        ("protocols.load", "import numpy", "third-party 'numpy'"),
        ("protocols.load", "from ..harness import schema", "imports harness.schema"),
        ("repro.train", "from evalsuite.rates import wilson", "imports evalsuite.rates"),
        ("repro.train", "def f():\n    import reports.build", "imports reports.build"),
        ("repro.train", "from tgsuite.pipeline import stages", "imports tgsuite.pipeline.stages"),
        ("harness.runner", "import tgsuite.cli", "imports tgsuite.cli"),
        ("harness.agent", "import mcp", "only harness.mcp_server"),
        ("tgsuite.commands.eval", "def f():\n    from inspect_ai.log import read_eval_log", "only harness.trajdata"),
    ],
)
def test_scanner_catches_violations(module: str, source: str, expected: str) -> None:
    problems = violations(source, module)
    assert problems and expected in problems[0], problems


@pytest.mark.parametrize(
    ("module", "source"),
    [
        ("harness.policies.hf", "import torch\nfrom transformers import AutoModelForCausalLM"),
        ("evalsuite.rates", "from harness.schema import EpisodeResult\nimport statsmodels.api as sm"),
        ("evalsuite.rates", "from . import schema\nfrom .bootstrap import x"),
        ("reports.build", "from evalsuite.schema import AnalysisResult\nimport jinja2"),
        ("repro.train", "import torch, harness.runner, protocols.load, trl"),
        ("tgsuite.pipeline.stages", "import repro.train, evalsuite.analyze, reports.build, harness.runner"),
        ("protocols.load", "import tomllib, json\nfrom pydantic import BaseModel"),
    ],
)
def test_scanner_allows_what_the_rules_allow(module: str, source: str) -> None:
    assert violations(source, module) == []


def test_schemas_load_without_torch_or_docker() -> None:
    """Artifacts must be readable where neither torch nor the Docker SDK is installed (ARCHITECTURE §1)."""
    schema_modules = [m for m in ("protocols.schema", "harness.schema", "evalsuite.schema", "reports.schema")
                      if (ROOT / m.replace(".", "/")).with_suffix(".py").exists()]
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('torch', 'docker', 'transformers'):\n"
        "            raise ImportError(f'{name} is blocked: schemas must load without it')\n"
        "sys.meta_path.insert(0, Block())\n"
        + "".join(f"import {m}\n" for m in schema_modules)
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


# ------------------------------------------------------------------------------------------------------------------
# No import cycles between our modules, no private names across modules
# ------------------------------------------------------------------------------------------------------------------


def all_modules() -> dict[str, tuple[str, bool]]:
    """Every module of our packages: dotted name -> (source, is a package ``__init__``)."""
    return {_module_name(p): (p.read_text(), p.name == "__init__.py") for pkg in OURS for p in _modules(pkg)}


def import_graph(modules: dict[str, tuple[str, bool]]) -> dict[str, set[str]]:
    """module -> the other modules of ``modules`` it imports (anywhere in its body); ``from pkg import name``
    counts as importing ``pkg.name`` when that is a module, else ``pkg``."""
    def resolve(name: str) -> str:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name

    graph: dict[str, set[str]] = {}
    for mod, (source, is_package) in modules.items():
        targets = {resolve(name) for _, name in imports_of(source, mod, is_package=is_package)
                   if name.split(".")[0] in OURS}
        graph[mod] = {t for t in targets if t and t != mod}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted; sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def private_imports(source: str, module: str, *, is_package: bool = False) -> list[str]:
    """``from X import _name``, ``import X`` + ``X._name`` and ``from X._mod import ...`` where X is one of our
    modules other than ``module`` itself (dunder names are not private)."""
    def private(name: str) -> bool:
        return name.startswith("_") and not name.startswith("__")

    problems: list[str] = []
    aliases: set[str] = set()
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = [n for _, n in imports_of(ast.unparse(node), module, is_package=is_package)]
            src = base[0].rpartition(".")[0] if base else ""
            if src.split(".")[0] not in OURS or src == module:
                continue
            if any(private(part) for part in src.split(".")):
                problems.append(f"{module}:{node.lineno} imports from private module {src}")
            problems += [f"{module}:{node.lineno} imports private {a.name} from {src}" for a in node.names
                         if private(a.name)]
        elif isinstance(node, ast.Import):
            aliases |= {a.asname or a.name.split(".")[0] for a in node.names if a.name.split(".")[0] in OURS}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and private(node.attr):
            owner = ast.unparse(node.value)
            if owner.split(".")[0] in aliases:
                problems.append(f"{module}:{node.lineno} uses private {owner}.{node.attr}")
    return problems


def test_no_import_cycles() -> None:
    found = cycles(import_graph(all_modules()))
    assert not found, ("import cycles (a lazy import inside a function counts too); move the shared part into a "
                       "module both may import:\n" + "\n".join(" <-> ".join(c) for c in found))


def test_no_private_names_imported_from_another_module() -> None:
    problems = [p for mod, (src, is_pkg) in all_modules().items() for p in private_imports(src, mod, is_package=is_pkg)]
    assert not problems, "private names used across modules (make them public or move them):\n" + "\n".join(problems)


def test_cycle_finder_finds_cycles_and_only_cycles() -> None:
    mods = {"harness.a": ("from harness import b", False), "harness.b": ("def f():\n    import harness.c", False),
            "harness.c": ("from harness.a import x", False), "harness.d": ("import harness.a", False)}
    assert cycles(import_graph(mods)) == [["harness.a", "harness.b", "harness.c"]]
    mods["harness.c"] = ("import os", False)
    assert cycles(import_graph(mods)) == []


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from harness.sandbox_docker_io import _pump", "imports private _pump from harness.sandbox_docker_io"),
        ("from .runner import _attempt_indices", "imports private _attempt_indices from harness.runner"),
        ("import harness.runner\nharness.runner._x()", "uses private harness.runner._x"),
        ("from tgsuite.commands._common import CLIError", "private module tgsuite.commands._common"),
    ],
)
def test_private_scanner_catches(source: str, expected: str) -> None:
    problems = private_imports(source, "harness.regrade")
    assert problems and expected in problems[0], problems


def test_private_scanner_allows_public_and_own_names() -> None:
    assert private_imports("from harness.runner import run_eval, __version__\nimport os\nos._exit", "harness.x") == []
    assert private_imports("from harness.x import _own", "harness.x") == []
