"""One optimisation batch: masks, advantages, teacher views, micro-batches, and the loss root module.

``build_batch`` turns groups of scored rollouts into per-trajectory tensors (METHOD §6.2 masks, §6.3 teacher views,
§6.4 advantages) and global token counts. ``LossRoot`` is the ONE ``nn.Module`` whose ``forward`` computes the whole
loss of a micro-batch — teacher forward (no grad), student forward, chunked log-probs, clipped surrogate, chunked
full-vocabulary KL — so that FSDP2 can wrap it as the root (SCALE §2.5: calling inner modules from outside the root's
forward breaks under FSDP2). Normalisation uses the global counts passed in, so micro-batch losses sum to the batch
token-means and the same code serves DDP/FSDP ranks (each passes the all-reduced counts).

The hint splice (METHOD §6.3) is ``repro.guidance.plan_guidance``: token-id level, hint blocks before each failing
turn's assistant header, cut after the last failing turn, position map asserted for every KL token.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, get_args

import torch
from torch import nn

from repro.compute import device_clock
from repro.guidance import TeacherContext, guidance_variant, guided_turns, plan_guidance
from repro.losses import (
    chunked_kl_loss,
    chunked_token_logprobs,
    clipped_surrogate,
    group_advantages,
    kl_from_logits,
    sampled_token_kl_advantage,
)
from repro.packing import packed_attention, packed_forward
from repro.rollout import RolloutSample
from repro.teacher import build_teacher, teacher_context, update_teacher_

if TYPE_CHECKING:
    from repro.config import TrainConfig


@dataclass
class TeacherView:
    ids: list[int]
    student_pos: list[int]  # KL token positions in the student sequence
    teacher_pos: list[int]  # the same tokens' positions in ids
    leak_student_pos: list[int] = field(default_factory=list)  # PASS-turn tokens inside the view (leakage check)
    leak_teacher_pos: list[int] = field(default_factory=list)


@dataclass
class TrajBatch:
    ids: list[int]
    act_pos: list[int]
    y: list[int]
    mu: list[float]
    adv: float
    m_pg: list[float]  # over act_pos
    m_kl: list[float]  # over act_pos
    views: list[TeacherView] = field(default_factory=list)
    anchor_pos: set[int] = field(default_factory=set)  # KL positions that are a guided turn's behaviour's first token


@dataclass
class BatchPlan:
    trajs: list[TrajBatch]
    n_pg: float
    n_kl: float
    stats: dict[str, Any]


def build_batch(
    groups: Sequence[Sequence[RolloutSample]],
    cfg: TrainConfig,
    hint_ids: Callable[[RolloutSample, int], list[int]],
) -> BatchPlan:
    """Masks, advantages and teacher views for a batch of groups."""
    gr, guid = cfg.grpo, cfg.guidance
    rewards = torch.tensor([[s.reward for s in grp] for grp in groups], dtype=torch.float64)
    adv = group_advantages(rewards, scale=gr.scale_rewards).tolist()
    use_kl = guid.lam > 0
    trajs: list[TrajBatch] = []
    n_fail_turns = n_applicable = n_zero_var = n_dropped_groups = n_turns = n_guided = 0
    variant = guidance_variant(guid)
    n_infra = 0
    for gi, grp in enumerate(groups):
        if any(s.outcome.infra_error for s in grp):
            n_infra += 1  # infrastructure failures are never scored as model failures: the group is dropped
            continue
        zero_var = float(rewards[gi].max() - rewards[gi].min()) == 0.0
        n_zero_var += zero_var
        built = [_one(s, adv[gi][j], cfg, hint_ids, use_kl) for j, s in enumerate(grp)]
        has_kl = any(sum(t.m_kl) > 0 for t in built)
        if zero_var and (gr.keep_zero_variance_groups == "never" or
                         (gr.keep_zero_variance_groups == "if_kl" and not has_kl)):
            n_dropped_groups += 1
            continue
        trajs += built
        for s in grp:
            n_fail_turns += sum(v == "FAIL" for v in s.verdicts)
            n_applicable += sum(v != "NA" for v in s.verdicts)
            n_turns += len(s.verdicts)
            n_guided += len(guided_turns(s.verdicts, variant))
    n_pg = sum(sum(t.m_pg) for t in trajs)
    n_kl = sum(sum(t.m_kl) for t in trajs)
    stats = {
        "guidance/failing_turn_frac": (n_fail_turns / n_applicable) if n_applicable else None,
        # the gate's share of guided turns: turns given a hint (and KL when lam > 0) / assistant turns in the batch
        "guidance/guided_turn_frac": (n_guided / n_turns) if n_turns else None,
        "guidance/kl_tokens": n_kl,
        "pg/tokens": n_pg,
        "grpo/zero_variance_group_frac": n_zero_var / max(1, len(groups)),
        "grpo/dropped_zero_variance_groups": n_dropped_groups,
        "rollout/infra_dropped_groups": n_infra,
    }
    return BatchPlan(trajs, float(n_pg), float(n_kl), stats)


def _one(s: RolloutSample, adv: float, cfg: TrainConfig, hint_ids: Callable[[RolloutSample, int], list[int]],
         use_kl: bool) -> TrajBatch:
    guid, enc = cfg.guidance, s.encoded
    act_pos = [t for t, a in enumerate(enc.act) if a]
    pg_on = 0.0 if (cfg.grpo.mask_truncated and s.truncated) else 1.0
    tb = TrajBatch(ids=list(enc.ids), act_pos=act_pos, y=[enc.ids[t] for t in act_pos],
                   mu=[enc.logprobs[t] for t in act_pos], adv=adv, m_pg=[pg_on] * len(act_pos),
                   m_kl=[0.0] * len(act_pos))
    if not use_kl or not s.texts:
        return tb
    variant = guidance_variant(guid)
    guided = guided_turns(s.verdicts, variant)
    hints = {k: hint_ids(s, k) for k in guided}
    plan = plan_guidance(enc, s.verdicts, hints, variant=variant, include_thinking=guid.include_thinking)
    tb.m_kl = [float(plan.m_kl[t]) for t in act_pos]
    tb.views = [TeacherView(c.ids, c.kl_positions, c.teacher_positions) for c in plan.contexts]
    tb.anchor_pos = {s.anchors[k] for k in guided if k < len(s.anchors) and s.anchors[k] >= 0
                     and plan.m_kl[s.anchors[k]]}
    if tb.views and variant != "all_turns":
        _leak_positions(s, plan.contexts[0], tb.views[0])
    return tb


def _leak_positions(s: RolloutSample, ctx: TeacherContext, view: TeacherView) -> None:
    """Map the generated tokens of PASS turns that lie inside the teacher view (before its cut), for the
    teacher-vs-student KL on passing turns (METHOD §6.11 leakage check). Only turns before the last guided turn
    are inside a view, so this covers those."""
    enc = s.encoded
    inserts = [(enc.header_starts[k], e - b) for k, (b, e) in zip(ctx.turns, ctx.hint_spans, strict=True)]
    cut = len(ctx.ids) - sum(n for _, n in inserts)
    for t, a in enumerate(enc.act):
        if not a or t >= cut or enc.turn[t] < 0 or s.verdicts[enc.turn[t]] != "PASS":
            continue
        mt = t + sum(n for h, n in inserts if h <= t)
        if ctx.ids[mt] == enc.ids[t]:
            view.leak_student_pos.append(t)
            view.leak_teacher_pos.append(mt)


# ----------------------------------------------------------------------------------------------------------------
# Micro-batch tensors and the loss root
# ----------------------------------------------------------------------------------------------------------------


@dataclass
class Seqs:
    """One side of a micro-batch (the student's trajectories, or the teacher's hint-spliced views) as model input.

    Packed (``padding_free``, the default): all sequences in one row ``ids [1, N]`` with ``positions [1, N]``
    restarting at 0 per sequence and the boundaries ``cu_seqlens``; the forward runs with attention inside each
    sequence only (``repro.packing.packed_forward``). Padded: ``ids [B, T]`` right-padded with ``mask [B, T]``.
    Either way the hidden states are read flat (``[B·T or N, d]``): token ``t`` of sequence ``b`` is row
    ``starts[b] + t`` (:meth:`row`)."""

    ids: torch.Tensor
    mask: torch.Tensor | None  # [B, T] attention mask when padded; None when packed
    positions: torch.Tensor | None  # [1, N] position ids when packed; None when padded
    cu_seqlens: tuple[int, ...] | None  # sequence boundaries 0..N when packed
    starts: list[int]  # flat row of each sequence's first token
    n_tokens: int  # real (non-pad) tokens

    @property
    def packed(self) -> bool:
        return self.cu_seqlens is not None

    def row(self, seq: int, pos: int) -> int:
        return self.starts[seq] + pos

    def first_token(self) -> Seqs:
        """A padded one-token :class:`Seqs` of the first token, on this side's device (built by slicing, never
        from Python lists: the collective teacher's placeholder forward must run where the model is)."""
        ids = self.ids[:1, :1]
        return Seqs(ids, torch.ones_like(ids), None, None, [0], 1)

    def to(self, device: torch.device | str) -> Seqs:
        move = lambda t: None if t is None else t.to(device)  # noqa: E731
        return Seqs(self.ids.to(device), move(self.mask), move(self.positions), self.cu_seqlens, self.starts,
                    self.n_tokens)


