"""The training configuration: one frozen tree, read from TOML, overridden with ``--set a.b=c``.

Every open choice of METHOD §6 ([OUR CHOICE] there) is a field here, so that it is written into each run's
``config.toml`` and ``manifest.json`` and never hard-wired in the code. Arms (METHOD §6.9) are named presets:
``repro/configs/base.toml`` plus the overrides listed for that arm in ``repro/configs/arms.toml``.

Layering (later wins): ``base.toml`` → arm overrides → a user TOML file (``--config``) → ``--set`` overrides.
Unknown keys, wrong types and contradictory settings raise :class:`ConfigError`, which names the file, the field
and the fix.
"""

from __future__ import annotations

import copy
import hashlib
import json
import tomllib
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from harness.sandbox import SandboxKind
from repro.config_sections import ClusterCfg, ConfigSection, ShapeCfg, VllmCfg, VllmHttpCfg
from repro.precision import Precision


class ConfigError(ValueError):
    """A bad configuration value: the message names the source, the field and the fix."""


class RunCfg(ConfigSection):
    seed: int = 0
    arm: str = "custom"
    steps: int = Field(8, ge=1, description="optimizer steps (the paper: 200)")
    checkpoint_every: int = Field(0, ge=0, description="0 = only at the end")
    keep_checkpoints: int = Field(0, ge=0, description="0 = keep all")
    progress: bool = True
    tracker: Literal["jsonl", "tensorboard"] = Field(
        "jsonl", description="metrics.jsonl always; 'tensorboard' also writes event files to OUT/tb "
                             "(`pip install 'tgsuite[tensorboard]'`; view with `tensorboard --logdir OUT/tb`)")
    log_grad_split: bool = Field(False, description="log ‖∇L_GRPO‖ and λ‖∇L_KL‖ (one extra backward per micro-batch)")


LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


class LoraCfg(ConfigSection):
    """LoRA adapters (``repro.lora``): only the adapter matrices train; the base weights stay frozen."""

    enabled: bool = False
    r: int = Field(16, ge=1, description="adapter rank")
    alpha: float = Field(32.0, gt=0, description="scale = alpha / r")
    dropout: float = Field(0.0, ge=0, lt=1, description="dropout on the adapters' input (train mode only)")
    target_modules: tuple[str, ...] = Field(LORA_TARGETS, min_length=1, description="projections of every layer "
                                            "that get an adapter, a subset of " + ", ".join(LORA_TARGETS))

    @model_validator(mode="after")
    def _targets(self) -> LoraCfg:
        bad = [t for t in self.target_modules if t not in LORA_TARGETS]
        if bad or len(set(self.target_modules)) != len(self.target_modules):
            raise ValueError(f"lora.target_modules = {list(self.target_modules)}: use distinct names from "
                             f"{list(LORA_TARGETS)} (unknown: {bad})")
        return self


class ModelCfg(ConfigSection):
    @model_validator(mode="before")
    @classmethod
    def _no_dtype(cls, data: object) -> object:
        if isinstance(data, dict) and "dtype" in data:
            raise ValueError("model.dtype was removed: training kept parameters and AdamW state in bf16 with no "
                             "float32 master copy (small updates were lost). Fix: delete model.dtype and set "
                             "model.precision = \"bf16-mixed\" (fp32 master weights, bf16 matmuls) or \"fp32\"")
        return data

    preset: Literal["nano", "mini", "custom"] = "nano"
    name: str | None = Field(None, description="a label for the base model, e.g. Qwen3-Coder-30B-A3B-Instruct")
    init: str | None = Field(None, description="a checkpoint directory (HF layout + tokenizer) to start from")
    tokenizer: str | None = Field(None, description="tokenizer directory when `init` is not given")
    precision: Precision = Field("fp32", description="fp32, or bf16-mixed: float32 master weights, gradients and "
                                 "AdamW state with bf16 matmuls under autocast (repro.precision); parameters are "
                                 "never stored in bf16 for training")
    device: Literal["cpu", "cuda", "auto"] = "cpu"
    threads: int = Field(0, ge=0, description="torch intra-op threads; 0 = torch default")
    lora: LoraCfg = LoraCfg()
    activation_checkpointing: bool = Field(
        False, description="recompute each decoder layer in the backward instead of keeping its activations "
        "(repro.distributed.activation_checkpointing); the --dry-run plan counts activations accordingly")


