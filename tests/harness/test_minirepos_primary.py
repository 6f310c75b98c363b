"""harness.minirepos.primary: the stratified primary held-out set (fix twins), renamed modules, the generalization
tier. Sizes here are small (a 6 x 8 training set) so the tests stay fast; the mechanics are the preset's."""

from __future__ import annotations

import random
from functools import lru_cache
from pathlib import Path

import pytest

from harness.minirepos import render
from harness.minirepos.generator import generate
from harness.minirepos.primary import (
    PrimaryDesign,
    fix_signature,
    generate_generalization,
    generate_primary,
    stratum_of,
    training_signatures,
)
from harness.minirepos.selfcheck import check_instance
from harness.minirepos.templates import all_templates
from harness.schema import TaskInstance
from harness.tasks import canonical_record, load_task_set, write_task_set

DESIGN = PrimaryDesign(repos=3, twin_per_repo=2, no_twin_per_repo=1, seed=11)


def namer(rng: random.Random) -> str:
    """Made-up module names (the pipeline uses repro.pretrain.words' probe pool; harness must not import repro)."""
    return "".join(rng.choice("bdfgklmnprstvz") + rng.choice("aeiou") for _ in range(3))


@lru_cache(maxsize=1)
def _train() -> tuple[TaskInstance, ...]:
    return tuple(generate(split="train", repos=6, tasks_per_repo=8, seed=0)[0])


@lru_cache(maxsize=1)
def _primary() -> tuple[list[TaskInstance], dict[str, dict[str, bytes]]]:
    return generate_primary(DESIGN, training_signatures(_train()), namer)


def _inst(patch: str, iid: str = "o__r-1") -> TaskInstance:
    return TaskInstance(instance_id=iid, repo="o/r", base_commit="0", problem_statement="x", patch=patch,
                        test_patch="", FAIL_TO_PASS=["t"])


def test_fix_signature_ignores_file_names_positions_and_indentation() -> None:
    a = ("diff --git a/p/ledger.py b/p/ledger.py\n--- a/p/ledger.py\n+++ b/p/ledger.py\n@@ -8,3 +8,3 @@\n"
         "     x = 1\n-    if size % 20 == 1:\n+    if size % 2 == 1:\n")
    b = ("diff --git a/q/vorlak.py b/q/vorlak.py\n--- a/q/vorlak.py\n+++ b/q/vorlak.py\n@@ -30,3 +30,3 @@\n"
         "-        if size % 20 == 1:\n+        if size % 2 == 1:\n     y = 2\n")
    other = b.replace("% 2 ==", "% 3 ==")
    assert fix_signature(a) == fix_signature(b) == (("if size % 20 == 1:",), ("if size % 2 == 1:",))
    sigs = training_signatures([_inst(a)])
    assert stratum_of(_inst(b), sigs) == "twin"
    assert stratum_of(_inst(other), sigs) == "no_twin"  # same removed line, another fix: not a twin
    assert stratum_of(_inst(a), frozenset()) == "no_twin"


def test_strata_sizes_are_exact_per_repository_and_classified_against_training() -> None:
    instances, snapshots = _primary()
    sigs = training_signatures(_train())
    assert len(instances) == DESIGN.repos * 3 and set(snapshots) == {i.instance_id for i in instances}
    by_repo: dict[str, list[str]] = {}
    for inst in instances:
        by_repo.setdefault(inst.repo, []).append(inst.stratum)
        assert inst.stratum == stratum_of(inst, sigs)
        assert inst.template_tier == "seen_templates" and inst.split == "heldout"
        assert render.split_of(inst.repo) == "heldout"
        assert inst.extra["primary"]["seed"] == DESIGN.seed
    assert len(by_repo) == DESIGN.repos
    assert all(sorted(s) == ["no_twin", "twin", "twin"] for s in by_repo.values())
    assert {i.repo for i in instances}.isdisjoint({t.repo for t in _train()})


def test_stratification_is_deterministic_and_seeded() -> None:
    a, sa = _primary()
    b, sb = generate_primary(DESIGN, training_signatures(_train()), namer)
    assert [i.model_dump_json() for i in a] == [i.model_dump_json() for i in b] and sa == sb
    c, _ = generate_primary(PrimaryDesign(repos=3, twin_per_repo=2, no_twin_per_repo=1, seed=12),
                            training_signatures(_train()), namer)
    assert {i.repo for i in c} != {i.repo for i in a}


