"""The KL-direction study's tables (tgsuite.pipeline.kl_tables) on hand-made training logs and probe files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tgsuite.pipeline.kl_tables import build, grad_ratio, last_window, markdown, seed_cell


def test_grad_ratio_last_window_and_seed_cells() -> None:
    assert grad_ratio({"grad/norm_pg": 2.0, "grad/norm_kl": 1.0}) == 0.5
    assert grad_ratio({"grad/norm_pg": 2.0}) == 0.0  # no guided turn: no KL gradient
    assert grad_ratio({"grad/norm_pg": 0.0, "grad/norm_kl": 1.0}) is None  # GRPO gradient 0: undefined
    assert last_window([0.0, None, 1.0, 0.5], 2) == 0.75 and last_window([1.0, None], 1) is None
    c = seed_cell([1.0, 3.0, None])
    assert c["mean"] == 2.0 and c["sd"] == pytest.approx(2 ** 0.5) and c["n"] == 2
    assert seed_cell([None])["mean"] is None and seed_cell([0.5])["sd"] is None


def _run(tmp: Path, name: str, compliance: list[float], kl: float) -> str:
    d = tmp / name
    d.mkdir(parents=True)
    rows = [{"step": i + 1, "behaviour/compliance": c, "task/pass_rate": 0.25, "rollout/tool_call_validity": 0.9,
             "grad/norm_pg": 1.0, "grad/norm_kl": kl, "time/step_s": 10.0} for i, c in enumerate(compliance)]
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(d)


def _probe(tmp: Path, name: str, p: float) -> str:
    path = tmp / f"{name}.json"
    path.write_text(json.dumps({"n": 2, "unprompted": {"mean": p}, "hinted": {"mean": 0.99}}))
    return str(path)


def test_build_and_markdown(tmp_path: Path) -> None:
    runs = {"reverse_lam0.1": {0: _run(tmp_path, "r0", [0, 0, 0, 0], 0.01), 1: _run(tmp_path, "r1", [0, 0, 0, 1], 0.03)},
            "forward_lam0.1": {0: _run(tmp_path, "f0", [0, 0, 1, 1], 0.5), 1: _run(tmp_path, "f1", [0, 1, 1, 1], 0.5)},
            "grpo": {0: _run(tmp_path, "g0", [0, 0, 0, 0], 0.0), 1: _run(tmp_path, "g1", [0, 0, 0, 0], 0.0)}}
    probes = {"start": _probe(tmp_path, "start", 1e-6), "reverse_lam0.1_s0": _probe(tmp_path, "a", 1e-6),
              "reverse_lam0.1_s1": _probe(tmp_path, "b", 3e-6), "forward_lam0.1_s0": _probe(tmp_path, "c", 0.9),
              "forward_lam0.1_s1": _probe(tmp_path, "d", 0.7)}
    res = build(["reverse", "forward"], [0.1], [0, 1], runs, probes, window=2)
    t = res["tables"]
    assert t["compliance"]["rows"]["forward"][0]["mean"] == pytest.approx((1 + 1) / 2)
    assert t["compliance"]["rows"]["reverse"][0]["mean"] == pytest.approx((0 + 0.5) / 2)
    assert t["grad_ratio"]["rows"]["forward"][0]["mean"] == pytest.approx(0.5)
    assert t["p_heading"]["rows"]["forward"][0]["mean"] == pytest.approx(0.8)
    assert t["p_heading"]["reference"]["n"] == 0  # no probe of the grpo runs given here
    assert t["compliance"]["reference"]["mean"] == 0.0
    assert res["curves"]["forward_lam0.1"]["compliance"] == [0, 0.5, 1, 1]
    assert res["start_probe"]["p_heading"] == 1e-6
    record = {"spec": {"lambdas": [0.1], "seeds": [0, 1], "dev_task_seed": 1}, "preset": "mini",
              "rl": {"run.steps": 4}, "start": {"path": "/m"}, "contexts": {"contexts": 2}, "window": 2, **res}
    md = markdown(record)
    assert "| forward | 1 ± 0 (n=2) |" in md and "| grpo (λ = 0) | 0 ± 0 (n=2) |" in md
    assert "Start model: 1e-06" in md and "| forward_lam0.1 | 0 | 0.5 | 1 | 1 |" in md
