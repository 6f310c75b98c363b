"""Multi-turn RL rollouts against harness environments, token-in/token-out.

A group = one task × ``group_size`` rollouts, advanced in lock-step so each assistant turn of the group is one
batched sampling call. The context the policy sees is built from token ids only: the system/tools block and the
problem statement are encoded once (``ChatEncoder``), each sampled assistant body is appended **verbatim** (ids as
sampled, never decoded and re-encoded), each observation is encoded as its own block and appended. At the end the
trajectory is re-encoded from its messages with ``ChatEncoder.encode`` and asserted equal to the ids the policy
actually conditioned on (the extension property, SCALE §1.5), which also yields the per-token annotations (``act``,
``turn``, ``think``, ``hint``, behaviour log-probs) the trainer needs.

Per trajectory we keep: the ids and annotations, the assistant texts, per-turn verdicts of the behaviour checker,
reward components and their weighted terms (``repro.rewards``, METHOD §6.1), the policy version that sampled it, and the harness ``Trajectory`` for logging.

What is NOT covered here: grading runs inside the environment object (``RolloutEnv.outcome``); with LocalSandbox
it is not isolated (see ``harness.sandbox``).
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import torch

from harness.schema import Message, TaskInstance
from harness.signals import episode_signals
from harness.tools import parse_tool_calls
from repro.compute import ComputeLedger, forward_flops
from repro.engine import FinishReason, RolloutEngine, TokenRequest, TokenResult
from repro.guidance import Verdict, anchor_token, behaviour_anchor
from repro.rewards import contributions, reward_components
from repro.tokenizer import EncodedConversation

if TYPE_CHECKING:
    from repro.config import RewardCfg
    from repro.tokenizer import ConversationEncoder, TokenDecoder

logger = logging.getLogger(__name__)
_T = TypeVar("_T")
_R = TypeVar("_R")


# ----------------------------------------------------------------------------------------------------------------
# Interfaces the rollout needs (adapters for the harness live in repro.envs)
# ----------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EnvOutcome:
    """What the environment graded at the end of an episode (reward inputs, METHOD §6.1). The counted signals
    (edits, rework, tool errors, invalid calls) are read from the trajectory's messages (``harness.signals``)."""

    resolved: bool
    code_runs: bool | None = None  # harness.signals.grade_code_runs of the hidden-test grade; None = unknown
    protocol_violations: int = 0
    infra_error: str | None = None


@dataclass(frozen=True)
class StepOut:
    observations: list[Message]
    done: bool


class RolloutEnv(Protocol):
    """One episode: ``reset`` gives the opening messages (system + user), ``step`` takes one assistant turn."""

    def reset(self) -> list[Message]: ...

    def step(self, assistant_text: str) -> StepOut: ...

    def outcome(self) -> EnvOutcome: ...

    def close(self) -> None: ...


EnvFactory = Callable[[TaskInstance, int], RolloutEnv]  # (instance, episode seed) -> env
TurnChecker = Callable[[list[Message]], list[Verdict]]  # assistant messages -> per-turn verdicts
HintSource = Callable[[TaskInstance, int, random.Random], str | None]  # (instance, turn, rng) -> hint text


# ----------------------------------------------------------------------------------------------------------------
# Data
# ----------------------------------------------------------------------------------------------------------------


@dataclass
class RolloutSample:
    """One trajectory as the trainer sees it: its ids with their per-token annotations (``encoded``), the turns'
    texts and verdicts, the outcome and the reward."""

    item: int  # index of the task in the task stream (group id)
    index: int  # rollout index within the group
    instance_id: str
    encoded: EncodedConversation  # the ids the policy conditioned on, re-encoded; unknown behaviour log-probs are 0.0
    texts: list[str]  # assistant turn texts
    verdicts: list[Verdict]
    truncated_turns: list[bool]
    outcome: EnvOutcome
    version: int = 0  # the oldest policy version among the turns' engine stamps (the engine's when no turn ran)
    turn_versions: list[int] = field(default_factory=list)  # TokenResult.version of each assistant turn
    finish_reasons: list[FinishReason] = field(default_factory=list)  # TokenResult.finish_reason of each turn
    rewards: dict[str, float] = field(default_factory=dict)  # R_k per term (repro.rewards.reward_components)
    reward: float = 0.0
    reward_terms: dict[str, float] = field(default_factory=dict)  # sign_k · w_k · R_k per term (sums to reward)
    messages: list[Message] = field(default_factory=list)
    hint_turns: list[int] = field(default_factory=list)
    anchors: list[int] = field(default_factory=list)  # per turn: position in ids of the behaviour's first token, -1

    @property
    def n_turns(self) -> int:
        return len(self.texts)

    @property
    def truncated(self) -> bool:
        return any(self.truncated_turns)


