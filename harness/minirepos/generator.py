"""The mini task family generator: small Python repositories with one planted bug per task.

``generate(split=..., repos=N, tasks_per_repo=M, seed=S)`` builds N repositories (2-4 modules from the module
templates, constants drawn per repository) and up to M tasks per repository, each planting one bug from
``bugs.BUG_FAMILIES`` (families are taken round-robin in a seeded order, so a repository's tasks cover different
families). Every task is checked while it is generated, by executing the clean and the buggy module in-process:

- FAIL_TO_PASS = hidden cases whose assertion fails on the bug and passes on the clean module (at least one);
- PASS_TO_PASS = hidden cases of the bug's module that the bug does not change, plus one other module's cases;
- the reported case (problem statement and a visible regression test) is one of the FAIL_TO_PASS cases, on the
  buggy function itself when it shows the bug there ("direct"), else on a function that calls it ("indirect").

Splits: repository names are partitioned between ``train`` and ``heldout`` by a hash bit, so no held-out repository
can appear in a train split whatever the seeds. Held-out repositories alternate between the two template tiers:
``seen_templates`` (train-pool templates, new repositories) and ``unseen_templates`` (templates and function names
that no train repository uses). Output is byte-identical for equal arguments.
"""

from __future__ import annotations

import ast
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Literal

from harness.minirepos import render
from harness.minirepos.bugs import Edit, enumerate_edits
from harness.minirepos.evaluate import CaseResult, compare, literal, run_cases
from harness.minirepos.templates import ModuleTemplate, templates_for
from harness.schema import TaskInstance, TemplateTier
from harness.tasks import git_commit_sha

log = logging.getLogger(__name__)

# v2: tasks require markdown@v2 (no compliance by absence; broken tool-call text is a protocol failure, not a
# Markdown one), and no docstrings in the generated code and tests (the README still describes each module). The
# seeds keep the v1 namespace, so equal arguments give the same repositories, names and bugs as v1, more compact.
# v3: tasks require markdown@v3 (code in quotes outside backticks fails too); repositories, names and bugs as v2.
GENERATOR_VERSION = "minirepos@v3"
_SEED_NAMESPACE = "minirepos@v1"
MiniSplit = Literal["train", "heldout"]
_FAMILY_DIFFICULTY = {"wrong_operator": 0, "wrong_comparison": 0, "wrong_constant": 0, "wrong_builtin": 0}


@dataclass(frozen=True)
class ModulePlan:
    template: ModuleTemplate
    source: str
    clean: tuple[CaseResult, ...]
    visible: tuple[CaseResult, ...]


@dataclass(frozen=True)
class RepoPlan:
    repo: str
    package: str
    tier: TemplateTier
    modules: tuple[ModulePlan, ...]


@lru_cache(maxsize=512)
def _edits(source: str) -> tuple[Edit, ...]:
    return tuple(enumerate_edits(source, mode="plant", check_compiles=False))


_CLEAN_CACHE: dict[tuple[str, str], tuple[CaseResult, ...]] = {}


def _clean_results(source: str, module_name: str, template: ModuleTemplate) -> tuple[CaseResult, ...]:
    key = (source, module_name)
    if key in _CLEAN_CACHE:
        return _CLEAN_CACHE[key]
    results = tuple(run_cases(source, module_name, template.cases))
    for r in results:
        if r.kind != "ok":
            raise ValueError(f"template {template.key}: clean case {r.call()} raises {r.error}; fix the template")
        literal(r.value)
    if len(_CLEAN_CACHE) > 4096:
        _CLEAN_CACHE.clear()
    _CLEAN_CACHE[key] = results
    return results


ModuleNamer = Callable[[random.Random], str]


