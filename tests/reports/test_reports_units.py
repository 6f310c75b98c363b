"""Unit tests of the report's pure parts: formatting, training windows, page selection, input readers."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures" / "reports"))
import report_factory as factory  # noqa: E402

from harness.rundir import RunDirError, load_run, read_trajectory  # noqa: E402
from harness.schema import Message, Trajectory  # noqa: E402
from reports import format as fmt  # noqa: E402
from reports import pages, sections, training  # noqa: E402
from reports.build import build_report  # noqa: E402
from reports.episodes import _parse_trajectory, read_episode_files  # noqa: E402
from reports.summary_md import md_escape  # noqa: E402


def test_format_never_prints_nan_as_a_number() -> None:
    for f in (fmt.pct, fmt.pp, fmt.num, fmt.pvalue, fmt.duration):
        assert f(math.nan) == fmt.DASH and f(None) == fmt.DASH and f(math.inf) == fmt.DASH
    assert fmt.interval(0.1, math.nan) == fmt.DASH


def test_format_values() -> None:
    assert fmt.pct(0.1234) == "12.3%"
    assert fmt.pp(-0.031) == "−3.1 pp" and fmt.pp(0.05) == "+5.0 pp" and fmt.pp(0.0) == "0.0 pp"
    assert fmt.interval(-0.012, 0.045) == "[−1.2, +4.5] pp"
    assert fmt.interval(0.1, 0.2, scale="pct") == "[10.0%, 20.0%]"
    assert fmt.pvalue(0.0004) == "<0.001" and fmt.pvalue(0.0123) == "0.012" and fmt.pvalue(0.43) == "0.43"
    assert fmt.short_hash("sha256:" + "a" * 64) == "a" * 12
    assert fmt.duration(0.25) == "250 ms" and fmt.duration(125) == "2 min 05 s" and fmt.duration(7380) == "2 h 03 min"
    assert fmt.mean_std(0.412, 0.03) == "41.2% ± 3.0"
    assert fmt.truncate("x" * 10, 4) == "xxxx\n… [6 more characters not shown]"


def test_window_stat_is_population_std_over_last_steps() -> None:
    steps = tuple(float(s) for s in range(40))
    vals = tuple([0.0] * 8 + [1.0, 0.0] * 16)
    w = training.window_stat(steps, vals, 32)
    assert w is not None and w.n == 32 and w.first_step == 8 and w.last_step == 39
    assert w.mean == pytest.approx(0.5) and w.std == pytest.approx(0.5)  # ddof = 0 (METHOD §6.11)
    short = training.window_stat((1.0, 2.0), (0.2, 0.4), 32)
    assert short is not None and short.n == 2 and short.mean == pytest.approx(0.3)
    assert training.window_stat((), (), 32) is None


def test_arm_curves_mean_keeps_counts_and_skips_non_numbers() -> None:
    rows0 = [{"step": 0, "m": 0.2}, {"step": 1, "m": 0.4}, {"step": 2, "m": float("nan")}]
    rows1 = [{"step": 0, "m": 0.4}, {"step": 2, "m": 1.0}, {"step": 3, "other": 1.0}]
    c = training.arm_curves("tg", "m", {"0": rows0, "1": rows1})
    assert c.mean_steps == (0.0, 1.0, 2.0)
    assert c.mean_values == pytest.approx((0.3, 0.4, 1.0)) and c.mean_counts == (2, 1, 1)


def test_pick_key_prefers_the_trainers_name_and_falls_back() -> None:
    cands = ("task/pass_rate", "reward/task")
    assert training.pick_key({"tg": {"0": [{"step": 0, "reward/task": 1.0}]}}, cands) == "reward/task"
    both = {"tg": {"0": [{"step": 0, "reward/task": 1.0}]}, "grpo": {"0": [{"step": 0, "task/pass_rate": 0.5}]}}
    assert training.pick_key(both, cands) == "task/pass_rate"
    assert training.pick_key({"tg": {"0": []}}, cands) == "task/pass_rate"


def test_read_metrics_errors_name_file_line_and_fix(tmp_path: Path) -> None:
    f = tmp_path / "metrics.jsonl"
    f.write_text('{"step": 0, "reward/task": 0.1}\nnot json\n')
    with pytest.raises(training.MetricsError, match=r"metrics\.jsonl:2: not valid JSON"):
        training.read_metrics(tmp_path)
    f.write_text('{"reward/task": 0.1}\n')
    with pytest.raises(training.MetricsError, match=r":1: field 'step' missing"):
        training.read_metrics(f)
    with pytest.raises(training.MetricsError, match="no metrics.jsonl here"):
        training.read_metrics(tmp_path / "nope")


def test_select_pages_is_deterministic_stratified_and_capped(tmp_path: Path) -> None:
    eps = factory.write_run(tmp_path / "r", "0" * 64, n_tasks=60, with_files=False)
    chosen = pages.select_pages(eps, 40)
    assert len(chosen) == 40 and chosen == pages.select_pages(list(reversed(eps)), 40)
    cells = {pages._cell(e) for e in eps}
    assert {pages._cell(e) for e in eps if pages.episode_key(e) in chosen} == cells  # every stratum has examples
    assert pages.select_pages(eps, 10_000) == {pages.episode_key(e) for e in eps}
    names = {pages.page_name(e) for e in eps}
    assert len(names) == len(eps) and all(n.startswith("trajectories/") and "/" not in n[13:] for n in names)


def test_page_name_sanitises_odd_instance_ids() -> None:
    ep = factory._episode("run", 3, "tg", 0, __import__("random").Random(0)).model_copy(
        update={"instance_id": "../../etc/passwd <x>"})
    name = pages.page_name(ep)
    assert name.startswith("trajectories/") and ".." not in name[13:].split("__")[0] and "<" not in name


def test_diff_lines_classify() -> None:
    kinds = [d.kind for d in pages.diff_lines("diff --git a b\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n c")]
    assert kinds == ["meta", "meta", "meta", "hunk", "del", "add", "ctx"]


def test_parse_trajectory_shapes() -> None:
    msgs = [Message(role="user", content="hi"), Message(role="assistant", content="ok")]
    t = Trajectory(instance_id="i", policy="p", seed=0, messages=msgs)
    traj, got = _parse_trajectory(t.model_dump_json())
    assert traj == t and list(got) == msgs
    _, got = _parse_trajectory("\n".join(m.model_dump_json() for m in msgs))
    assert list(got) == msgs
    events = [json.dumps({"type": "model", "message": msgs[0].model_dump()}), json.dumps({"type": "limit", "kind": "turns"})]
    _, got = _parse_trajectory("\n".join(events))
    assert list(got) == msgs[:1]
    with pytest.raises(ValueError, match="line 1: not a Message"):
        _parse_trajectory(json.dumps({"role": "wizard", "content": "x"}))


def test_parse_trajectory_reads_the_runner_format(tmp_path: Path) -> None:
    from harness.runner_episode import write_trajectory

    msgs = [Message(role="user", content="hi", turn=0), Message(role="assistant", content="ok", turn=0, is_hint=False)]
    t = Trajectory(instance_id="i", policy="p", seed=3, messages=msgs, final_message="done", finished=True,
                   discarded_drafts=[Message(role="assistant", content="draft", turn=0)])
    write_trajectory(tmp_path / "trajectory.jsonl", t)
    traj, got = _parse_trajectory((tmp_path / "trajectory.jsonl").read_text())
    assert traj == t == read_trajectory(tmp_path / "trajectory.jsonl") and list(got) == msgs


def test_episode_files_report_unreadable_trajectory(tmp_path: Path) -> None:
    (tmp_path / "trajectory.jsonl").write_text("{broken\n")
    files = read_episode_files(tmp_path)
    assert files.trajectory_error and "could not read the trajectory" in files.trajectory_error
    assert files.patch is None and files.grade_logs == ()


def test_run_dir_errors(tmp_path: Path) -> None:
    """The report reads a run as the analysis does (``harness.rundir.load_run``): episodes/, not results.jsonl."""
    with pytest.raises(RunDirError, match="does not exist"):
        load_run(tmp_path / "nope", require_manifest=False)
    (tmp_path / "empty").mkdir()
    with pytest.raises(RunDirError, match="neither manifest.json nor episodes/"):
        load_run(tmp_path / "empty", require_manifest=False)
    eps = factory.write_run(tmp_path / "r", "0" * 64, n_tasks=2, with_files=False)
    bad = tmp_path / "r" / "episodes" / eps[1].instance_id / eps[1].arm / f"s{eps[1].seed}" / "a0" / "result.json"
    bad.write_text(bad.read_text().replace('"joint_ok":', '"joint_okk":'))
    with pytest.raises(RunDirError, match=r"a0/result\.json: not an episode result \(not a valid EpisodeResult"):
        load_run(tmp_path / "r", require_manifest=False)


def test_criterion_reason_states_bound_bar_and_verdict() -> None:
    a = factory.analysis("0" * 64)
    reasons = [sections.criterion_reason(c).text for c in a.criteria]
    assert reasons[0].startswith("code_ok — non-inferiority") and "−2.5 pp > −3.0 pp → PASS" in reasons[0]
    assert "−1.0 pp ≤ 0.0 pp → FAIL" in reasons[2]
    nv = a.criteria[2].model_copy(update={"verdict": "not_evaluated", "lower_one_sided": None})
    assert "not evaluated (joint gain too small" in sections.criterion_reason(nv).text


def test_md_escape_blocks_markup() -> None:
    assert md_escape("a|b <script> *x* [l](u)\nnext") == "a\\|b &lt;script&gt; \\*x\\* \\[l\\](u) next"


def test_ten_thousand_episodes_index_stays_small(tmp_path: Path) -> None:
    """Size only (time is measured in benchmarks/report_bench.py): 10,000 episodes, all listed, index < 5 MB."""
    fp = factory.frozen_protocol()
    eps = factory.write_run(tmp_path / "run", fp.sha256, n_tasks=2500, with_files=False)
    a = factory.analysis(fp.sha256, run_path=str(tmp_path / "run"), n_episodes=len(eps))
    s = build_report(a, out_dir=tmp_path / "out", max_trajectory_pages=0)
    doc = (tmp_path / "out" / "index.html").read_text()
    assert s.n_episodes == 10_000 and s.n_trajectory_pages == 0
    assert len(doc.encode()) < 5_000_000
    assert doc.count("repo1__task-2497") == 4  # every episode is in the embedded table data (2 arms x 2 seeds)
    assert "0 of 10,000 episodes have a trajectory page" in doc
