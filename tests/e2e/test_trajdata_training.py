"""End to end: a `tgsuite eval` run (oracle + null, LocalSandbox) → data import → data filter → distill and SFT."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import _rl_fixtures as F
import pytest

from harness.trajdata.dataset import read_dataset
from tgsuite.cli import main

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from harness.minirepos import make_mini

    root = tmp_path_factory.mktemp("logs")
    make_mini(root / "tasks", split="train", repos=1, tasks_per_repo=2, seed=0)
    rc = main(["eval", "--tasks", str(root / "tasks"), "--policy", "oracle", "--policy", "null", "--seeds", "0,1",
               "--out", str(root / "run"), "--sandbox", "local", "--no-progress", "--max-turns", "16"])
    assert rc == 0
    # an attempt that failed before the agent ran has a result.json and no trajectory: counted, never dropped
    some = next((root / "run" / "episodes").glob("*/null/s0/a0"))
    (some.parent.parent / "s7" / "a0").mkdir(parents=True)
    shutil.copy(some / "result.json", some.parent.parent / "s7" / "a0" / "result.json")
    assert main(["data", "import", str(root / "run"), "--out", str(root / "raw")]) == 0
    assert main(["data", "filter", str(root / "raw"), "--out", str(root / "clean"), "--tasks", str(root / "tasks"),
                 "--resolved-only", "--min-reward", "1.0", "--reward-from-arm", "multi_reward"]) == 0
    return {"root": root, "tasks": root / "tasks", "raw": root / "raw", "clean": root / "clean"}


def test_import_and_filter_a_tgsuite_run(logs: dict[str, Path]) -> None:
    raw, card = read_dataset(logs["raw"])
    assert len(raw) == 8 and card.n_records == 8  # 2 tasks x 2 arms x 2 seeds
    assert [(s.count, s.reason) for s in card.sources[0].skipped] == [
        (1, "no trajectory.jsonl (the attempt failed before the agent ran)")]
    assert all(r.provenance.source_format == "tgsuite_run" for r in raw)
    oracle = [r for r in raw if r.trajectory.policy == "oracle"]
    assert all(r.outcome.resolved and r.outcome.code_runs for r in oracle)
    kept, clean = read_dataset(logs["clean"])
    by = {f.name: f for f in clean.filters}
    assert by["leaks"].removed == 0 and by["leaks"].unchecked == 0  # the oracle edits; it is never shown the fix
    assert by["exact_duplicates"].removed + by["near_duplicates"].removed == 4  # seed 1 repeats seed 0, each arm
    assert by["resolved_only"].removed == 2  # the null policy's episodes left after deduplication
    assert by["min_reward"].removed == 0 and by["min_reward"].n_in == 2
    assert len(kept) == 2 and {r.trajectory.instance_id for r in kept} == {r.trajectory.instance_id for r in oracle}
    md = (logs["clean"] / "card.md").read_text()
    assert "resolved_only" in md and "multi_reward" in md


def test_distill_reads_the_dataset(logs: dict[str, Path], tmp_path: Path) -> None:
    from harness.tools import tool_schemas
    from repro.dataset_io import ModelSetup, record_reward
    from repro.distill import read_examples, train_distill

    cfg = F.config("multi_reward", f'distill.dataset="{logs["clean"]}"', "distill.steps=2", "distill.batch=2",
                   "distill.min_reward=0.0")
    s = F.setup()
    info = train_distill(cfg, tmp_path / "d", setup=ModelSetup(tokenizer=s.tokenizer, model=s.model,
                                                                 tools=tool_schemas()))
    ex = read_examples(tmp_path / "d" / "examples.jsonl")
    kept, _ = read_dataset(logs["clean"])
    assert info.step == 2 and sorted(e.instance_id for e in ex) == sorted(r.trajectory.instance_id for r in kept)
    rewards = {r.trajectory.instance_id: record_reward(r, cfg.reward) for r in kept}
    assert all(e.reward == pytest.approx(rewards[e.instance_id]) and e.reward > 1.0 for e in ex)
    assert all(sum(e.act) > 0 for e in ex)
    rows = F.metrics(tmp_path / "d")
    assert len(rows) == 2 and rows[0]["distill/examples"] == 2


def test_sft_reads_the_dataset(logs: dict[str, Path], tmp_path: Path) -> None:
    from repro.sft import SFTConfig, run_sft

    with pytest.raises(ValueError, match="exactly one of train_tasks"):
        SFTConfig(train_tasks=str(logs["tasks"]), dataset=str(logs["clean"]))
    cfg = SFTConfig(dataset=str(logs["clean"]), preset="nano", vocab_size=400, epochs=1, batch_tokens=512,
                    max_len=50_000, torch_threads=1, warmup_steps=1)
    report = run_sft(cfg, tmp_path / "sft")
    assert report.n_trajectories == 2 and report.steps >= 1
    assert json.loads((tmp_path / "sft" / "config.json").read_text())["dataset"] == str(logs["clean"])


def test_feedback_provider_rejections_reach_the_reward(logs: dict[str, Path], tmp_path: Path) -> None:
    """In the mini world the user is the feedback provider: a draft it rejects is a correction in the reward."""
    from harness.feedback_spec import parse_feedback
    from harness.runner import run_eval
    from harness.runner_sandbox import TaskSandboxFactory
    from harness.tasks import load_task_set
    from harness.trajdata.importer import import_source
    from repro.config import load_config
    from repro.dataset_io import record_reward

    ts = load_task_set(logs["tasks"])
    ts = ts.model_copy(update={"instances": ts.instances[:1]})
    with TaskSandboxFactory(ts, kind="local", run_id="pytest-feedback") as fac:
        run_eval(ts, {"oracle": "oracle"}, [0], tmp_path / "run", sandbox_factory=fac,
                 feedback=parse_feedback("correct@before_finish"))
    (record,), _ = import_source(tmp_path / "run")
    assert len(record.trajectory.discarded_drafts) == 1 and record.outcome.resolved
    w = load_config(arm="multi_reward").reward
    silent = record.model_copy(update={"trajectory": record.trajectory.model_copy(update={"discarded_drafts": []})})
    assert record_reward(record, w) - record_reward(silent, w) == pytest.approx(-0.5 * w.w_feedback)