class TasksCfg(ConfigSection):
    path: str | None = Field(None, description="task-set directory (tasks.jsonl + snapshots/)")
    split: Literal["train", "heldout", "test", "dev"] = "train"
    epochs: int = Field(1, ge=1, description="passes over the task list (the paper: single epoch)")
    shuffle: bool = True


class RolloutCfg(ConfigSection):
    groups: int = Field(2, ge=1, description="groups (tasks) per step; paper 32")
    group_size: int = Field(4, ge=1, description="rollouts per group; paper 32")
    temperature: float = Field(1.0, gt=0)
    top_p: float = Field(1.0, gt=0, le=1)
    max_turns: int = Field(6, ge=1)
    finish_notice_turns: int = Field(0, ge=0, description="the agent loop tells the agent when only this many turns "
                                     "are left, so it can still finish with a report (harness EpisodeLimits); 0 = never")
    max_new_tokens: int = Field(96, ge=1, description="per assistant turn")
    max_context_tokens: int = Field(2048, ge=16)
    observation_max_tokens: int = Field(256, ge=8, description="tool output tokens kept per observation")
    sandbox: SandboxKind = "local"
    engine: Literal["hf_sampler", "vllm", "vllm_http"] = Field(
        "hf_sampler", description="hf_sampler = our KV-cached sampler (repro.sampler) or HFEngine; vllm = a colocated "
        "vllm.LLM in this process (repro.vllm_engine; needs the gpu extra and CUDA); vllm_http = external "
        "`vllm serve` processes over HTTP ([vllm_http], repro.vllm_http)")
    per_exec_timeout_s: float = Field(30.0, gt=0)
    sampler_threads: int = Field(0, ge=0, description="torch intra-op threads while rollouts sample (synchronous "
                                 "runs; restored for the trainer); 0 = unchanged (model.threads or torch's default)")
    env_workers: int = Field(4, ge=1, description="episodes of a step whose tool calls and grading run at once, on "
                             "threads, while the model samples (repro.rollout.EnvPool); 1 = one after another. The "
                             "trajectories do not depend on it")
    sampling_streams: int = Field(
        0, ge=0, description="each step's groups are sampled in this many contiguous chunks, one seeded run_groups "
        "call each (repro.distributed); 0 = one per process (1 single-process, one per rank under cluster.fsdp). "
        "A single-process run with N reproduces an N-rank run's rollouts; must divide rollout.groups")


class RewardCfg(ConfigSection):
    """R(τ) = Σ_k sign_k · w_k · R_k (METHOD §6.1); every term, its scale and sign: ``repro.rewards``."""

    w_task: float = Field(1.0, ge=0, description="+ hidden tests pass, {0,1}")
    w_fmt: float = Field(0.5, ge=0, description="+ share of applicable turns the checker passes, [0,1]")
    w_code_runs: float = Field(0.0, ge=0, description="+ hidden tests ran without collection/import errors: +1/-1/0")
    w_tests_run: float = Field(0.0, ge=0, description="+ the agent ran the visible tests at least once, {0,1}")
    w_edits: float = Field(0.0, ge=0, description="+ edit-count shape in [-1,1] (repro.rewards.edits_shape)")
    edits_target: int = Field(3, ge=1, description="edits up to this count get the full edits term")
    w_rework: float = Field(0.0, ge=0, description="- per edit undoing/rewriting the agent's own earlier edit")
    w_tool_errors: float = Field(0.0, ge=0, description="- per repeated tool error")
    w_protocol: float = Field(0.0, ge=0, description="- per invalid tool call (malformed or after finish)")
    w_feedback: float = Field(0.0, ge=0, description="+ user feedback in [-1,1] (0 when none is recorded)")
    checker: str = "markdown@v3"  # v2: broken tool-call turns not judged (issue #13.3); v3: quoted code fails


