"""``ScriptedExpert(test_view="search")``: it greps the test file for the function's calls instead of reading it,
and still fixes real held-out mini tasks (LocalSandbox, the real agent loop, tools and grader); the pure helpers of
``harness.policies.expert_test_view``; and the pin that keeps the pretraining corpus on the view the shipped base
saw."""

from __future__ import annotations

import ast

import pytest

from harness.agent import run_episode
from harness.grading import extract_patch, grade_patch
from harness.interfaces import EpisodeLimits
from harness.minirepos import make_mini
from harness.policies.expert_test_view import call_pattern, failing_statements, view_from_search
from harness.policies.scripted import ScriptedExpert, history
from harness.runner_sandbox import TaskSandboxFactory
from harness.sandbox import SandboxSpec
from harness.tasks import load_task_set

SPEC = SandboxSpec(env={"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONDONTWRITEBYTECODE": "1"})
RUN = """$ python3 -m pytest -q
FAILED tests/test_grades.py::test_letter_reported_issue - AssertionError: assert 'B' == 'A'
  assert letter(90) == 'A'
1 failed, 40 passed
[exit code 1]"""
HITS = """12:    assert letter(95) == 'A'
16:    assert letter(75) == 'B'
30:    with pytest.raises(ValueError): letter(-1)
47:    assert letter(90) == 'A'"""


def test_call_pattern_matches_calls_only() -> None:
    import re

    pat = re.compile(call_pattern("letter"))
    assert pat.search("    assert letter(90) == 'A'")
    assert not pat.search("from pkg.grades import letter, passed")


def test_failing_statements_are_the_lines_under_failed() -> None:
    assert failing_statements(RUN) == {"assert letter(90) == 'A'"}
    assert failing_statements("3 passed\n[exit code 0]") == set()


def test_view_from_search_makes_one_test_per_assert_and_names_the_failing_one() -> None:
    got = view_from_search("pkg.grades", HITS, RUN)
    assert got is not None
    src, failing = got
    tree = ast.parse(src)
    names = [n.name for n in tree.body if isinstance(n, ast.FunctionDef)]
    assert names == ["test_line_12", "test_line_16", "test_line_47"]  # the with-statement is no assert: skipped
    assert failing == ("test_line_47",)
    assert "from pkg.grades import *" in src
    assert view_from_search("pkg.grades", HITS.replace("(90)", "(91)"), RUN) is None  # no hit is the failing line


def test_unknown_view_is_refused() -> None:
    with pytest.raises(ValueError, match="test_view='grep'"):
        ScriptedExpert(test_view="grep")  # type: ignore[arg-type]


@pytest.mark.slow
def test_search_view_fixes_heldout_tasks_without_reading_the_test_file(tmp_path) -> None:
    make_mini(tmp_path / "h", split="heldout", repos=3, tasks_per_repo=1, seed=3)
    ts = load_task_set(tmp_path / "h")
    limits = EpisodeLimits(max_turns=30, per_exec_timeout_s=120)
    with TaskSandboxFactory(ts, kind="local", run_id="test-lookup", spec=SPEC) as fac:
        for k, inst in enumerate(ts.instances):
            sb, head = fac.open(inst, role="agent", attempt=0)
            with sb:
                traj = run_episode(inst, ScriptedExpert(test_view="search"), sb, limits, seed=k)
                patch = extract_patch(sb, head)
            gsb, _ = fac.open(inst, role="grade", attempt=0)
            with gsb:
                grade = grade_patch(inst, patch, gsb, timeout_s=120)
            steps = history(traj.messages)
            assert grade.valid and grade.resolved, inst.instance_id
            searches = [s for s in steps if s.name == "search"]
            assert len(searches) == 1 and searches[0].arguments["path"].startswith("tests/")
            assert not any(s.name == "read_file" and s.arguments["path"].startswith("tests/") for s in steps)


def test_world_corpus_keeps_the_read_view_and_the_shipped_recipe_hash() -> None:
    from repro.pretrain.presets import preset
    from repro.pretrain.schema import WorldCorpus

    cfg = preset("mini")
    assert cfg.world.test_view == "read"
    searched = cfg.model_copy(update={"world": WorldCorpus(**{**cfg.world.model_dump(), "test_view": "search"})})
    assert searched.recipe_sha256() != cfg.recipe_sha256()


def test_mini_preset_sft_uses_the_search_view() -> None:
    from repro.sft import SFTConfig
    from tgsuite.pipeline.presets import MINI

    assert MINI.sft["test_view"] == "search"
    assert SFTConfig.model_validate({**MINI.sft, "train_tasks": "T"}).test_view == "search"
