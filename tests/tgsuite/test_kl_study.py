"""The KL-direction study end to end at a tiny size (tgsuite.pipeline.kl_study): a nano start model, 1 RL step,
1 seed, 2 directions and the grpo reference; then a resume that re-runs nothing. Mechanics only: no score of any
model is checked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tgsuite.pipeline.kl_study import KLStudySpec, cells, run_kl_study
from tgsuite.pipeline.presets import SMOKE

MINI_TOKENIZER = Path(__file__).resolve().parents[2] / "assets" / "base" / "mini"
TINY = SMOKE.with_rl({"rollout.max_turns": 2, "rollout.max_new_tokens": 16})


def _nano_start(dest: Path) -> Path:
    from repro.models import build_model
    from repro.tokenizer import load_tokenizer

    tok = load_tokenizer(MINI_TOKENIZER)
    build_model("nano", len(tok), seed=0, pad_token_id=tok.pad_token_id).save_pretrained(dest)
    tok.save_pretrained(dest)
    return dest


def test_spec_grid_and_refusals(tmp_path: Path) -> None:
    spec = KLStudySpec(start="x", directions=("reverse", "jsd"), lambdas=(0.03, 0.3))
    assert [c[0] for c in cells(spec)] == ["reverse_lam0.03", "reverse_lam0.3", "jsd_lam0.03", "jsd_lam0.3", "grpo"]
    assert cells(spec)[-1][1] == "grpo" and cells(spec)[0][2] == {"guidance.direction": "reverse", "guidance.lam": 0.03}
    with pytest.raises(ValueError, match="λ > 0"):
        KLStudySpec(start="x", lambdas=(0.0, 0.1))
    with pytest.raises(ValueError, match="each λ once"):
        KLStudySpec(start="x", lambdas=(0.1, 0.10))
    with pytest.raises(ValueError, match="preregistered held-out"):
        run_kl_study(SMOKE, KLStudySpec(start="x", dev_task_seed=SMOKE.task_seed), tmp_path / "o")
    with pytest.raises(ValueError, match="not a model folder"):
        run_kl_study(SMOKE, KLStudySpec(start=str(tmp_path)), tmp_path / "o")


@pytest.mark.slow
def test_tiny_study_runs_and_resumes(tmp_path: Path) -> None:
    start = _nano_start(tmp_path / "start")
    spec = KLStudySpec(start=str(start), directions=("reverse", "forward"), lambdas=(0.1,), seeds=(0,), steps=1,
                       probe_contexts=2)
    out = tmp_path / "study"
    record = run_kl_study(TINY, spec, out, echo=lambda s: None)
    assert record["contexts"]["contexts"] >= 1
    for label in ("reverse_lam0.1", "forward_lam0.1", "grpo"):
        run = out / "train" / label / "s0"
        cfg = (run / "config.toml").read_text()
        assert "log_grad_split = true" in cfg
        rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
        assert len(rows) == 1 and "rollout/tool_call_validity" in rows[0] and rows[0]["grad/norm_pg"] is not None
        if label != "grpo":
            assert f'direction = "{label.split("_")[0]}"' in cfg and "lam = 0.1" in cfg
        probe = json.loads((out / "probes" / f"{label}_s0.json").read_text())
        assert 0 < probe["unprompted"]["mean"] < 1 and len(probe["hinted"]["values"]) == record["contexts"]["contexts"]
    t = record["tables"]
    assert set(t["compliance"]["rows"]) == {"reverse", "forward"} and t["p_heading"]["reference"]["n"] == 1
    assert record["start_probe"]["p_heading"] > 0
    md = (out / "kl_direction.md").read_text()
    assert "## P(heading), unprompted" in md and "| grpo (λ = 0) |" in md
    again = run_kl_study(TINY, spec, out, echo=lambda s: None)  # resumes: every stage up to date
    assert all(v["skipped"] for v in again["stages"].values())
    assert again["tables"] == record["tables"]


def _script():
    import importlib.util

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "kl_direction_study.py"
    spec = importlib.util.spec_from_file_location("kl_direction_study", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_command_line_parses_the_grid_and_says_what_is_missing(tmp_path: Path) -> None:
    mod = _script()
    args = mod.parser().parse_args(["--out", "x", "--lambdas", "0.03,0.3", "--seeds", "0,1", "--directions",
                                    "forward,jsd", "--steps", "2"])
    assert args.lambdas == (0.03, 0.3) and args.seeds == (0, 1) and args.directions == ("forward", "jsd")
    with pytest.raises(SystemExit, match="ships no SFT start model"):
        mod.main(["--out", str(tmp_path / "o"), "--preset", "smoke"])
    with pytest.raises(SystemExit, match="bad study settings"):
        mod.main(["--out", str(tmp_path / "o"), "--start", "x", "--lambdas", "0"])
    with pytest.raises(SystemExit, match="not a model folder"):
        mod.main(["--out", str(tmp_path / "o"), "--preset", "smoke", "--start", str(tmp_path)])