class GrpoCfg(ConfigSection):
    pg_weight: float = Field(1.0, ge=0, description="0 = opd_only (no GRPO term)")
    scale_rewards: Literal["none", "group"] = "none"
    eps_low: float = Field(0.2, gt=0)
    eps_high: float = Field(0.2, gt=0)
    mask_truncated: bool = False
    keep_zero_variance_groups: Literal["never", "if_kl", "always"] = "always"


class GuidanceCfg(ConfigSection):
    lam: float = Field(0.0, ge=0, description="λ, the KL weight; 0 = plain GRPO")
    gating: Literal["failing_turns", "all_turns"] = "failing_turns"
    direction: Literal["reverse", "forward", "jsd"] = "forward"
    jsd_beta: float = Field(0.5, gt=0, lt=1)
    kappa: float = Field(20.0, gt=0, description="per-token clamp (nats)")
    include_thinking: bool = True
    estimator: Literal["full_vocab", "sampled_token"] = "full_vocab"
    sampled_token_coef: float = Field(1.0, ge=0)
    per_turn_ctx: bool = False
    kl_is_clip: float | None = Field(None, gt=0, description="tg_kl_is: weight KL tokens by min(π/μ, clip)")
    teacher: Literal["live", "ema", "fixed"] = Field(
        "live", description="teacher weights (METHOD §9 item 4): live = the current θ_k (no copy); fixed = θ_0 frozen; "
        "ema = θ_T ← (1−r)·θ_T + r·θ after each optimizer step. ema/fixed hold one more parameter copy, same FLOPs")
    teacher_ema_rate: float = Field(0.05, gt=0, le=1, description="r of the ema teacher (SDPO / TRL default 0.05)")
    chunk_size: int = Field(256, ge=1, description="KL rows per checkpointed chunk")
    feedback: Literal["correct", "irrelevant", "wrong", "mixture"] = "correct"
    feedback_mix: dict[str, float] = Field(default_factory=dict, description="kind -> probability, for mixture")
    hint_in_rollout: bool = False


class OptimCfg(ConfigSection):
    lr: float = Field(1e-6, gt=0)
    betas: tuple[float, float] = (0.9, 0.95)
    weight_decay: float = Field(0.01, ge=0)
    grad_clip: float = Field(1.0, gt=0)
    warmup_steps: int = Field(0, ge=0)
    schedule: Literal["constant", "cosine"] = "constant"
    micro_batch: int = Field(4, ge=1, description="trajectories per forward/backward")
    padding_free: bool = Field(True, description="pack a micro-batch's sequences into one row (no pad tokens, no "
                               "attention across sequences; repro.packing) as TRL's padding_free does; false = "
                               "right-padded [B, T] with an attention mask")


class AsyncCfg(ConfigSection):
    enabled: bool = False
    max_staleness: int = Field(1, ge=0, description="S_max in versions; 0 = synchronous")
    max_lead: int | None = Field(None, ge=0, description="steps the producer may run ahead; None = max_staleness")
    queue_groups: int = Field(0, ge=0, description="bounded queue size in groups; 0 = groups × (lead + 1)")


class DistillCfg(ConfigSection):
    rounds: int = Field(1, ge=1, description="distill → RL rounds for `train loop`")
    pool_rollouts: int = Field(8, ge=1, description="rollouts sampled per task to pick the best from")
    pool_tasks: int = Field(8, ge=1, description="tasks sampled for the round-0 pool")
    top_k: int = Field(1, ge=1, description="best trajectories kept per task")
    min_reward: float = 0.0
    steps: int = Field(8, ge=1)
    batch: int = Field(4, ge=1)
    lr: float = Field(1e-4, gt=0)
    target_temperature: float = Field(0.7, gt=0, description="soft targets = own distribution at this temperature")
    hard_weight: float = Field(0.5, ge=0, le=1, description="weight of CE on the sampled tokens")
    dataset: str | None = Field(None, description="a dataset directory (`tgsuite data filter`) to distil from "
                                "instead of sampling a pool; rewards with [reward]'s weights")