# ----------------------------------------------------------------------------------------------------------------
# The rollout
# ----------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RolloutSettings:
    group_size: int
    max_turns: int
    max_new_tokens: int
    max_context_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    hint_in_rollout: bool = False
    env_workers: int = 1  # episodes whose tool calls / grading run at once (1 = one after another)


def group_seed(run_seed: int, item: int, index: int) -> int:
    """Sampling seed of rollout ``index`` of item ``item`` — independent of threads and of resume points."""
    return (run_seed * 1_000_003 + item * 10_007 + index * 101 + 17) % (2**63 - 1)


@dataclass
class _Live:
    env: RolloutEnv
    ctx: list[int]
    messages: list[Message]
    instance: TaskInstance
    item: int
    index: int
    texts: list[str] = field(default_factory=list)
    truncated: list[bool] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    reasons: list[FinishReason] = field(default_factory=list)
    hint_turns: list[int] = field(default_factory=list)
    done: bool = False


def _opening(encoder: ConversationEncoder, messages: list[Message], tools: list[dict[str, Any]]) -> list[int]:
    system = messages[0].content if messages and messages[0].role == "system" else None
    ids = encoder.system_ids(system, tools)
    for m in messages[1 if system is not None else 0:]:
        ids += encoder.message_ids(m.role, m.content)
    return ids


def _observation_ids(encoder: ConversationEncoder, observations: list[Message]) -> list[int]:
    ids: list[int] = []
    i = 0
    while i < len(observations):
        if observations[i].role == "tool":
            j = i
            while j < len(observations) and observations[j].role == "tool":
                j += 1
            ids += encoder.tool_responses_ids([o.content for o in observations[i:j]])
            i = j
        else:
            ids += encoder.message_ids(observations[i].role, observations[i].content)
            i += 1
    return ids


def run_groups(
    *,
    instances: Sequence[TaskInstance],
    items: Sequence[int],
    make_env: EnvFactory,
    engine: RolloutEngine,
    encoder: ConversationEncoder,
    tokenizer: TokenDecoder,
    tools: list[dict[str, Any]],
    checker: TurnChecker,
    settings: RolloutSettings,
    run_seed: int,
    reward_weights: RewardCfg,
    hint_source: HintSource | None = None,
    ledger: ComputeLedger | None = None,
    flop_params: int = 0,
) -> list[list[RolloutSample]]:
    """Run ``group_size`` episodes of each instance; return one list of scored :class:`RolloutSample` per group.
    Each sample carries its turns' finish reasons and the engine's version stamps (the caller sets the version with
    ``engine.set_version``).

    All episodes advance in lock-step, each turn of the whole batch ONE ``engine.generate`` call; the turn's tool
    calls then run on ``settings.env_workers`` threads, and an ended episode is graded while the others sample. One
    sampling generator, seeded from (run seed, first item), so the same batch of items gives the same samples.
    (Episodes on their own threads with their turns batched as they arrive were tried and measured no faster on
    2 cores: benchmarks/README.md, RL step.)"""
    ledger = ledger or ComputeLedger()
    n = settings.group_size
    slots = [(inst, item, j) for inst, item in zip(instances, items, strict=True) for j in range(n)]
    with EnvPool(settings.env_workers) as pool:
        with ledger.phase("environment"):
            envs = [make_env(inst, group_seed(run_seed, item, j)) for inst, item, j in slots]
            openings = pool.map(lambda env: env.reset(), envs)
        live = [_Live(env=env, ctx=_opening(encoder, opening, tools), messages=list(opening), instance=inst,
                      item=item, index=j) for env, opening, (inst, item, j) in zip(envs, openings, slots, strict=True)]
    with EnvPool(settings.env_workers) as pool:
        gen = torch.Generator().manual_seed(group_seed(run_seed, items[0], 0))
        hint_rng = random.Random(group_seed(run_seed, items[0], n + 1))
        outcomes: dict[int, Future[EnvOutcome]] = {}
        for turn in range(settings.max_turns):
            active = [lv for lv in live if not lv.done]
            if settings.hint_in_rollout and hint_source is not None:
                _insert_hints(active, turn, hint_source, hint_rng, encoder)
            active, budget = _within_budget(active, settings, encoder, turn)
            _grade_finished(live, outcomes, pool)
            if not active:
                break
            reqs = [TokenRequest(lv.ctx + encoder.assistant_header, min(settings.max_new_tokens, b),
                                 (encoder.im_end,), settings.temperature, settings.top_p)
                    for lv, b in zip(active, budget, strict=True)]
            with ledger.phase("rollout"):
                outs = engine.generate(reqs, generator=gen)
            n_new = sum(len(o.ids) for o in outs)
            ledger.add("rollout", tokens=n_new, flops=forward_flops(flop_params, n_new))
            for lv, res in zip(active, outs, strict=True):
                _record_turn(lv, res, turn, encoder, tokenizer)
            with ledger.phase("environment"):  # the turn's tool calls, all episodes at once
                steps = pool.map(lambda lv: lv.env.step(lv.texts[-1]), active)
            for lv, out in zip(active, steps, strict=True):
                _observe(lv, out, encoder)
        _grade_finished(live, outcomes, pool, final=True)
        with ledger.phase("environment"):  # what grading is left once sampling is over
            graded = [outcomes[i].result() for i in range(len(live))]
    return _scored(live, graded, instances, items, engine, encoder, tokenizer, tools, checker, reward_weights)


