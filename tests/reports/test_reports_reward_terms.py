"""The report's training section shows the reward breakdown per term when the runs logged one."""

from __future__ import annotations

from reports import studies, training


def _rows(contrib: float, raw: float, n: int = 3) -> list[dict[str, float]]:
    return [{"step": s, "reward/total": 1.0, "reward/task": raw, "reward/contrib/task": contrib,
             "reward/rework": 2.0, "reward/contrib/rework": -0.1 * s} for s in range(1, n + 1)]


def test_reward_terms_table() -> None:
    runs = {"multi_reward": {"0": _rows(1.0, 1.0), "1": _rows(0.0, 0.0)}, "grpo": {"0": _rows(0.5, 0.5)}}
    assert training.reward_terms(runs) == ["task", "rework"]
    sec = studies.training_section(runs, arm_order=["multi_reward", "grpo"], window=2)
    table = next(t for t in sec.tables if t.id == "training-reward-terms")
    cells = {(r[0].text, r[1].text): (r[2].text, r[3].text) for r in table.rows}
    assert set(cells) == {(a, t) for a in ("multi_reward", "grpo") for t in ("task", "rework")}
    raw, contrib = cells[("multi_reward", "task")]
    assert raw.startswith("0.5") and contrib.startswith("0.5")  # mean of the two seeds at each step
    assert cells[("grpo", "rework")][1].startswith("\u22120.250")  # sign kept: a cost


def test_no_breakdown_no_table() -> None:
    runs = {"grpo": {"0": [{"step": 1, "reward/total": 0.0}]}}
    sec = studies.training_section(runs, window=2)
    assert "training-reward-terms" not in {t.id for t in sec.tables}