class TrainConfig(ConfigSection):
    run: RunCfg = RunCfg()
    model: ModelCfg = ModelCfg()
    tasks: TasksCfg = TasksCfg()
    rollout: RolloutCfg = RolloutCfg()
    reward: RewardCfg = RewardCfg()
    grpo: GrpoCfg = GrpoCfg()
    guidance: GuidanceCfg = GuidanceCfg()
    optim: OptimCfg = OptimCfg()
    async_: AsyncCfg = Field(AsyncCfg(), alias="async")
    distill: DistillCfg = DistillCfg()
    cluster: ClusterCfg = ClusterCfg()
    vllm: VllmCfg = VllmCfg()
    vllm_http: VllmHttpCfg = VllmHttpCfg()
    shape: ShapeCfg = ShapeCfg()

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    @model_validator(mode="after")
    def _coherent(self) -> TrainConfig:
        g = self.guidance
        if self.grpo.pg_weight == 0 and g.lam == 0:
            raise ValueError("grpo.pg_weight = 0 and guidance.lam = 0 leave no loss; set one of them > 0")
        if g.feedback == "mixture":
            if not g.feedback_mix or abs(sum(g.feedback_mix.values()) - 1.0) > 1e-6:
                raise ValueError("guidance.feedback = 'mixture' needs guidance.feedback_mix summing to 1, "
                                 "e.g. {correct = 0.7, wrong = 0.3}")
            bad = set(g.feedback_mix) - {"correct", "irrelevant", "wrong"}
            if bad:
                raise ValueError(f"guidance.feedback_mix has unknown kinds {sorted(bad)}; use correct/irrelevant/wrong")
        if self.distill.hard_weight == 0 and self.distill.target_temperature == 1.0:
            raise ValueError("distill.hard_weight = 0 with distill.target_temperature = 1 trains toward the model's "
                             "own unchanged distribution (zero gradient); lower the temperature or raise hard_weight")
        if g.gating == "all_turns" and g.per_turn_ctx:
            raise ValueError("guidance.gating = 'all_turns' with guidance.per_turn_ctx = true is not a defined arm; "
                             "use one of them")
        if self.model.lora.enabled and g.teacher == "ema" and g.lam > 0:
            raise ValueError("model.lora.enabled with guidance.teacher = 'ema' is not implemented (an EMA of the "
                             "adapter weights); use guidance.teacher = 'live' (the adapted model itself) or 'fixed' "
                             "(the base, adapters switched off)")
        if self.rollout.group_size < 2 and self.grpo.pg_weight > 0:
            raise ValueError("rollout.group_size must be ≥ 2 for group-relative advantages")
        return self

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)

    def sha256(self) -> str:
        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()


# ----------------------------------------------------------------------------------------------------------------
# Loading
# ----------------------------------------------------------------------------------------------------------------


