"""The RL setup: :class:`RLSetup` (model, tokenizer, tasks, environments, engine, hints) and :func:`default_setup`,
which builds it from the configuration and the harness for real training runs; the adapters it uses:

- :class:`HarnessEnv` — one training episode = ``harness.agent.AgentEnv`` in a fresh sandbox from
  ``harness.runner_sandbox.TaskSandboxFactory`` (LocalSandbox by default for speed, Docker selectable with
  ``rollout.sandbox = "docker"``); at the end the agent's diff is graded with the hidden tests by evaluation's own
  procedure (``harness.episode_grading``: host-side diff against the pristine base, a NEW sandbox, the task set's
  validated exclusions, invalid grades settled by a gold control run). Infrastructure failures
  (``SandboxUnavailable``, ``GraderError``) become ``EnvOutcome.infra_error``; the trainer drops such groups and
  counts them — they are never scored as model failures.
- :func:`default_engine` — the ``repro.engine.RolloutEngine`` the rollouts use: ``KVSampler`` for Qwen3, ``HFEngine`` otherwise;
  :func:`engine_factory_for` — the one ``rollout.engine`` chooses (``vllm``: ``repro.vllm_engine.VLLMRollouts``).
- :func:`hint_source` — the hint text for a failing turn from the configured feedback kind (correct, irrelevant,
  wrong, or a seeded mixture), using ``harness.feedback``'s texts, so the noisy-feedback study trains with imperfect
  hints.

LocalSandbox is NOT isolated (see ``harness.sandbox``): model-written code runs as this user. Use Docker for
anything but the tiny CPU reproduction.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from harness.interfaces import EpisodeLimits
from harness.schema import Message, TaskInstance
from repro.config import ConfigError, RolloutCfg, TrainConfig
from repro.engine import HFEngine, RolloutEngine
from repro.lora import adapter_config
from repro.rollout import EnvFactory, EnvOutcome, StepOut, TurnChecker

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerFast

    from harness.runner_sandbox import TaskSandboxFactory

logger = logging.getLogger(__name__)


class HarnessEnv:
    """``RolloutEnv`` over ``harness.agent.AgentEnv`` + hidden-test grading (see the module docstring)."""

    def __init__(self, factory: TaskSandboxFactory, instance: TaskInstance, limits: EpisodeLimits, seed: int,
                 excluded_tests: Sequence[str] = ()) -> None:
        self.factory, self.instance, self.limits, self.seed = factory, instance, limits, seed
        self.excluded_tests = tuple(excluded_tests)  # validation's flaky tests, left out as in evaluation
        self.sandbox: Any = None
        self.env: Any = None
        self.head = ""
        self.infra_error: str | None = None

    def reset(self) -> list[Message]:
        from harness.agent import AgentEnv

        self.sandbox, self.head = self.factory.open(self.instance, role="agent", attempt=self.seed % 1000)
        self.env = AgentEnv(self.instance, self.sandbox, self.limits)
        return self.env.reset()

    def step(self, assistant_text: str) -> StepOut:
        from harness.sandbox import SandboxUnavailable

        try:
            res = self.env.step(assistant_text)
        except SandboxUnavailable as exc:
            self.infra_error = f"{exc.kind}: {exc}"
            return StepOut([], True)
        return StepOut(list(res.observations), bool(res.done))

    def outcome(self) -> EnvOutcome:
        violations = self.env.violations if self.env is not None else 0
        if self.infra_error:
            return EnvOutcome(False, infra_error=self.infra_error, protocol_violations=violations)
        try:
            grade = self._grade()
        except Exception as exc:  # noqa: BLE001 - classified as infra, never as a model failure
            from harness.grading import PatchTooLarge

            if isinstance(exc, PatchTooLarge):
                return EnvOutcome(False, protocol_violations=violations)
            logger.warning("%s: grading failed (%s); the group is dropped", self.instance.instance_id, exc)
            return EnvOutcome(False, infra_error=f"{type(exc).__name__}: {exc}", protocol_violations=violations)
        from harness.signals import grade_code_runs

        resolved = grade is not None and bool(grade.resolved)
        return EnvOutcome(resolved, code_runs=grade_code_runs(grade), protocol_violations=violations)

    def _grade(self) -> Any:
        """The hidden-test ``Grade`` of the agent's diff (None for an empty diff, never graded), graded exactly as
        evaluation grades (``harness.episode_grading``): the patch diffed on the host against the pristine base, a
        fresh sandbox, the validated exclusions, and an invalid grade settled by a gold control run. Raises
        ``EpisodeUnscorable`` (the group is dropped, as evaluation excludes the instance) when the gold patch does
        not resolve either."""
        from harness.episode_grading import candidate_patch, gold_control, grade_candidate, settle

        patch = candidate_patch(self.sandbox, self.head, self.instance, self.factory)
        attempt, timeout = self.seed % 1000, max(60.0, self.limits.per_exec_timeout_s * 4)
        excluded = self.excluded_tests
        grade = grade_candidate(self.factory, self.instance, patch, attempt=attempt, timeout_s=timeout,
                                excluded_tests=excluded)
        if grade is None:
            return None
        outcome = settle(grade, lambda: gold_control(self.factory, self.instance, attempt=attempt,
                                                     timeout_s=timeout, excluded_tests=excluded))
        if outcome is not None and outcome.failure_class == "invalid_instance":
            raise EpisodeUnscorable(outcome.error or "invalid instance")
        return grade

    def close(self) -> None:
        if self.sandbox is not None:
            self.sandbox.close()
            self.sandbox = None


class EpisodeUnscorable(RuntimeError):
    """The instance cannot be graded (its gold patch fails the hidden tests too): never a model failure."""


def default_engine(model: torch.nn.Module, pad_id: int, prefix_cache: int = 64,
                   dtype: torch.dtype | None = None) -> RolloutEngine:
    """``repro.sampler.KVSampler`` for dense Qwen3 models (KV-cached, shared-prompt prefill, prompt prefixes reused
    across turns until the weights change: ``repro.prefix_cache``; ``dtype`` None = the model's), ``repro.engine.HFEngine``
    otherwise."""
    from transformers import Qwen3ForCausalLM

    from repro.sampler import KVSampler

    if isinstance(model, Qwen3ForCausalLM):
        return KVSampler(model, prefix_cache=prefix_cache, dtype=dtype)
    return HFEngine(model, pad_id)


EngineFactory = Callable[[torch.nn.Module, int], RolloutEngine]  # (model, pad id) -> engine holding its weights


def engine_factory_for(cfg: TrainConfig) -> EngineFactory:
    """The engine ``rollout.engine`` chooses: :func:`default_engine` for ``hf_sampler``; for ``vllm`` one colocated
    ``vllm.LLM`` (``repro.vllm_engine.VLLMRollouts``, built on first use; the weights follow the model it is called
    with); for ``vllm_http`` ``repro.vllm_http.HttpRollouts`` (external ``vllm serve`` processes)."""
    kind = cfg.rollout.engine
    if kind == "hf_sampler":
        return default_engine
    if kind == "vllm":
        from repro.vllm_engine import VLLMRollouts, VLLMSettings

        return VLLMRollouts(VLLMSettings.from_config(cfg))
    from repro.vllm_http import HttpRollouts, HttpSettings, VLLMHttpError

    try:
        return HttpRollouts(HttpSettings.from_config(cfg))
    except VLLMHttpError as exc:
        raise ConfigError(str(exc)) from exc


def check_engine_choice(cfg: TrainConfig, factory: EngineFactory | None) -> None:
    """Refuses a setup built by hand (``factory``; None: :func:`default_setup` will build it) whose engine is not the
    one the configuration names (its config.toml says which engine sampled), and ``vllm_http`` without
    ``vllm_http.weights_dir``."""
    if cfg.rollout.engine == "vllm_http" and not cfg.vllm_http.weights_dir:
        engine_factory_for(cfg)  # raises the error that says what to set
    if factory is None:
        return
    from repro.vllm_engine import VLLMRollouts
    from repro.vllm_http import HttpRollouts

    kinds = {"vllm": VLLMRollouts, "vllm_http": HttpRollouts}
    got_kind = next((k for k, cls in kinds.items() if isinstance(factory, cls)), "hf_sampler")
    if got_kind != cfg.rollout.engine:
        got = getattr(factory, "__name__", type(factory).__name__)
        raise ConfigError(f"rollout.engine = {cfg.rollout.engine!r} but the RLSetup's engine_factory is {got}; "
                          "build the setup with engine_factory=repro.rl_setup.engine_factory_for(cfg)")


def hint_source(cfg: TrainConfig) -> Any:
    """(instance, turn, rng) -> hint text, for the configured feedback kind or mixture."""
    from harness.feedback import MixtureFeedback, ReminderFeedback

    checkers = (cfg.reward.checker,)
    g = cfg.guidance
    providers = {k: ReminderFeedback(k, checkers=checkers) for k in ("correct", "irrelevant", "wrong")}  # type: ignore[arg-type]
    mix = MixtureFeedback(dict(g.feedback_mix), checkers=checkers) if g.feedback == "mixture" else None

    def text(instance: TaskInstance, turn: int, rng: random.Random) -> str:
        kind = mix.draw(rng) if mix is not None else g.feedback
        if kind == "none":
            kind = "correct"
        return providers[kind].text(rng)

    return text


def load_model_and_tokenizer(cfg: TrainConfig, init: Path | str | None = None) -> tuple[Any, Any]:
    from repro.tokenizer import load_tokenizer

    src = init or cfg.model.init
    if src is not None:
        from transformers import AutoModelForCausalLM

        from repro.pretrain.ship import resolve_init
        from repro.sft_ship import is_sft_coder, verify_sft

        src = resolve_init(src)  # sft:<name> / base:<name>: a coder or base shipped in assets/
        if is_sft_coder(src):
            verify_sft(src)  # every file against its manifest's sha256, a clear error naming the file otherwise
        if not (Path(src) / "config.json").is_file():
            raise ConfigError(f"model.init = {src}: no config.json there; point it to a checkpoint directory "
                              "written by `tgsuite train` (HF save_pretrained layout with a tokenizer)")
        tok = load_tokenizer(src)
        model = AutoModelForCausalLM.from_pretrained(str(src), dtype=torch.float32)  # fp32 masters (repro.precision)
        return model, tok
    if cfg.model.tokenizer is None:
        raise ConfigError("model.init and model.tokenizer are both unset; set model.init to an SFT checkpoint "
                          "(`tgsuite train sft` writes one) or model.tokenizer to a tokenizer directory")
    if cfg.model.preset == "custom":
        raise ConfigError("model.preset = 'custom' needs model.init (a checkpoint directory)")
    from repro.models import build_model

    tok = load_tokenizer(cfg.model.tokenizer)
    model = build_model(cfg.model.preset, len(tok), seed=cfg.run.seed, pad_token_id=tok.pad_token_id,
                        eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"))
    return model, tok


def load_tasks(cfg: TrainConfig) -> Any:
    from harness.tasks import load_task_set

    if cfg.tasks.path is None:
        raise ConfigError("tasks.path is unset; make a task set with `tgsuite tasks make-mini --out DIR` and pass "
                          "--set tasks.path=DIR/train (or the split's folder)")
    ts = load_task_set(cfg.tasks.path)
    chosen = [t for t in ts.instances if t.split == cfg.tasks.split]
    if not chosen:
        splits = sorted({t.split for t in ts.instances})
        raise ConfigError(f"tasks.path = {cfg.tasks.path}: no task has split {cfg.tasks.split!r} (found {splits}); "
                          "set tasks.split")
    return ts.model_copy(update={"instances": chosen})


HintText = Callable[[TaskInstance, int, random.Random], str]


@dataclass
class RLSetup:
    tokenizer: PreTrainedTokenizerFast
    model: torch.nn.Module
    tasks: list[TaskInstance]
    make_env: EnvFactory
    checker: TurnChecker
    hint_text: HintText
    tools: list[dict[str, Any]] = field(default_factory=list)
    engine_factory: EngineFactory = default_engine  # (model, pad id) -> engine; engine_factory_for(cfg) chooses
    init_from: Path | None = None  # the checkpoint whose weights `model` holds (None: model.init or fresh)


def base_source(cfg: TrainConfig, init_override: Path | None) -> Path | None:
    """The checkpoint whose full weights the setup loads: ``init_override``, except a LoRA checkpoint of a LoRA run
    (it has ``adapter/``): then None — the base comes from the config (``model.init`` or the preset) and
    ``train_rl`` loads only the adapters onto it."""
    if cfg.model.lora.enabled and init_override is not None and adapter_config(init_override) is not None:
        return None
    return init_override


def episode_limits(r: RolloutCfg) -> EpisodeLimits:
    """The agent loop's limits for RL rollouts, from the ``rollout`` section (``repro.config.RolloutCfg``)."""
    return EpisodeLimits(max_turns=r.max_turns, finish_notice_turns=r.finish_notice_turns,
                         max_tokens=r.max_context_tokens, wall_s=max(600.0, r.max_turns * 60),
                         per_exec_timeout_s=r.per_exec_timeout_s, observation_cap_chars=r.observation_max_tokens * 4)


def default_setup(cfg: TrainConfig, *, init_override: Path | None = None) -> RLSetup:
    """Everything the RL loop needs, from the configuration and the harness."""
    from harness.agent import system_prompt  # noqa: F401 - imported to fail early if the harness is incomplete
    from harness.behaviour import get_checker, turn_verdicts
    from harness.runner_sandbox import TaskSandboxFactory
    from harness.tools import tool_schemas

    init_override = base_source(cfg, init_override)
    model, tok = load_model_and_tokenizer(cfg, init_override)
    task_set = load_tasks(cfg)
    factory = TaskSandboxFactory(task_set, kind=cfg.rollout.sandbox, run_id=f"train-{cfg.run.arm}-s{cfg.run.seed}")
    if cfg.rollout.sandbox == "docker":
        factory.preflight()
    limits = episode_limits(cfg.rollout)
    checker = get_checker(cfg.reward.checker)
    from harness.episode_grading import excluded_tests_of

    excluded = excluded_tests_of(task_set.path)

    def make_env(instance: TaskInstance, seed: int) -> HarnessEnv:
        return HarnessEnv(factory, instance, limits, seed, excluded.get(instance.instance_id, ()))

    def check(messages: list[Message]) -> list[str]:
        # each turn judged in the context of the earlier ones (ask_first@v1: an edit after an earlier ask passes)
        return list(turn_verdicts(checker, messages))

    return RLSetup(tokenizer=tok, model=model, tasks=list(task_set.instances), make_env=make_env, checker=check,
                   hint_text=hint_source(cfg), tools=tool_schemas(), engine_factory=engine_factory_for(cfg),
                   init_from=init_override)