def _scored(live: list[_Live], graded: list[EnvOutcome], instances: Sequence[TaskInstance], items: Sequence[int],
            engine: RolloutEngine, encoder: ConversationEncoder, tokenizer: TokenDecoder, tools: list[dict[str, Any]],
            checker: TurnChecker, reward_weights: RewardCfg) -> list[list[RolloutSample]]:
    groups: list[list[RolloutSample]] = [[] for _ in instances]
    idle_version = engine.current_version()
    for lv, outcome in zip(live, graded, strict=True):
        gi = items.index(lv.item)
        groups[gi].append(_finish(lv, outcome, idle_version, encoder, tokenizer, tools, checker, reward_weights))
    return groups


class EnvPool:
    """Runs the environments' work (tool calls, grading) of a batch's episodes on ``workers`` threads, results in
    submission order; with one worker everything runs inline, one episode after another. The episodes' sandboxes
    are independent, so the results do not depend on the worker count (tests/repro/test_rollout.py)."""

    def __init__(self, workers: int) -> None:
        if workers < 1:
            raise ValueError(f"rollout.env_workers = {workers}: use 1 (one episode after another) or more")
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="rollout-env") if workers > 1 else None

    def map(self, fn: Callable[[_T], _R], items: Sequence[_T]) -> list[_R]:
        if self._pool is None:
            return [fn(x) for x in items]
        return list(self._pool.map(fn, items))

    def submit(self, fn: Callable[[], _R]) -> Future[_R]:
        if self._pool is not None:
            return self._pool.submit(fn)
        fut: Future[_R] = Future()
        try:
            fut.set_result(fn())
        except BaseException as exc:  # noqa: BLE001 - re-raised by result(), as a pooled call would
            fut.set_exception(exc)
        return fut

    def __enter__(self) -> EnvPool:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=False)


def _grade_finished(live: list[_Live], outcomes: dict[int, Future[EnvOutcome]], pool: EnvPool,
                    final: bool = False) -> None:
    """Start grading every episode that has ended (with more than one worker it runs while the others still
    sample); ``final``: every episode has ended."""
    for i, lv in enumerate(live):
        if i not in outcomes and (lv.done or final):
            outcomes[i] = pool.submit(partial(_outcome_and_close, lv.env))


def _outcome_and_close(env: RolloutEnv) -> EnvOutcome:
    try:
        return env.outcome()
    finally:
        env.close()


def _insert_hints(active: list[_Live], turn: int, hint_source: HintSource, rng: random.Random,
                  encoder: ConversationEncoder) -> None:
    for lv in active:
        text = hint_source(lv.instance, turn, rng)
        if text:
            lv.messages.append(Message(role="user", content=text, turn=turn, is_hint=True))
            lv.ctx += encoder.hint_ids(text)
            lv.hint_turns.append(turn)


def _within_budget(active: list[_Live], settings: RolloutSettings, encoder: ConversationEncoder,
                   turn: int) -> tuple[list[_Live], list[int]]:
    """Episodes that still have room for at least one new token (others end here) and their token budgets."""
    keep, budgets = [], []
    for lv in active:
        b = settings.max_context_tokens - len(lv.ctx) - len(encoder.assistant_header) - 1
        if b >= 1:
            keep.append(lv)
            budgets.append(b)
            continue
        lv.done = True
        if turn == 0:
            logger.warning("%s: the opening prompt (%d tokens) fills rollout.max_context_tokens; no turn was "
                           "sampled — raise max_context_tokens", lv.instance.instance_id, len(lv.ctx))
    return keep, budgets