def _read_utf8(p: Path) -> str:
    try:
        return p.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{p}: not UTF-8 (byte {exc.object[exc.start]:#04x} at offset {exc.start}); fix: save the "
                          "file as UTF-8 (TOML is UTF-8)") from None


def _read_toml_text(text: str, source: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{source}: not valid TOML ({exc}); fix the syntax at the position shown") from exc


def _packaged(name: str) -> dict[str, Any]:
    text = resources.files("repro.configs").joinpath(name).read_text(encoding="utf-8")
    return _read_toml_text(text, f"repro/configs/{name}")


def deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """Return ``base`` updated by ``over`` recursively (tables merge, values replace)."""
    out = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict) and key != "feedback_mix":
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def dotted_to_tree(dotted: dict[str, Any]) -> dict[str, Any]:
    tree: dict[str, Any] = {}
    for key, value in dotted.items():
        node = tree
        parts = key.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return tree


def arm_names() -> list[str]:
    """All arm presets (METHOD §6.9), including the generated λ sweep."""
    return sorted(_arm_table())


def _arm_table() -> dict[str, dict[str, Any]]:
    raw = _packaged("arms.toml")
    arms: dict[str, dict[str, Any]] = {}
    for name, spec in raw.get("arm", {}).items():
        arms[name] = dict(spec)
    for lam in raw.get("sweep", {}).get("lambdas", []):
        arms[f"tg_lambda_{float(lam)}"] = {**arms["tg"], "guidance.lam": float(lam)}
    return arms


def arm_overrides(arm: str) -> dict[str, Any]:
    table = _arm_table()
    if arm not in table:
        raise ConfigError(f"--arm {arm!r}: unknown arm; choose one of {', '.join(sorted(table))} "
                          "(defined in repro/configs/arms.toml)")
    return {**table[arm], "run.arm": arm}


def parse_set(item: str) -> tuple[str, Any]:
    """Parse one ``--set a.b=c``; the value is read as a TOML value when it parses, else as a string."""
    if "=" not in item:
        raise ConfigError(f"--set {item!r}: expected KEY=VALUE, e.g. --set guidance.lam=0.3")
    key, raw = item.split("=", 1)
    key = key.strip()
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw
    return key, value


def _format_errors(exc: ValidationError, source: str) -> str:
    lines = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "(top level)"
        if err["type"] == "extra_forbidden":
            section = loc.rsplit(".", 1)[0] if "." in loc else ""
            known = _known_keys(section)
            fix = f"remove it or use one of: {', '.join(known)}"
            lines.append(f"{source}: unknown key `{loc}`; {fix}")
        else:
            lines.append(f"{source}: field `{loc}`: {err['msg']} (got {err.get('input')!r}); fix the value")
    return "\n".join(lines)


def _known_keys(section: str) -> list[str]:
    model: type[BaseModel] = TrainConfig
    for part in [p for p in section.split(".") if p]:
        field = model.model_fields.get("async_" if part == "async" else part)
        if field is None or not isinstance(field.annotation, type) or not issubclass(field.annotation, BaseModel):
            return []
        model = field.annotation
    return sorted((f.alias or n) for n, f in model.model_fields.items())


def build_config(tree: dict[str, Any], source: str = "<config>") -> TrainConfig:
    try:
        return TrainConfig.model_validate(tree)
    except ValidationError as exc:
        raise ConfigError(_format_errors(exc, source)) from exc


def load_config(
    *, arm: str | None = None, path: str | Path | None = None, sets: list[str] | tuple[str, ...] = (),
    overrides: Mapping[str, Any] | None = None,
) -> TrainConfig:
    """Resolve the layered configuration (see the module docstring) into a validated :class:`TrainConfig`.

    ``overrides`` (dotted key -> value, e.g. ``{"guidance.lam": 0.3}``) is applied last, after ``sets``: the same
    layer as ``--set`` for callers that hold typed values (``tgsuite reproduce``'s presets), so nothing is turned
    into strings and parsed back."""
    tree = _packaged("base.toml")
    sources = ["repro/configs/base.toml"]
    if arm:
        tree = deep_merge(tree, dotted_to_tree(arm_overrides(arm)))
        sources.append(f"arm {arm}")
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"--config {p}: file not found; pass an existing TOML file")
        user = _read_toml_text(_read_utf8(p), str(p))
        if "arm" in user.get("run", {}) and not arm and user["run"]["arm"] != "custom":
            tree = deep_merge(tree, dotted_to_tree(arm_overrides(user["run"]["arm"])))
        tree = deep_merge(tree, user)
        sources.append(str(p))
    if sets:
        over = dict(parse_set(s) for s in sets)
        tree = deep_merge(tree, dotted_to_tree(over))
        sources.append("--set " + " ".join(sets))
    if overrides:
        tree = deep_merge(tree, dotted_to_tree(dict(overrides)))
        sources.append("overrides " + ", ".join(sorted(overrides)))
    return build_config(tree, " + ".join(sources))


def to_toml(cfg: TrainConfig) -> str:
    """Render a config as TOML (a flat writer: enough for this tree of scalars, lists and small tables)."""
    out: list[str] = []
    for section, values in cfg.to_dict().items():
        out.append(f"[{section}]")
        for key, value in values.items():
            if value is None:
                continue
            out.append(f"{key} = {_toml_value(value)}")
        out.append("")
    return "\n".join(out)


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {_toml_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"cannot render {type(value).__name__} as TOML")


def load_saved(path: str | Path) -> TrainConfig:
    """Read back a run's ``config.toml`` (written by :func:`to_toml`)."""
    p = Path(path)
    return build_config(_read_toml_text(_read_utf8(p), str(p)), str(p))
