"""The mini task family: bug families, determinism, split/tier separation, record contents, host self-check."""

from __future__ import annotations

import ast
import hashlib
import re
from pathlib import Path
from string import Template

import pytest

from harness.minirepos import make_mini
from harness.minirepos.bugs import BUG_FAMILIES, enumerate_edits
from harness.minirepos.generator import generate
from harness.minirepos.render import _split_of
from harness.minirepos.selfcheck import check_instance
from harness.minirepos.templates import all_templates, check_pools_disjoint, templates_for
from harness.tasks import load_task_set


def _sources() -> list[tuple[str, str]]:
    return [(t.key, t.render({k: v[0] for k, v in t.params.items()})) for t in all_templates()]


@pytest.fixture(scope="module")
def heldout() -> tuple[list, dict]:
    return generate(split="heldout", repos=12, tasks_per_repo=3, seed=11)


@pytest.fixture(scope="module")
def train() -> tuple[list, dict]:
    return generate(split="train", repos=40, tasks_per_repo=3, seed=11)


# ---------------------------------------------------------------------------------------------------- bug families


@pytest.mark.parametrize(
    ("source", "family", "new_line"),
    [
        ("def f(a, b):\n    return a + b\n", "wrong_operator", "    return a - b\n"),
        ("def f(xs):\n    return [x for x in range(len(xs) + 1)]\n", "off_by_one",
         "    return [x for x in range(len(xs))]\n"),
        ("def f(xs, k):\n    return xs[:k]\n", "off_by_one", "    return xs[:k - 1]\n"),
        ("def f(a, b):\n    return a < b\n", "wrong_comparison", "    return a <= b\n"),
        ("def f(a, b):\n    return g(a, b)\n", "swapped_arguments", "    return g(b, a)\n"),
        ("def f(a):\n    return a * 12\n", "wrong_constant", "    return a * 13\n"),
        ("def f(a):\n    b = a\n    return b\n", "wrong_variable_returned", "    return a\n"),
        ("def f(a):\n    return f\"{a:.2f} EUR\"\n", "wrong_string_format", "    return f\"{a:.3f} EUR\"\n"),
        ("def f(a, b):\n    return a and b\n", "wrong_boolean_logic", "    return a or b\n"),
        ("def f(a, b):\n    return max(a, b)\n", "wrong_builtin", "    return min(a, b)\n"),
    ],
)
def test_each_family_plants_the_textbook_edit(source: str, family: str, new_line: str) -> None:
    edits = [e for e in enumerate_edits(source) if e.family == family]
    assert new_line in [e.new for e in edits], [e.new for e in edits]


def test_missing_edge_case_removes_only_parameter_guards() -> None:
    src = ('def f(items, n):\n    """Doc."""\n    if not items:\n        return 0\n    total = n\n'
           '    if total > 3:\n        return 1\n    return total\n')
    guards = [e for e in enumerate_edits(src) if e.family == "missing_edge_case"]
    assert [(e.start, e.end, e.new) for e in guards] == [(3, 4, "")]


def test_non_ascii_lines_are_edited_at_the_right_columns() -> None:
    src = 'def f(a):\n    return f"é {a}" + "x" if a > 1 else "ü"\n'
    edits = [e for e in enumerate_edits(src) if e.family == "wrong_comparison"]
    assert edits and edits[0].new == '    return f"é {a}" + "x" if a >= 1 else "ü"\n'


def test_repair_library_inverts_every_planted_bug() -> None:
    """For every plantable bug in every template, some repair-mode edit of the mutant restores the clean module
    (guard clauses are re-inserted by the expert from the failing test instead, see test_scripted_policies)."""
    for key, src in _sources():
        for edit in enumerate_edits(src):
            if edit.family == "missing_edge_case":
                continue
            mutant = edit.apply(src)
            repairs = enumerate_edits(mutant, mode="repair", check_compiles=False)
            assert src in {r.apply(mutant) for r in repairs}, (key, edit)