def test_modules_are_renamed_everywhere_consistently() -> None:
    instances, snapshots = _primary()
    template_modules = {t.module for t in all_templates()}
    for inst in instances:
        pkg = render.package_name(inst.repo)
        new = inst.extra["module"].removeprefix(f"{pkg}/").removesuffix(".py")
        assert new not in template_modules
        files = snapshots[inst.instance_id]
        mods = {p.split("/")[1].removesuffix(".py") for p in files if p.startswith(f"{pkg}/")} - {"__init__"}
        assert mods.isdisjoint(template_modules)
        assert {f"tests/test_{m}.py" for m in mods} <= set(files)
        readme = files["README.md"].decode()
        assert all(f"`{pkg}/{m}.py`" in readme for m in mods)
        assert f"{pkg}/{new}.py" in inst.patch and f"tests/test_hidden_{new}.py" in inst.test_patch
        assert all(t.startswith("tests/test_hidden_") for t in inst.FAIL_TO_PASS + inst.PASS_TO_PASS)
        assert new in inst.problem_statement
        text = "".join(v.decode() for v in files.values()) + inst.problem_statement + inst.test_patch
        assert not any(f"{pkg}.{m}" in text or f"test_{m}.py" in text for m in template_modules)


def test_an_impossible_design_is_refused_with_the_fix() -> None:
    with pytest.raises(ValueError, match="lower twin_per_repo"):
        generate_primary(PrimaryDesign(repos=1, twin_per_repo=1, no_twin_per_repo=0, seed=0, max_scan=3),
                         frozenset(), namer)
    with pytest.raises(ValueError, match="candidates"):
        PrimaryDesign(repos=1, twin_per_repo=10, no_twin_per_repo=5, seed=0)


def test_generalization_tier_uses_unseen_templates_and_new_names() -> None:
    used: set[str] = set()
    prim, _ = generate_primary(DESIGN, training_signatures(_train()), namer, used_names=used)
    gen, snaps = generate_generalization(repos=2, tasks_per_repo=2, seed=DESIGN.seed, used_names=used)
    assert len(gen) == 4 and set(snaps) == {i.instance_id for i in gen}
    assert {i.template_tier for i in gen} == {"unseen_templates"} and {i.stratum for i in gen} == {"generalization"}
    assert {i.repo for i in gen}.isdisjoint({i.repo for i in prim})


def test_stratum_survives_the_task_set_files_and_old_hashes_do_not_move(tmp_path: Path) -> None:
    instances, snapshots = _primary()
    write_task_set(tmp_path / "p", instances, snapshots)
    loaded = load_task_set(tmp_path / "p")
    assert [i.stratum for i in loaded.instances] == [i.stratum for i in instances]
    plain = instances[0].model_copy(update={"stratum": "n/a"})
    assert '"stratum"' not in canonical_record(plain) and '"stratum":"' in canonical_record(instances[0])


def test_renamed_tasks_validate_gold_resolves_and_empty_does_not(tmp_path: Path) -> None:
    """Host-side self-check (hidden tests on base and after the gold patch), as the generator's own tests do; the
    Docker gate is in test_renamed_tasks_validate_in_docker."""
    instances, snapshots = _primary()
    picked = [next(i for i in instances if i.stratum == s) for s in ("twin", "no_twin")]
    write_task_set(tmp_path, picked, {i.instance_id: snapshots[i.instance_id] for i in picked})
    for inst in picked:
        res = check_instance(tmp_path, inst)
        assert res.ok, res.problems


@pytest.mark.docker
def test_renamed_tasks_validate_in_docker(tmp_path: Path) -> None:
    from harness.validate import validate_task_set

    instances, snapshots = _primary()
    picked = [next(i for i in instances if i.stratum == s) for s in ("twin", "no_twin")]
    write_task_set(tmp_path, picked, {i.instance_id: snapshots[i.instance_id] for i in picked})
    report = validate_task_set(tmp_path, runs=1, sandbox="docker")
    assert not report.rejected, report.rejected
    assert len(report.valid_ids()) == 2