def make_seqs(seqs: Sequence[Sequence[int]], pad_id: int, *, packed: bool) -> Seqs:
    """``seqs`` as a :class:`Seqs` (see there): one packed row, or a right-padded ``[B, T]`` block."""
    lens = [len(x) for x in seqs]
    if packed:
        ids = torch.tensor([t for x in seqs for t in x], dtype=torch.long)[None]
        positions = torch.tensor([p for n in lens for p in range(n)], dtype=torch.long)[None]
        cu = [0]
        for n in lens:
            cu.append(cu[-1] + n)
        return Seqs(ids, None, positions, tuple(cu), cu[:-1], sum(lens))
    ids, mask = _pad(list(seqs), pad_id)
    width = ids.shape[1]
    return Seqs(ids, mask, None, None, [b * width for b in range(len(seqs))], sum(lens))


@dataclass
class MicroBatch:
    """The tensors of one micro-batch. Rows are indices into the flat hidden states of :class:`Seqs`; the hidden
    state at row ``r`` predicts the next token, so an action token at position ``t`` is read at row of ``t − 1``.
    R = action tokens of the micro-batch, K = its KL tokens (a subset of R), P = PASS-turn tokens inside a teacher
    view (the leakage check)."""

    student: Seqs  # the B trajectories: ids [1, N] packed or [B, T] padded (see Seqs)
    teacher: Seqs | None  # the V hint-spliced views, laid out the same way; None when no trajectory has a guided turn
    act_rows: torch.Tensor  # [R] student row predicting each action token
    y: torch.Tensor  # [R] the action tokens
    mu: torch.Tensor  # [R] their behaviour log-probs
    adv: torch.Tensor  # [R] their trajectory's advantage
    m_pg: torch.Tensor  # [R] 1 where the token is in the policy-gradient term
    kl_idx: torch.Tensor  # [K] which action tokens are KL tokens (indices into R)
    kl_teacher_rows: torch.Tensor  # [K] teacher row predicting each KL token
    leak_student_rows: torch.Tensor  # [P] student row predicting a PASS-turn token inside a view
    leak_teacher_rows: torch.Tensor  # [P] the teacher row predicting the same token
    anchor_kl: torch.Tensor  # [A] which KL tokens are a guided turn's behaviour's first token (indices into K)

    @property
    def n_tokens(self) -> int:
        return self.student.n_tokens

    @property
    def n_teacher_tokens(self) -> int:
        return 0 if self.teacher is None else self.teacher.n_tokens

    def to(self, device: torch.device | str) -> MicroBatch:
        moved = {k: (v.to(device) if isinstance(v, (torch.Tensor, Seqs)) else v) for k, v in self.__dict__.items()}
        return MicroBatch(**moved)