def test_templates_are_realistic_and_pools_disjoint() -> None:
    check_pools_disjoint()
    for t in all_templates():
        # the templates document themselves; the code generated from them carries no docstrings (issue #20)
        doc_tree = ast.parse(Template(t.source).substitute({k: v[0] for k, v in t.params.items()}))
        assert ast.get_docstring(doc_tree) and t.summary(), t.key
        assert all(ast.get_docstring(f) for f in doc_tree.body if isinstance(f, ast.FunctionDef)), t.key
        src = t.render({k: v[0] for k, v in t.params.items()})
        tree = ast.parse(src)
        assert 15 <= len(src.splitlines()) <= 120, t.key
        docs = [n for n in ast.walk(tree) if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef))]
        assert not any(ast.get_docstring(n) for n in docs), t.key
        funcs = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
        assert set(t.cases) == {f.name for f in funcs}, t.key
        assert not any(isinstance(n, ast.While) for n in ast.walk(tree)), t.key


def test_generated_code_has_no_docstrings_and_the_readme_describes_modules() -> None:
    insts, snaps = generate(split="train", repos=2, tasks_per_repo=1, seed=3)
    for inst in insts:
        files = {k: v.decode() for k, v in snaps[inst.instance_id].items()}
        code = {k: v for k, v in files.items() if k.endswith(".py") and not k.endswith("__init__.py")}
        assert code and all('"""' not in v for v in code.values()), inst.instance_id
        assert '"""' not in inst.test_patch and inst.extra["generator"] == "minirepos@v3"
        modules = [k for k in code if not k.startswith("tests/")]
        readme = files["README.md"]
        assert all(f"- `{m}`: " in readme and not readme.count(f"- `{m}`: \n") for m in modules), readme


# ---------------------------------------------------------------------------------------------------- generation


def test_generation_is_byte_identical_per_seed(tmp_path: Path) -> None:
    kw = dict(split="heldout", repos=4, tasks_per_repo=2)
    a = make_mini(tmp_path / "a", seed=5, **kw)
    b = make_mini(tmp_path / "b", seed=5, **kw)
    c = make_mini(tmp_path / "c", seed=6, **kw)

    def digest(root: Path) -> str:
        h = hashlib.sha256()
        for p in sorted(root.rglob("*")):
            if p.is_file():
                h.update(p.relative_to(root).as_posix().encode() + b"\0" + p.read_bytes())
        return h.hexdigest()

    assert digest(a.out) == digest(b.out) != digest(c.out)
    assert load_task_set(a.out).sha256 == load_task_set(b.out).sha256


def test_records_follow_the_contract(heldout: tuple[list, dict], train: tuple[list, dict]) -> None:
    node = re.compile(r"^tests/test_hidden_\w+\.py::test_\w+$")
    for insts, files in (heldout, train):
        for inst in insts:
            assert inst.behaviour == ["markdown@v3", "tool_protocol@v1"]
            assert (inst.test_cmd, inst.image, inst.cluster) == ("python -m pytest", "base", inst.repo)
            assert inst.bug_family in BUG_FAMILIES and inst.difficulty in ("easy", "medium", "hard")
            assert inst.FAIL_TO_PASS and all(node.match(t) for t in inst.FAIL_TO_PASS + inst.PASS_TO_PASS)
            assert not set(inst.FAIL_TO_PASS) & set(inst.PASS_TO_PASS)
            assert inst.patch.startswith("diff --git a/") and "\n--- a/" in inst.patch and "\n+++ b/" in inst.patch
            snapshot = files[inst.instance_id]
            assert not any("hidden" in p for p in snapshot), "hidden tests must not be in the snapshot"
            assert any(p.startswith("tests/test_") for p in snapshot)
            added = [ln[1:].strip() for ln in inst.patch.splitlines() if ln.startswith("+") and not ln.startswith("++")]
            assert not any(len(a) > 12 and a in inst.problem_statement for a in added), "statement gives the fix"
    assert {i.template_tier for i in train[0]} == {"n/a"} and {i.split for i in train[0]} == {"train"}
    assert {i.template_tier for i in heldout[0]} == {"seen_templates", "unseen_templates"}


