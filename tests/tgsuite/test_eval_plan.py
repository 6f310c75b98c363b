"""``tgsuite eval --protocol``: the run is checked against the frozen plan before any episode (task set, arm
names analyze can read, the settings the plan's [eval] table pins); the [eval] table leaves older plans' hashes
unchanged."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from harness.rundir import read_manifest
from harness.schema import TaskSet
from protocols.freeze import canonical_json, freeze_plan, protocol_hash
from protocols.load import load_plan, protocol_from_dict
from protocols.run_registry import registrations
from protocols.schema import Protocol
from tgsuite.commands.common import CLIError
from tgsuite.commands.eval_plan import arm_problems, check_run_against_plan, pinned_problems

ROOT = Path(__file__).resolve().parents[2]
SMOKE = ROOT / "protocols" / "plans" / "smoke.toml"
RUN = {"max_turns": 30, "wall_s": 600.0, "finish_notice": 0, "format_retries": 0, "feedback": "none"}


def _plan(**changes: Any) -> Protocol:
    data = load_plan(SMOKE).model_dump(mode="json")
    for key, value in changes.items():
        data[key] = {**data[key], **value} if isinstance(value, dict) and key in data and data[key] else value
    return protocol_from_dict(data)


class Sampler:
    def __init__(self, **gen: Any) -> None:
        self.gen = {"temperature": 1.0, "top_p": 1.0, "max_tokens": 1024, **gen}

    def generation_settings(self) -> dict[str, Any]:
        return self.gen


def test_the_eval_table_is_optional_and_keeps_old_hashes() -> None:
    plan = load_plan(SMOKE)
    assert plan.eval is None and '"eval"' not in canonical_json(plan)
    pinned = _plan(eval={"temperature": 0.0, "max_turns": 20})
    assert pinned.eval is not None and pinned.eval.pinned() == {"temperature": 0.0, "max_turns": 20}
    assert protocol_hash(pinned) != protocol_hash(plan) and '"eval"' in canonical_json(pinned)
    with pytest.raises(ValueError, match="eval.tempreature"):
        protocol_from_dict({**plan.model_dump(mode="json"), "eval": {"tempreature": 0.0}})


def test_arm_names_are_checked_against_the_plan() -> None:
    plan = load_plan(SMOKE)  # arms tg, grpo; seeds 0, 1
    ok, warn = arm_problems(plan, {"tg@s0": object(), "grpo@s1": object(), "oracle@s0": object()})
    assert ok == [] and warn == []
    bad, warn = arm_problems(plan, {"cand": object(), "tg": object(), "tg@s5": object()})
    assert any("'cand' is not an arm of plan 'smoke'" in p and "'cand@s0'" in p for p in bad)
    assert any("'tg' carries no training seed" in p and "tg@s0=SPEC" in p for p in bad)
    assert any("training seed 5 is not preregistered" in p for p in bad)
    assert any("plan arm 'grpo' has no arm in this run" in w for w in warn)

    class Seeded:
        train_seed = 1
    assert arm_problems(plan, {"tg": Seeded(), "grpo@s0": object()}) == ([], [])
    single = _plan(estimand="artifact", design={"seeds_per_arm": 1},
                   arms=[{"name": "tg", "role": "treatment", "artifact_seed": 0},
                         {"name": "grpo", "role": "baseline", "artifact_seed": 0}])
    assert arm_problems(single, {"tg": object(), "grpo": object()}) == ([], [])


def test_pinned_settings_are_compared_with_what_is_sent() -> None:
    plan = _plan(eval={"temperature": 0.0, "max_tokens": 512, "max_turns": 20, "feedback": "none"})
    gen = {"a@s0": Sampler(temperature=0.0, max_tokens=512).gen, "b@s0": Sampler(temperature=0.7).gen}
    problems = pinned_problems(plan, gen, {**RUN, "max_turns": 30})
    assert len(problems) == 3
    assert "temperature = 0.0" in problems[0] and "'b@s0': 0.7" in problems[0] and "fix: --temperature 0.0" in problems[0]
    assert "max_tokens = 512" in problems[1] and "fix: --max-tokens 512" in problems[1]
    assert "this run uses 30" in problems[2] and "fix: --max-turns 20" in problems[2]
    assert pinned_problems(plan, {"a@s0": gen["a@s0"]}, {**RUN, "max_turns": 20}) == []
    assert pinned_problems(load_plan(SMOKE), gen, RUN) == []  # nothing pinned: nothing to refuse


def test_check_run_refuses_every_problem_at_once() -> None:
    plan = _plan(eval={"temperature": 0.0}, task_set={"sha256": "e" * 64})
    frozen = freeze_plan(plan, anchor=False, now="2026-01-01T00:00:00Z")
    with pytest.raises(CLIError) as info:
        check_run_against_plan(frozen, task_set_sha256="f" * 64, arms={"x": Sampler()}, run=RUN, source="p.json")
    text = str(info.value)
    assert "nothing was run" in text and "task set" in text and "'x' is not an arm" in text and "--temperature 0.0" in text


@pytest.fixture(scope="module")
def mini(tmp_path_factory: pytest.TempPathFactory) -> TaskSet:
    from harness.minirepos import make_mini
    from harness.tasks import load_task_set

    out = tmp_path_factory.mktemp("mini") / "tasks"
    make_mini(out, split="heldout", repos=2, tasks_per_repo=1, seed=3)
    return load_task_set(out)


def _eval(args: list[str]) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "tgsuite.cli", "eval", "--sandbox", "local", "--no-progress", *args]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600, env=dict(os.environ))


def test_cli_refuses_a_run_that_does_not_fit_the_plan_before_any_episode(mini: TaskSet, tmp_path: Path) -> None:
    plan = _plan(task_set={"name": mini.name, "sha256": mini.sha256}, eval={"max_turns": 5})
    frozen = tmp_path / "prereg" / "smoke.frozen.json"
    freeze_plan(plan, out=frozen)
    out = tmp_path / "run"
    bad = _eval(["--tasks", mini.path, "--out", str(out), "--protocol", str(frozen), "--policy", "cand=null",
                 "--policy", "prod=oracle", "--limit", "1"])
    assert bad.returncode == 2 and not out.exists(), bad.stderr
    assert "'cand' is not an arm of plan 'smoke'" in bad.stderr and "fix: --max-turns 5" in bad.stderr
    good = _eval(["--tasks", mini.path, "--out", str(out), "--protocol", str(frozen), "--policy", "tg@s0=null",
                  "--policy", "grpo@s0=oracle", "--limit", "1", "--max-turns", "5"])
    assert good.returncode == 0, good.stderr[-2000:]
    assert (out / "results.jsonl").read_text().count("\n") == 2
    manifest = read_manifest(out)  # registered under the record before its first episode (protocols.run_registry)
    assert manifest is not None and manifest.registration is not None
    assert [r.run_id for r in registrations(frozen.parent)] == [manifest.run_id]


def test_cli_refuses_a_record_without_its_anchor_before_any_episode(mini: TaskSet, tmp_path: Path) -> None:
    plan = _plan(task_set={"name": mini.name, "sha256": mini.sha256}, eval={"max_turns": 5})
    frozen = tmp_path / "smoke.frozen.json"
    freeze_plan(plan, out=frozen, anchor=False)
    out = tmp_path / "run"
    bad = _eval(["--tasks", mini.path, "--out", str(out), "--protocol", str(frozen), "--policy", "tg@s0=null",
                 "--policy", "grpo@s0=oracle", "--limit", "1", "--max-turns", "5"])
    assert bad.returncode == 2 and not (out / "episodes").exists(), bad.stderr
    assert "no smoke.frozen.json.anchor.json next to the record" in bad.stderr and "fix: freeze the plan" in bad.stderr