def plan_repo(rng: random.Random, split: MiniSplit, index: int, used_names: set[str], *,
              tier: TemplateTier | None = None, module_namer: ModuleNamer | None = None) -> RepoPlan:
    """Choose a repository's name, tier, modules and constants, and run its clean cases.

    ``tier`` forces the held-out tier (default: alternating by ``index``). ``module_namer`` renames every module
    (file ``<package>/<name>.py``, its tests, README line, test ids and problem statements all follow, since they are
    rendered from the template's ``module``): called with ``rng`` once per module until it gives a name that is
    new in the repository; the functions and the code stay the template's."""
    if tier is None:
        tier = "n/a" if split == "train" else ("seen_templates" if index % 2 == 0 else "unseen_templates")
    pool = templates_for("unseen" if tier == "unseen_templates" else "train")
    repo = render.repo_name(rng, split, used_names)
    package = render.package_name(repo)
    chosen = rng.sample(pool, min(rng.choice((2, 3, 3, 4)), len(pool)))
    if module_namer is not None:
        chosen = _renamed(rng, chosen, module_namer, taken={package, *package.split("_")})
    modules = []
    for tpl in chosen:
        source = tpl.render({k: rng.choice(v) for k, v in sorted(tpl.params.items())})
        clean = _clean_results(source, f"{package}.{tpl.module}", tpl)
        visible: list[CaseResult] = []
        for func in tpl.cases:
            own = [c for c in clean if c.function == func]
            visible += sorted(rng.sample(own, max(1, (len(own) + 1) // 2)), key=lambda c: c.index)
        modules.append(ModulePlan(tpl, source, clean, tuple(visible)))
    return RepoPlan(repo, package, tier, tuple(modules))


def _renamed(rng: random.Random, chosen: list[ModuleTemplate], namer: ModuleNamer,
             taken: set[str]) -> list[ModuleTemplate]:
    out = []
    for tpl in chosen:
        for _ in range(100):
            name = namer(rng)
            if name.isidentifier() and name not in taken and name not in tpl.function_names():
                break
        else:
            raise RuntimeError(f"module_namer gave no new identifier for {tpl.key!r} in 100 draws")
        taken.add(name)
        out.append(replace(tpl, module=name))
    return out


@dataclass(frozen=True)
class PlantedBug:
    module: ModulePlan
    edit: Edit
    buggy: tuple[CaseResult, ...]
    verdicts: tuple[str, ...]


def _try_plant(repo: RepoPlan, module: ModulePlan, edit: Edit) -> PlantedBug | None:
    buggy_source = edit.apply(module.source)
    try:
        buggy = tuple(run_cases(buggy_source, f"{repo.package}.{module.template.module}", module.template.cases))
    except RuntimeError:
        return None
    verdicts = tuple(compare(c, b) for c, b in zip(module.clean, buggy, strict=True))
    if "detects" not in verdicts:
        return None
    return PlantedBug(module, edit, buggy, verdicts)


def plant_bugs(rng: random.Random, repo: RepoPlan, count: int) -> list[PlantedBug]:
    """Up to ``count`` detectable bugs, families round-robin in a seeded order."""
    by_family: dict[str, list[tuple[ModulePlan, Edit]]] = {}
    for module in repo.modules:
        for edit in _edits(module.source):
            by_family.setdefault(edit.family, []).append((module, edit))
    families = sorted(by_family)
    rng.shuffle(families)
    for fam in families:
        rng.shuffle(by_family[fam])
    out: list[PlantedBug] = []
    while len(out) < count and any(by_family.values()):
        for fam in families:
            while by_family[fam] and len(out) < count:
                module, edit = by_family[fam].pop()
                bug = _try_plant(repo, module, edit)
                if bug is not None:
                    out.append(bug)
                    break
    return out


def _difficulty(bug: PlantedBug, direct: bool) -> str:
    """easy / medium / hard from three signals: the family (operator, comparison, constant and builtin bugs are
    the simplest), whether the issue reports a caller instead of the buggy function, and the function's length."""
    score = _FAMILY_DIFFICULTY.get(bug.edit.family, 1) + (0 if direct else 1)
    score += 1 if _function_length(bug.module.source, bug.edit.function) >= 10 else 0
    return ("easy", "medium", "hard")[min(score, 2)]


@lru_cache(maxsize=4096)
def _function_length(source: str, function: str | None) -> int:
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef) and node.name == function:
            return (node.end_lineno or node.lineno) - node.lineno + 1
    return 0


def _hidden_file(repo: RepoPlan, module: ModulePlan, keep: list[CaseResult]) -> tuple[str, str]:
    path = f"tests/test_hidden_{module.template.module}.py"
    return path, render.render_test_file(f"{repo.package}.{module.template.module}", [], keep)


def _snapshot_files(repo: RepoPlan, mod: ModulePlan, buggy_source: str, reported: CaseResult) -> dict[str, str]:
    """The repository as the agent gets it: the bug in ``mod``, visible tests with a regression test."""
    files: dict[str, str] = {
        "README.md": render.readme(repo.repo, repo.package,
                                   [(m.template.module, m.template.summary()) for m in repo.modules]),
        "pyproject.toml": render.pyproject(repo.package),
        ".gitignore": render.GITIGNORE,
        f"{repo.package}/__init__.py": f'"""{repo.package}: {mod.template.domain} utilities."""\n\n'
                                       '__version__ = "0.3.1"\n',
    }
    for m in repo.modules:
        files[f"{repo.package}/{m.template.module}.py"] = buggy_source if m is mod else m.source
        extra = [] if (m is not mod or reported in m.visible) else [(f"test_{reported.function}_reported_issue",
                                                                      reported)]
        files[f"tests/test_{m.template.module}.py"] = render.render_test_file(
            f"{repo.package}.{m.template.module}", [], m.visible, extra)
    return files


def build_task(rng: random.Random, repo: RepoPlan, bug: PlantedBug, number: int, split: MiniSplit) -> tuple[
        TaskInstance, dict[str, bytes]]:
    """One task record plus its snapshot files (the repository with the bug, visible tests included)."""
    mod = bug.module
    mod_name = mod.template.module
    rel = f"{repo.package}/{mod_name}.py"
    detecting = [(c, b) for c, b, v in zip(mod.clean, bug.buggy, bug.verdicts, strict=True) if v == "detects"]
    direct = [(c, b) for c, b in detecting if c.function == bug.edit.function]
    use_direct = bool(direct) and (len(direct) == len(detecting) or rng.random() < 0.8)
    reported, observed = rng.choice(direct if use_direct else [p for p in detecting if p not in direct])
    buggy_source = bug.edit.apply(mod.source)

    files = _snapshot_files(repo, mod, buggy_source, reported)

    keep = [c for c, v in zip(mod.clean, bug.verdicts, strict=True) if v != "ambiguous"]
    hidden = [_hidden_file(repo, mod, keep)]
    others = [m for m in repo.modules if m is not mod]
    if others:
        other = rng.choice(others)
        hidden.append(_hidden_file(repo, other, list(other.clean)))
    f2p_set = {(c.function, c.index) for c, _ in detecting}
    f2p = [f"{hidden[0][0]}::{render.test_name(c)}" for c in keep if (c.function, c.index) in f2p_set]
    p2p = [f"{hidden[0][0]}::{render.test_name(c)}" for c in keep if (c.function, c.index) not in f2p_set]
    if len(hidden) > 1:
        p2p += [f"{hidden[1][0]}::{render.test_name(c)}" for c in other.clean]

    org, name = repo.repo.split("/", 1)
    statement = render.problem_statement(rng, package=repo.package, module=mod_name, reported=reported,
                                         observed=observed)
    blobs = {k: v.encode() for k, v in sorted(files.items())}
    inst = TaskInstance(
        instance_id=f"{org}__{name}-{number}",
        repo=repo.repo,
        base_commit=git_commit_sha(blobs),
        problem_statement=statement,
        patch=render.unified_diff(rel, buggy_source, mod.source),
        test_patch="".join(render.unified_diff(p, "", text) for p, text in hidden),
        FAIL_TO_PASS=f2p,
        PASS_TO_PASS=p2p,
        behaviour=["markdown@v3", "tool_protocol@v1"],
        cluster=repo.repo,
        split=split,
        difficulty=_difficulty(bug, use_direct),
        template_tier=repo.tier,
        bug_family=bug.edit.family,
        extra={"generator": GENERATOR_VERSION, "template": mod.template.key, "module": rel,
               "function": bug.edit.function, "reported_function": reported.function,
               "direct": use_direct, "bug_line": bug.edit.start},
    )
    return inst, blobs


def generate(*, split: MiniSplit, repos: int, tasks_per_repo: int, seed: int) -> tuple[
        list[TaskInstance], dict[str, dict[str, bytes]]]:
    """All tasks and snapshots of one split (deterministic in the arguments)."""
    if split not in ("train", "heldout"):
        raise ValueError(f"split must be 'train' or 'heldout', got {split!r}")
    if repos < 1 or tasks_per_repo < 1:
        raise ValueError("repos and tasks_per_repo must be at least 1")
    used: set[str] = set()
    instances: list[TaskInstance] = []
    snapshots: dict[str, dict[str, bytes]] = {}
    for index in range(repos):
        rng = random.Random(f"{_SEED_NAMESPACE}:{split}:{seed}:{index}")
        repo = plan_repo(rng, split, index, used)
        bugs = plant_bugs(rng, repo, tasks_per_repo)
        if len(bugs) < tasks_per_repo:
            log.warning("%s: only %d detectable bugs (asked for %d)", repo.repo, len(bugs), tasks_per_repo)
        for number, bug in enumerate(bugs, start=1):
            inst, files = build_task(rng, repo, bug, number, split)
            instances.append(inst)
            snapshots[inst.instance_id] = files
    return instances, snapshots