def test_at_least_eight_families_and_all_difficulties(train: tuple[list, dict]) -> None:
    fams = {i.bug_family for i in train[0]}
    assert len(fams) >= 8, fams
    assert {i.difficulty for i in train[0]} == {"easy", "medium", "hard"}


def test_heldout_repositories_never_appear_in_train(train: tuple[list, dict]) -> None:
    train_repos = {i.repo for i in train[0]}
    for seed in range(3):
        held = generate(split="heldout", repos=20, tasks_per_repo=1, seed=seed)[0]
        assert not train_repos & {i.repo for i in held}
        assert all(_split_of(i.repo) == "heldout" for i in held)
    assert all(_split_of(r) == "train" for r in train_repos)


def test_unseen_tier_uses_no_train_template_or_function(heldout: tuple[list, dict],
                                                       train: tuple[list, dict]) -> None:
    def defined(files: dict[str, bytes]) -> tuple[set[str], set[str]]:
        mods, funcs = set(), set()
        for path, data in files.items():
            if path.endswith(".py") and not path.startswith("tests/") and not path.endswith("__init__.py"):
                mods.add(Path(path).stem)
                funcs |= {n.name for n in ast.parse(data).body if isinstance(n, ast.FunctionDef)}
        return mods, funcs

    train_mods, train_funcs = set(), set()
    for files in train[1].values():
        m, f = defined(files)
        train_mods |= m
        train_funcs |= f
    unseen = [i for i in heldout[0] if i.template_tier == "unseen_templates"]
    seen = [i for i in heldout[0] if i.template_tier == "seen_templates"]
    assert unseen and seen
    for inst in unseen:
        m, f = defined(heldout[1][inst.instance_id])
        assert not m & train_mods and not f & train_funcs, inst.instance_id
    for inst in seen:
        m, _ = defined(heldout[1][inst.instance_id])
        assert m <= {t.module for t in templates_for("train")}


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="split"):
        generate(split="test", repos=1, tasks_per_repo=1, seed=0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="at least 1"):
        generate(split="train", repos=0, tasks_per_repo=1, seed=0)


@pytest.mark.slow
def test_self_check_on_a_sample(tmp_path: Path) -> None:
    """F2P fail on base and pass with gold, P2P pass on both, visible tests reproduce the issue (host python)."""
    make_mini(tmp_path / "train", split="train", repos=3, tasks_per_repo=1, seed=2)
    make_mini(tmp_path / "held", split="heldout", repos=4, tasks_per_repo=1, seed=2)
    for d in ("train", "held"):
        ts = load_task_set(tmp_path / d)
        for inst in ts.instances:
            res = check_instance(ts.path, inst)
            assert res.ok, (inst.instance_id, res.problems)


def test_generation_does_not_depend_on_hash_randomisation(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    code = ("import sys; from harness.minirepos.generator import generate; import hashlib\n"
            "insts, snaps = generate(split='heldout', repos=3, tasks_per_repo=2, seed=4)\n"
            "h = hashlib.sha256()\n"
            "for i in insts:\n"
            "    h.update(i.model_dump_json().encode())\n"
            "    for k in sorted(snaps[i.instance_id]): h.update(k.encode() + snaps[i.instance_id][k])\n"
            "print(h.hexdigest())")
    root = str(Path(__file__).resolve().parents[2])
    outs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root,
                           env={**os.environ, "PYTHONHASHSEED": str(seed)}).stdout for seed in (1, 2)}
    assert len(outs) == 1 and len(outs.pop().strip()) == 64