def _pad(seqs: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor(s, dtype=torch.long)
        mask[i, : len(s)] = 1
    return ids, mask


def collate(trajs: Sequence[TrajBatch], pad_id: int, *, padding_free: bool = True) -> MicroBatch:
    """The micro-batch of ``trajs``: packed (``padding_free``, no attention across sequences, no pad tokens) or
    right-padded; the losses are the same either way up to float rounding (tests/repro/test_train_step.py)."""
    views = [v for t in trajs for v in t.views]
    student = make_seqs([t.ids for t in trajs], pad_id, packed=padding_free)
    teacher = make_seqs([v.ids for v in views], pad_id, packed=padding_free) if views else None
    act_rows, y, mu, adv, m_pg, kl_idx, kl_t, leak_s, leak_t, anchors = ([] for _ in range(10))
    vi = 0
    for b, t in enumerate(trajs):
        index_of = {p: len(act_rows) + i for i, p in enumerate(t.act_pos)}
        act_rows += [student.row(b, p - 1) for p in t.act_pos]
        y += t.y
        mu += t.mu
        adv += [t.adv] * len(t.act_pos)
        m_pg += t.m_pg
        for view in t.views:
            assert teacher is not None
            anchors += [len(kl_idx) + i for i, p in enumerate(view.student_pos) if p in t.anchor_pos]
            kl_idx += [index_of[p] for p in view.student_pos]
            kl_t += [teacher.row(vi, p - 1) for p in view.teacher_pos]
            leak_s += [student.row(b, p - 1) for p in view.leak_student_pos]
            leak_t += [teacher.row(vi, p - 1) for p in view.leak_teacher_pos]
            vi += 1
    lt = lambda x: torch.tensor(x, dtype=torch.long)  # noqa: E731
    ft = lambda x: torch.tensor(x, dtype=torch.float32)  # noqa: E731
    return MicroBatch(student, teacher, lt(act_rows), lt(y), ft(mu), ft(adv), ft(m_pg), lt(kl_idx), lt(kl_t),
                      lt(leak_s), lt(leak_t), lt(anchors))


KLEstimator = Literal["full_vocab", "sampled_token"]


class LossTerms(NamedTuple):
    """What ``LossRoot.forward`` returns beside the total loss: the two loss terms (None when absent; kept as
    tensors for the optional per-term backward, ``run.log_grad_split``), the teacher forward's wall time and the
    micro-batch's statistics (the inputs of :func:`reduce_stats`). A NamedTuple, so FSDP2 sees its tensors."""

    pg: torch.Tensor | None
    kl: torch.Tensor | None
    teacher_s: float
    stats: dict[str, Any]


class LossRoot(nn.Module):
    """L = pg_weight·L_GRPO + λ·L_KL for one micro-batch (METHOD §6.6), computed inside ``forward``.

    ``n_pg`` / ``n_kl`` are the GLOBAL token counts of the whole optimisation batch (all micro-batches, all ranks),
    so summing the micro-batch losses gives the batch token-means. Under FSDP2/DDP each rank passes the all-reduced
    counts, multiplies the loss by the world size (to cancel the gradient averaging) and sets
    ``collective_teacher = True`` (tests/repro/test_train_fsdp.py runs this under torchrun with 2 gloo ranks).

    Teacher weights (``guidance.teacher``, :mod:`repro.teacher`): ``"live"`` runs ``lm`` itself under no_grad;
    ``"fixed"`` / ``"ema"`` hold a frozen copy ``teacher_lm`` (a submodule, ``requires_grad=False``; only when λ > 0)
    that runs the same hint-spliced teacher views with its own lm_head. With LoRA adapters (``repro.lora``) there is
    no copy: ``"fixed"`` runs ``lm`` with its adapters off (the base, θ_0) and ``"ema"`` is refused. Call :meth:`after_optimizer_step` after every
    optimizer step (the EMA update). Build the optimizer on ``lm.parameters()``, never on this module's. Under FSDP2
    build the root before ``fully_shard`` (the copy is a deepcopy of the unsharded model), then shard the student's
    and the teacher's layers, then the root (tests/repro/test_train_fsdp.py).
    """

    def __init__(self, lm: nn.Module, cfg: TrainConfig) -> None:
        super().__init__()
        self.lm = lm
        self.teacher_lm = build_teacher(lm, cfg.guidance.teacher) if cfg.guidance.lam > 0 else None
        self.g = cfg.guidance
        self.gr = cfg.grpo
        self.chunk = cfg.guidance.chunk_size
        self.collective_teacher = False  # set True when wrapped by FSDP/DDP (see forward)
        self.temperature = cfg.rollout.temperature  # PG log-probs use logits / T, like TRL; the KL stays at T = 1
        if cfg.guidance.estimator not in get_args(KLEstimator):
            raise ValueError(f"guidance.estimator = {cfg.guidance.estimator!r}: use one of {get_args(KLEstimator)}")
        self.estimator: KLEstimator = cfg.guidance.estimator  # chosen once, here

    def _hidden(self, seqs: Seqs, lm: nn.Module | None = None) -> torch.Tensor:
        """Final-norm hidden states of ``seqs`` under ``lm`` (default: the student), flat ``[rows, d]``."""
        lm = self.lm if lm is None else lm
        if not seqs.packed:
            h = lm.model(input_ids=seqs.ids, attention_mask=seqs.mask, use_cache=False).last_hidden_state
            return h.reshape(-1, h.shape[-1])
        assert seqs.positions is not None and seqs.cu_seqlens is not None
        return packed_forward(lm, seqs.ids, seqs.positions, seqs.cu_seqlens)[0]

    def student_attention(self, mb: MicroBatch) -> contextlib.AbstractContextManager[None]:
        """The attention layout of ``mb``'s student sequences, for the forward AND the backward: with activation
        checkpointing (``model.activation_checkpointing``) the backward recomputes the layers' forwards, which must
        see the same packed documents (``repro.train.optimizer_step`` runs both inside it)."""
        if not mb.student.packed:
            return contextlib.nullcontext()
        return packed_attention(self.lm)

    def _teacher_hidden(self, seqs: Seqs) -> torch.Tensor:
        if self.teacher_lm is None:  # the student's own weights; a LoRA model's fixed teacher: its adapters off
            with teacher_context(self.lm, self.g.teacher):
                return self._hidden(seqs)
        return self._hidden(seqs, self.teacher_lm)

    def after_optimizer_step(self) -> None:
        """The teacher's per-step update (EMA for ``teacher = "ema"``; nothing for live / fixed)."""
        update_teacher_(self.teacher_lm, self.lm, self.g.teacher, self.g.teacher_ema_rate)

    def forward(self, mb: MicroBatch, n_pg: float, n_kl: float) -> tuple[torch.Tensor, LossTerms]:
        g = self.g
        weight = self.lm.get_output_embeddings().weight
        t_weight = None if self.teacher_lm is None else self.teacher_lm.get_output_embeddings().weight
        need_teacher = g.lam > 0 and mb.teacher is not None and mb.kl_idx.numel() > 0
        ht = None
        t0 = device_clock(mb.student.ids.device)  # synchronised: on a GPU the teacher's kernels run asynchronously
        ht_full = None
        if need_teacher:
            assert mb.teacher is not None
            with torch.no_grad():
                ht_full = self._teacher_hidden(mb.teacher).detach()
                ht = ht_full[mb.kl_teacher_rows]
        elif g.lam > 0 and n_kl > 0 and self.collective_teacher:
            # under FSDP every rank must run the same module calls: a rank without KL rows still runs a
            # (one-token) teacher forward so the layers' all-gathers line up across ranks
            with torch.no_grad():
                self._teacher_hidden(mb.student.first_token())
        teacher_s = device_clock(mb.student.ids.device) - t0
        h = self._hidden(mb.student)
        hr = h[mb.act_rows]
        hr_pg = hr if self.temperature == 1.0 else hr / self.temperature
        logp, ent = chunked_token_logprobs(hr_pg, weight, mb.y, chunk_size=max(self.chunk, 1024))
        adv = mb.adv.clone()
        stats: dict[str, Any] = {"entropy_sum": float(ent.sum()), "entropy_n": int(ent.numel())}
        if need_teacher and self.estimator == "sampled_token":
            adv = self._sampled_token_advantage(mb, ht, logp, adv, weight if t_weight is None else t_weight, stats)
        loss, pg_term, kl_term = logp.new_zeros(()), None, None
        if self.gr.pg_weight > 0 and logp.numel() > 0:
            sur = clipped_surrogate(logp[None], mb.mu[None], adv[None], mb.m_pg[None], n_tokens_global=max(1.0, n_pg),
                                    eps_low=self.gr.eps_low, eps_high=self.gr.eps_high)
            pg_term = self.gr.pg_weight * sur.loss
            loss = loss + pg_term
            n_mb = float(mb.m_pg.sum())
            stats.update(pg_loss=float(sur.loss.detach()), clip_sum=float(sur.clip_frac) * n_mb, ratio_sum=float(sur.ratio_mean)
                         * n_mb, ratio_max=float(sur.ratio_max), pg_n=n_mb)
        if need_teacher and self.estimator == "full_vocab":
            kl_term = self._full_vocab_kl(mb, hr, ht, logp, ent, weight, t_weight, n_kl, stats)
            loss = loss + kl_term
        if need_teacher and mb.anchor_kl.numel() > 0:
            self._gate_diagnostics(hr[mb.kl_idx[mb.anchor_kl]], ht[mb.anchor_kl], weight, t_weight, stats)
        if self.collective_teacher and not loss.requires_grad and torch.is_grad_enabled():
            # under FSDP every rank must run a backward through the same parameters (their reduce-scatters line up):
            # a micro-batch without loss terms (no PG weight, no KL rows) still connects its zero loss to them
            loss = loss + 0.0 * logp.sum()
        if ht_full is not None and mb.leak_student_rows.numel() > 0:
            with torch.no_grad():
                n_leak = mb.leak_student_rows.numel()
                leak = chunked_kl_loss(h[mb.leak_student_rows].detach(), ht_full[mb.leak_teacher_rows],
                                       weight.detach(), torch.ones(n_leak, device=h.device),
                                       direction=g.direction, beta=g.jsd_beta, kappa=math.inf, chunk_size=self.chunk,
                                       teacher_weight=t_weight)
            stats.update(leak_sum=float(leak.per_token.sum()), leak_n=int(n_leak))
        return loss, LossTerms(pg=pg_term, kl=kl_term, teacher_s=teacher_s, stats=stats)

    @torch.no_grad()
    def _gate_diagnostics(self, hs: torch.Tensor, ht: torch.Tensor, weight: torch.Tensor,
                          t_weight: torch.Tensor | None, stats: dict[str, Any]) -> None:
        """At each guided turn's behaviour's first token (``repro.guidance.behaviour_anchor``): the divergence the
        loss uses (its direction, unclamped), the teacher's most likely token v* and P_T(v*), P_S(v*). A hint that
        does not move the teacher shows as KL ≈ 0 and P_T − P_S ≈ 0 (METHOD §6.11, gate diagnostics)."""
        g = self.g
        zs = hs.detach().float() @ weight.detach().float().T
        zt = ht.float() @ (weight if t_weight is None else t_weight).detach().float().T
        kl = kl_from_logits(zs, zt, direction=g.direction, beta=g.jsd_beta)
        ls, lt = torch.log_softmax(zs, -1), torch.log_softmax(zt, -1)
        v = lt.argmax(-1, keepdim=True)
        p_t, p_s = lt.gather(1, v).exp().squeeze(1), ls.gather(1, v).exp().squeeze(1)
        stats.update(anchor_n=int(kl.numel()), anchor_kl_sum=float(kl.sum()), anchor_pt_sum=float(p_t.sum()),
                     anchor_ps_sum=float(p_s.sum()))

    def _sampled_token_advantage(self, mb: MicroBatch, ht: torch.Tensor, logp: torch.Tensor, adv: torch.Tensor,
                                 t_weight: torch.Tensor, stats: dict[str, Any]) -> torch.Tensor:
        """``tg_sampled_token``: the GRPO advantages plus ``repro.losses.sampled_token_kl_advantage`` on KL rows."""
        g = self.g
        with torch.no_grad():
            lt, _ = chunked_token_logprobs(ht / self.temperature, t_weight, mb.y[mb.kl_idx], chunk_size=self.chunk)
            s_lp = logp.detach()[mb.kl_idx]
            term = sampled_token_kl_advantage(s_lp, lt, torch.ones_like(lt), coef=g.lam * g.sampled_token_coef)
            gap = s_lp - lt
        adv.index_add_(0, mb.kl_idx, term)
        stats.update(gap_sum=float(gap.sum()), gap_n=int(gap.numel()))
        return adv

    def _full_vocab_kl(self, mb: MicroBatch, hr: torch.Tensor, ht: torch.Tensor, logp: torch.Tensor,
                       ent: torch.Tensor, weight: torch.Tensor, t_weight: torch.Tensor | None, n_kl: float,
                       stats: dict[str, Any]) -> torch.Tensor:
        """λ·L_KL over the KL rows (chunked full-vocabulary divergence, METHOD §6.6)."""
        g = self.g
        w = torch.full((mb.kl_idx.numel(),), 1.0 / max(1.0, n_kl), device=hr.device)
        if g.kl_is_clip is not None:
            w = w * torch.clamp(torch.exp(logp.detach()[mb.kl_idx] - mb.mu[mb.kl_idx]), max=g.kl_is_clip)
        kl = chunked_kl_loss(hr[mb.kl_idx], ht, weight, w, direction=g.direction, beta=g.jsd_beta,
                             kappa=g.kappa, chunk_size=self.chunk, teacher_weight=t_weight)
        d = kl.per_token.detach()
        stats.update(kl_loss=float(kl.loss.detach()), kl_values=d.tolist(), kl_clamped=int((d >= g.kappa).sum()),
                     kl_entropy_sum=float(ent[mb.kl_idx].sum()))
        return g.lam * kl.loss


def reduce_stats(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """Combine micro-batch stats into the step's namespaced metrics (None when undefined)."""
    s = lambda k: sum(p.get(k, 0.0) for p in parts)  # noqa: E731
    out: dict[str, Any] = {}
    pg_n = s("pg_n")
    out["loss/policy"] = s("pg_loss") if any("pg_loss" in p for p in parts) else None
    out["pg/clip_frac"] = s("clip_sum") / pg_n if pg_n else None
    out["pg/ratio_mean"] = s("ratio_sum") / pg_n if pg_n else None
    out["pg/ratio_max"] = max((p["ratio_max"] for p in parts if "ratio_max" in p), default=None)
    ent_n = s("entropy_n")
    out["entropy/all"] = s("entropy_sum") / ent_n if ent_n else None
    vals = [v for p in parts for v in p.get("kl_values", [])]
    out["loss/kl"] = s("kl_loss") if any("kl_loss" in p for p in parts) else None
    if vals:
        vs = sorted(vals)
        out["kl/mean"] = sum(vs) / len(vs)
        out["kl/p99"] = vs[min(len(vs) - 1, math.ceil(0.99 * len(vs)) - 1)]
        out["kl/clamp_frac"] = s("kl_clamped") / len(vs)
        out["entropy/kl_tokens"] = s("kl_entropy_sum") / len(vs)
    else:
        out.update({"kl/mean": None, "kl/p99": None, "kl/clamp_frac": None, "entropy/kl_tokens": None})
    leak_n = s("leak_n")
    out["guidance/leak_kl_passing"] = s("leak_sum") / leak_n if leak_n else None
    gap_n = s("gap_n")
    out["kl/sampled_gap_mean"] = s("gap_sum") / gap_n if gap_n else None
    # gate diagnostics at the guided turns' behaviour's first token (LossRoot._gate_diagnostics)
    a_n = s("anchor_n")
    out["guidance/anchor_tokens"] = a_n
    out["guidance/anchor_kl"] = s("anchor_kl_sum") / a_n if a_n else None
    out["guidance/anchor_p_teacher"] = s("anchor_pt_sum") / a_n if a_n else None
    out["guidance/anchor_p_student"] = s("anchor_ps_sum") / a_n if a_n else None
    out["guidance/anchor_gap"] = (s("anchor_pt_sum") - s("anchor_ps_sum")) / a_n if a_n else None
    return out
