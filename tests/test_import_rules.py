"""ARCHITECTURE §2: the direction of imports between packages, enforced by AST-scanning every module.

Every ``import`` / ``from ... import`` anywhere in a module counts (top level, inside functions, under
``TYPE_CHECKING``): a lazy import is still a dependency. Standard-library modules are always allowed.
To change a rule, change ARCHITECTURE.md §2 first and then the tables below, in the same commit.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
OURS = ("protocols", "harness", "evalsuite", "reports", "repro")
# Small utilities any package may use (validation models, typing backports, progress bars).
UTILITIES = {"pydantic", "pydantic_core", "typing_extensions", "tqdm"}

# Which of OUR modules each package may import: a prefix ending in "." allows the whole package.
ALLOWED_INTERNAL: dict[str, tuple[str, ...]] = {
    "protocols": ("protocols.",),
    "harness": ("harness.", "protocols."),
    "evalsuite": ("evalsuite.", "protocols.", "harness.schema"),
    "reports": ("reports.", "protocols.", "harness.schema", "evalsuite.schema"),
    "repro": ("repro.", "harness.", "evalsuite.", "reports.", "protocols."),
}
# Third-party top-level modules each package may import (None = no restriction).
ALLOWED_THIRD_PARTY: dict[str, set[str] | None] = {
    "protocols": {"cryptography"},  # Ed25519 signatures of frozen records (protocols.anchor)
    "harness": {"docker", "requests", "urllib3", "swebench"},  # swebench: its log parsers (harness.swebench_compat)
    "evalsuite": {"numpy", "scipy", "statsmodels", "pandas"},
    "reports": {"jinja2", "markupsafe", "matplotlib", "numpy"},
    "repro": None,
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
    """Human-readable rule violations of one module (empty when it follows ARCHITECTURE §2)."""
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
    assert not problems, "ARCHITECTURE §2 import rules broken:\n" + "\n".join(problems)


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
        ("repro.train", "import torch, harness.runner, evalsuite.rates, trl"),
        ("protocols.load", "import tomllib, json\nfrom pydantic import BaseModel"),
    ],
)
def test_scanner_allows_what_the_rules_allow(module: str, source: str) -> None:
    assert violations(source, module) == []


def test_schemas_load_without_torch_or_docker() -> None:
    """Artifacts must be readable where neither torch nor the Docker SDK is installed (ARCHITECTURE §2)."""
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