def _record_turn(lv: _Live, res: TokenResult, turn: int, encoder: ConversationEncoder,
                 tokenizer: TokenDecoder) -> None:
    """Append one sampled assistant turn to the episode (its text, message and ids, verbatim)."""
    ids, lps = res.ids, res.logprobs
    finished = res.finish_reason == "stop"
    if finished != (bool(ids) and ids[-1] == encoder.im_end):
        raise AssertionError(f"engine finish_reason={res.finish_reason!r} disagrees with the sampled ids (last id "
                             f"{ids[-1] if ids else None}, stop id {encoder.im_end}); the engine must stop on "
                             "TokenRequest.stop_ids")
    lv.versions.append(res.version)
    lv.reasons.append(res.finish_reason)
    body = ids if finished else ids + [encoder.im_end]
    text = _decode(tokenizer, ids[:-1] if finished else ids)
    lv.texts.append(text)
    lv.truncated.append(not finished)
    lv.messages.append(Message(role="assistant", content=text, turn=turn, token_ids=list(ids),
                               logprobs=[float(x) for x in lps], truncated=not finished,
                               tool_calls=parse_tool_calls(text), finish_reason=res.finish_reason,
                               policy_version=res.version))
    lv.ctx += encoder.assistant_header + body + encoder.newline


def _decode(tokenizer: TokenDecoder, ids: list[int]) -> str:
    """The text of ``ids`` with special tokens kept (a list of ids decodes to one string)."""
    text = tokenizer.decode(ids, skip_special_tokens=False)
    assert isinstance(text, str)
    return text


def _observe(lv: _Live, out: StepOut, encoder: ConversationEncoder) -> None:
    """The environment's answer to the turn: the episode ends, or its observations join the context."""
    if out.done:
        lv.done = True
        return
    lv.messages.extend(out.observations)
    lv.ctx += _observation_ids(encoder, out.observations)


def _finish(lv: _Live, outcome: EnvOutcome, idle_version: int, encoder: ConversationEncoder,
            tokenizer: TokenDecoder, tools: list[dict[str, Any]], checker: TurnChecker,
            weights: RewardCfg) -> RolloutSample:
    instance, item, j = lv.instance, lv.item, lv.index
    enc = encoder.encode(lv.messages, tools=tools)
    if enc.ids != lv.ctx:
        n = next((i for i, (a, b) in enumerate(zip(enc.ids, lv.ctx, strict=False)) if a != b),
                 min(len(enc.ids), len(lv.ctx)))
        raise AssertionError(f"token-in/token-out broken for {instance.instance_id} rollout {j}: re-encoded ids "
                             f"differ from the sampled context at position {n}; the chat encoder and the rollout "
                             "must build identical blocks")
    verdicts = list(checker([m for m in lv.messages if m.role == "assistant"])) if lv.texts else []
    if len(verdicts) != len(lv.texts):
        raise ValueError(f"checker returned {len(verdicts)} verdicts for {len(lv.texts)} assistant turns")
    signals = episode_signals(lv.messages, resolved=outcome.resolved, code_runs=outcome.code_runs)
    comps = reward_components(signals, verdicts, weights)
    terms = contributions(comps, weights)
    lps = [x if not math.isnan(x) else 0.0 for x in enc.logprobs]
    return RolloutSample(
        item=item, index=j, instance_id=instance.instance_id, encoded=replace(enc, logprobs=lps), texts=lv.texts,
        verdicts=verdicts, truncated_turns=lv.truncated, outcome=outcome,
        version=min(lv.versions, default=idle_version), turn_versions=lv.versions, finish_reasons=lv.reasons,
        rewards=comps, reward=sum(terms.values()), reward_terms=terms, messages=lv.messages, hint_turns=lv.hint_turns,
        anchors=_anchors(lv, enc.turn, enc.act, tokenizer),
    )


def _anchors(lv: _Live, turn_of: list[int], act: list[int], tokenizer: TokenDecoder) -> list[int]:
    """Per assistant turn, the position in the trajectory's ids of the behaviour's first token
    (``repro.guidance.behaviour_anchor``), or -1 when the turn's text ends before it."""
    positions: dict[int, list[int]] = {}
    for t, (k, a) in enumerate(zip(turn_of, act, strict=True)):
        if a and k >= 0:
            positions.setdefault(k, []).append(t)
    turns = [m for m in lv.messages if m.role == "assistant"]
    out = []
    for k, (m, text) in enumerate(zip(turns, lv.texts, strict=True)):
        ids = m.token_ids or []
        body = ids[:-1] if m.finish_reason == "stop" else ids
        i = anchor_token(body, behaviour_anchor(text), lambda x: _decode(tokenizer, list(x)))
        out.append(-1 if i is None or i >= len(positions.get(k, [])) else positions[k][i])
    return out
