"""repro.config: layering, arm presets, --set parsing and the errors users see."""

from __future__ import annotations

from pathlib import Path

import pytest

from repro.config import ConfigError, arm_names, load_config, load_saved, parse_set, to_toml


def test_every_method_arm_is_a_preset() -> None:
    names = set(arm_names())
    wanted = {"grpo", "tg", "tg_all_turns", "tg_no_fmt_reward", "tg_no_think_kl", "tg_rev_kl", "tg_jsd",
              "tg_sampled_token", "opd_only", "hint_in_rollout", "tg_per_turn_ctx", "tg_kl_is", "tg_std_norm",
              "tg_ema_teacher", "tg_fixed_teacher"}
    assert wanted <= names
    assert {f"tg_lambda_{x}" for x in ("0.01", "0.03", "0.1", "1.0", "3.0")} <= names


@pytest.mark.parametrize(
    ("arm", "field", "value"),
    [
        ("grpo", ("guidance", "lam"), 0.0),
        ("tg", ("guidance", "lam"), 0.3),
        ("tg", ("guidance", "direction"), "forward"),
        ("tg_all_turns", ("guidance", "gating"), "all_turns"),
        ("tg_no_fmt_reward", ("reward", "w_fmt"), 0.0),
        ("tg_no_think_kl", ("guidance", "include_thinking"), False),
        ("tg_rev_kl", ("guidance", "direction"), "reverse"),
        ("tg_jsd", ("guidance", "direction"), "jsd"),
        ("tg_sampled_token", ("guidance", "estimator"), "sampled_token"),
        ("opd_only", ("grpo", "pg_weight"), 0.0),
        ("hint_in_rollout", ("guidance", "hint_in_rollout"), True),
        ("tg_lambda_0.1", ("guidance", "lam"), 0.1),
        ("tg_ema_teacher", ("guidance", "teacher"), "ema"),
        ("tg_fixed_teacher", ("guidance", "teacher"), "fixed"),
    ],
)
def test_arm_values(arm: str, field: tuple[str, str], value: object) -> None:
    cfg = load_config(arm=arm)
    assert getattr(getattr(cfg, field[0]), field[1]) == value
    assert cfg.run.arm == arm


def test_method_defaults_are_recorded_values() -> None:
    cfg = load_config(arm="tg").to_dict()
    assert cfg["guidance"]["direction"] == "forward" and cfg["guidance"]["kappa"] == 20.0
    assert cfg["grpo"]["scale_rewards"] == "none" and cfg["grpo"]["eps_low"] == 0.2
    assert cfg["optim"]["lr"] == 1e-6 and cfg["optim"]["betas"] == [0.9, 0.95]
    assert cfg["reward"]["w_fmt"] == 0.5 and cfg["async"]["max_staleness"] == 1


def test_set_overrides_and_types() -> None:
    cfg = load_config(arm="tg", sets=["guidance.lam=0.25", "rollout.sandbox=docker", "run.arm=custom-name"])
    assert cfg.guidance.lam == 0.25 and cfg.rollout.sandbox == "docker" and cfg.run.arm == "custom-name"
    assert parse_set("a.b=[1, 2]") == ("a.b", [1, 2])
    assert parse_set("a.b=hello") == ("a.b", "hello")


def test_unknown_key_names_field_and_fix() -> None:
    with pytest.raises(ConfigError) as e:
        load_config(sets=["guidance.lamda=0.3"])
    msg = str(e.value)
    assert "guidance.lamda" in msg and "lam" in msg and "--set" in msg


def test_unknown_key_in_user_file_names_the_file(tmp_path: Path) -> None:
    p = tmp_path / "my.toml"
    p.write_text("[rollout]\ngroup_sise = 8\n")
    with pytest.raises(ConfigError) as e:
        load_config(path=p)
    assert str(p) in str(e.value) and "rollout.group_sise" in str(e.value) and "group_size" in str(e.value)


def test_bad_values_rejected() -> None:
    with pytest.raises(ConfigError, match="guidance.lam"):
        load_config(sets=["guidance.lam=-1"])
    with pytest.raises(ConfigError, match="direction"):
        load_config(sets=["guidance.direction=sideways"])
    with pytest.raises(ConfigError, match="no loss"):
        load_config(arm="opd_only", sets=["guidance.lam=0"])
    with pytest.raises(ConfigError, match="feedback_mix"):
        load_config(sets=["guidance.feedback=mixture"])
    with pytest.raises(ConfigError, match="unknown arm"):
        load_config(arm="tg_typo")
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        load_config(sets=["guidance.lam"])


def test_bad_toml_syntax(tmp_path: Path) -> None:
    p = tmp_path / "bad.toml"
    p.write_text("[run\nseed = 1\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(path=p)


def test_mixture_feedback_ok() -> None:
    cfg = load_config(sets=["guidance.feedback=mixture", "guidance.feedback_mix={correct = 0.7, wrong = 0.3}"])
    assert cfg.guidance.feedback_mix == {"correct": 0.7, "wrong": 0.3}


def test_toml_round_trip(tmp_path: Path) -> None:
    cfg = load_config(arm="tg_kl_is", sets=["guidance.feedback=mixture", "guidance.feedback_mix={correct = 1.0}"])
    p = tmp_path / "config.toml"
    p.write_text(to_toml(cfg))
    assert load_saved(p) == cfg
    assert load_saved(p).sha256() == cfg.sha256()


def test_user_file_with_arm(tmp_path: Path) -> None:
    p = tmp_path / "run.toml"
    p.write_text('[run]\narm = "tg_rev_kl"\nsteps = 3\n')
    cfg = load_config(path=p)
    assert cfg.guidance.direction == "reverse" and cfg.run.steps == 3


def test_paper_configs_validate() -> None:
    root = Path(__file__).resolve().parents[2] / "configs" / "paper"
    files = sorted(root.glob("*.toml"))
    assert files, "configs/paper/*.toml missing"
    for f in files:
        cfg = load_config(path=f)
        assert cfg.rollout.groups == 32 and cfg.rollout.group_size == 32 and cfg.run.steps == 200


def test_model_dtype_is_replaced_by_a_precision_policy() -> None:
    """model.dtype = "bfloat16" trained parameters and AdamW state in bf16 with no master copy; it is refused with
    the fix, and the paper configs use the bf16-mixed policy (fp32 masters, bf16 matmuls)."""
    with pytest.raises(ConfigError, match="model.precision"):
        load_config(sets=["model.dtype=bfloat16"])
    assert load_config(sets=["model.precision=bf16-mixed"]).model.precision == "bf16-mixed"
    with pytest.raises(ConfigError):
        load_config(sets=["model.precision=bf16"])
    for name in ("tg", "grpo"):
        cfg = load_config(path=Path(__file__).resolve().parents[2] / "configs" / "paper"
                          / f"qwen3_coder_30b_a3b_{name}.toml")
        assert cfg.model.precision == "bf16-mixed"
