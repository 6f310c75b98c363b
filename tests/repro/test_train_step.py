"""The trainer step: global normalisation (micro-batch invariance), stop-gradient teacher, group handling."""

from __future__ import annotations

import copy
from dataclasses import replace

import _rl_fixtures as F
import pytest
import torch

from repro.rollout import EnvOutcome, RolloutSample
from repro.tokenizer import ChatEncoder
from repro.trainer_step import LossRoot, build_batch, collate, reduce_stats


def _sample(enc: ChatEncoder, item: int, index: int, reward: float, verdicts: list[str], seed: int,
            infra: str | None = None) -> RolloutSample:
    g = torch.Generator().manual_seed(seed)
    msgs = [{"role": "system", "content": "You are a coding agent."}, {"role": "user", "content": "Fix bug"}]
    for k in range(len(verdicts)):
        ids = torch.randint(10, 300, (5 + k + index,), generator=g).tolist() + [enc.im_end]
        msgs.append({"role": "assistant", "content": "x", "token_ids": ids,
                     "logprobs": (-torch.rand(len(ids), generator=g) * 5).tolist()})
        msgs.append({"role": "tool", "content": "ok"})
    msgs = msgs[:-1]
    e = enc.encode(msgs)
    return RolloutSample(item=item, index=index, instance_id=f"toy-{item}",
                         encoded=replace(e, logprobs=[0.0 if x != x else x for x in e.logprobs]),
                         texts=["x"] * len(verdicts), verdicts=verdicts,
                         truncated_turns=[False] * len(verdicts), outcome=EnvOutcome(False, infra_error=infra),
                         reward=reward)


def _groups(enc: ChatEncoder) -> list[list[RolloutSample]]:
    return [
        [_sample(enc, 0, j, r, v, 10 + j) for j, (r, v) in enumerate([(1.0, ["FAIL", "PASS"]), (0.0, ["PASS", "NA"]),
                                                                     (0.5, ["FAIL", "FAIL"])])],
        [_sample(enc, 1, j, 0.0, ["FAIL"], 20 + j) for j in range(3)],  # zero variance, with KL tokens
        [_sample(enc, 2, j, 1.0, ["PASS"], 30 + j) for j in range(3)],  # zero variance, no KL tokens
    ]


def _grads(root: LossRoot, plan, mb_size: int) -> tuple[float, dict[str, torch.Tensor]]:
    root.zero_grad(set_to_none=True)
    total = 0.0
    for i in range(0, len(plan.trajs), mb_size):
        loss, _ = root(collate(plan.trajs[i:i + mb_size], 0), plan.n_pg, plan.n_kl)
        loss.backward()
        total += float(loss.detach())
    return total, {n: p.grad.clone() for n, p in root.named_parameters() if p.grad is not None}


def _hint(enc: ChatEncoder):
    return lambda s, k: enc.hint_ids("Reminder: use Markdown.")


@pytest.mark.parametrize("arm", ["tg", "tg_kl_is", "tg_sampled_token", "tg_per_turn_ctx"])
def test_micro_batch_split_does_not_change_loss_or_gradient(arm: str) -> None:
    torch.manual_seed(0)
    s = F.setup()
    enc = ChatEncoder(s.tokenizer)
    cfg = F.config(arm)
    plan = build_batch(_groups(enc), cfg, _hint(enc))
    assert plan.n_kl > 0 and plan.n_pg > 0
    root = LossRoot(s.model, cfg)
    l1, g1 = _grads(root, plan, 1)
    l9, g9 = _grads(root, plan, 9)
    assert l1 == pytest.approx(l9, rel=1e-5, abs=1e-7)
    for n in g9:
        assert torch.allclose(g1[n], g9[n], rtol=1e-4, atol=1e-7), n


def test_teacher_is_stop_gradient() -> None:
    """The same-weights teacher contributes no gradient: equal to a run whose teacher is a frozen copy."""
    s = F.setup()
    enc = ChatEncoder(s.tokenizer)
    cfg = F.config("opd_only")
    plan = build_batch(_groups(enc), cfg, _hint(enc))
    live = LossRoot(s.model, cfg)
    _, g_live = _grads(live, plan, 9)

    frozen = copy.deepcopy(s.model)

    class FrozenTeacherRoot(LossRoot):
        def _hidden(self, seqs, lm=None):  # noqa: ANN001, ANN202
            if torch.is_grad_enabled():
                return super()._hidden(seqs, lm)
            return super()._hidden(seqs, frozen)

    _, g_frozen = _grads(FrozenTeacherRoot(s.model, cfg), plan, 9)
    assert all(p.grad is None for p in frozen.parameters())
    for n in g_live:
        assert torch.allclose(g_live[n], g_frozen[n], atol=1e-7), n


def test_zero_variance_and_infra_groups() -> None:
    s = F.setup()
    enc = ChatEncoder(s.tokenizer)
    groups = _groups(enc)
    keep = {"always": 9, "if_kl": 6, "never": 3}
    for mode, n in keep.items():
        plan = build_batch(groups, F.config("tg", f"grpo.keep_zero_variance_groups={mode}"), _hint(enc))
        assert len(plan.trajs) == n, mode
    # λ = 0: "if_kl" has no KL tokens to protect, so it drops both zero-variance groups
    plan = build_batch(groups, F.config("grpo", "grpo.keep_zero_variance_groups=if_kl"), _hint(enc))
    assert len(plan.trajs) == 3 and plan.n_kl == 0
    bad = [[_sample(enc, 3, j, float(j), ["FAIL"], 40 + j, infra="DOCKER_DAEMON" if j == 1 else None)
            for j in range(3)]]
    plan = build_batch(groups + bad, F.config("tg"), _hint(enc))
    assert plan.stats["rollout/infra_dropped_groups"] == 1 and len(plan.trajs) == 9


def test_failing_turn_masks_and_frac() -> None:
    s = F.setup()
    enc = ChatEncoder(s.tokenizer)
    groups = _groups(enc)
    plan = build_batch(groups, F.config("tg"), _hint(enc))
    # FAIL verdicts: g0 1 + 0 + 2, g1 3, g2 0 = 6; applicable (not NA): g0 5, g1 3, g2 3 = 11
    assert plan.stats["guidance/failing_turn_frac"] == pytest.approx(6 / 11)
    # the gate's share of guided turns: 6 FAIL turns of 12 assistant turns (NA turns count in the denominator)
    assert plan.stats["guidance/guided_turn_frac"] == pytest.approx(6 / 12)
    t0 = plan.trajs[0]  # turn 0 FAIL, turn 1 PASS: KL only on turn-0 tokens, and one teacher view
    assert 0 < sum(t0.m_kl) < len(t0.act_pos) and len(t0.views) == 1
    all_turns = build_batch(groups, F.config("tg_all_turns"), _hint(enc))
    assert all(sum(t.m_kl) == len(t.act_pos) for t in all_turns.trajs)
    assert all_turns.stats["guidance/guided_turn_frac"] == 1.0


def test_leakage_rows_cover_passing_turns_inside_the_view() -> None:
    s = F.setup()
    enc = ChatEncoder(s.tokenizer)
    grp = [_sample(enc, 0, j, float(j), ["PASS", "FAIL", "PASS"], 50 + j) for j in range(2)]
    plan = build_batch([grp], F.config("tg"), _hint(enc))
    t = plan.trajs[0]
    view = t.views[0]
    turn0 = [p for p in t.act_pos if grp[0].encoded.turn[p] == 0]
    assert view.leak_student_pos == turn0  # turn 2 (PASS) lies after the cut; turn 1 is the KL turn
    assert all(view.ids[m] == t.ids[p] for p, m in zip(view.leak_student_pos, view.leak_teacher_pos, strict=True))
    root = LossRoot(s.model, F.config("tg"))
    stats = root(collate(plan.trajs, 0), plan.n_pg, plan.n_kl)[1].stats
    n_turn0 = sum(a for x in grp for a, k in zip(x.encoded.act, x.encoded.turn, strict=True) if k == 0)
    assert stats["leak_n"] == n_turn0 and stats["leak_sum"] >= 0


def test_sampled_token_arm_runs_the_tested_estimator_and_returns_typed_terms(monkeypatch: pytest.MonkeyPatch) -> None:
    """tg_sampled_token's advantage term is ``repro.losses.sampled_token_kl_advantage`` (the closed-form-tested
    function, not an inline copy), with coef = λ·sampled_token_coef; the loss terms come back as a LossTerms record."""
    import repro.trainer_step as ts
    from repro.losses import sampled_token_kl_advantage

    calls: list[float] = []

    def spy(s_lp: torch.Tensor, t_lp: torch.Tensor, mask: torch.Tensor, *, coef: float = 1.0) -> torch.Tensor:
        calls.append(coef)
        return sampled_token_kl_advantage(s_lp, t_lp, mask, coef=coef)

    monkeypatch.setattr(ts, "sampled_token_kl_advantage", spy)
    s = F.setup()
    enc = ChatEncoder(s.tokenizer)
    cfg = F.config("tg_sampled_token")
    plan = build_batch(_groups(enc), cfg, _hint(enc))
    loss, terms = LossRoot(s.model, cfg)(collate(plan.trajs, 0), plan.n_pg, plan.n_kl)
    assert calls == [cfg.guidance.lam * cfg.guidance.sampled_token_coef]
    assert isinstance(terms, ts.LossTerms) and terms.kl is None and terms.pg is not None
    assert float(loss) == pytest.approx(float(terms.pg)) and terms.stats["gap_n"] > 0
    assert not any(k.startswith("_") for k in terms.stats)
    _, full = LossRoot(s.model, F.config("tg"))(collate(plan.trajs, 0), plan.n_pg, plan.n_kl)
    assert full.kl is not None and len(calls) == 1  # full_vocab: the KL is a loss term, the estimator is not run


@pytest.mark.parametrize("arm", ["tg", "tg_rev_kl", "tg_per_turn_ctx", "tg_sampled_token"])
def test_packed_micro_batch_equals_padded(arm: str) -> None:
    """padding_free packs the student's trajectories and the teacher's views into one row each: the loss, every
    statistic and the gradient equal the padded [B, T] layout's up to float rounding (and no pad token is run)."""
    torch.manual_seed(0)
    s = F.setup()
    enc = ChatEncoder(s.tokenizer)
    cfg = F.config(arm)
    plan = build_batch(_groups(enc), cfg, _hint(enc))
    root = LossRoot(s.model, cfg)
    out = {}
    for packed in (False, True):
        root.zero_grad(set_to_none=True)
        mb = collate(plan.trajs, 0, padding_free=packed)
        loss, terms = root(mb, plan.n_pg, plan.n_kl)
        loss.backward()
        out[packed] = (float(loss), terms.stats, {n: p.grad.clone() for n, p in root.named_parameters()
                                                   if p.grad is not None}, mb)
    (l0, st0, g0, mb0), (l1, st1, g1, mb1) = out[False], out[True]
    assert mb1.student.ids.shape[0] == 1 and mb1.student.ids.shape[1] == mb1.n_tokens == mb0.n_tokens
    assert mb0.student.ids.numel() > mb0.n_tokens  # the padded layout did run pad tokens
    assert l1 == pytest.approx(l0, rel=1e-5, abs=1e-7)
    assert st1.keys() == st0.keys()
    for k in ("entropy_sum", "pg_loss", "kl_loss", "leak_sum", "gap_sum"):
        if k in st0:
            assert st1[k] == pytest.approx(st0[k], rel=1e-4, abs=1e-6), k
    if "kl_values" in st0:
        assert torch.allclose(torch.tensor(st1["kl_values"]), torch.tensor(st0["kl_values"]), rtol=1e-4, atol=1e-6)
    assert g1.keys() == g0.keys()
    for n in g0:
        assert torch.allclose(g1[n], g0[n], rtol=1e-3, atol=1e-6), n


def test_gate_diagnostics_at_the_behaviours_first_token() -> None:
    """At each guided turn's anchor (its behaviour's first token) the step logs the loss's divergence, P_T(v*) and
    P_S(v*) for the teacher's most likely token v*, equal to a direct computation from full logits."""
    s = F.setup()
    enc = ChatEncoder(s.tokenizer)
    groups = _groups(enc)
    for grp in groups:
        for x in grp:  # the anchor: the third sampled token of each turn
            x.anchors = [next(t for t, (k, a) in enumerate(zip(x.encoded.turn, x.encoded.act, strict=True)) if a and k == turn) + 2
                         for turn in range(x.n_turns)]
    cfg = F.config("tg")
    assert cfg.guidance.direction == "forward"
    plan = build_batch(groups, cfg, _hint(enc))
    mb = collate(plan.trajs, 0, padding_free=False)
    stats = LossRoot(s.model, cfg)(mb, plan.n_pg, plan.n_kl)[1].stats
    n_fail = sum(v == "FAIL" for g in groups for x in g for v in x.verdicts)
    assert 0 < stats["anchor_n"] <= n_fail
    with torch.no_grad():
        def logp(seqs, rows):  # noqa: ANN001, ANN202
            z = s.model(input_ids=seqs.ids, attention_mask=seqs.mask).logits
            return torch.log_softmax(z.reshape(-1, z.shape[-1])[rows].float(), -1)

        ls = logp(mb.student, mb.act_rows[mb.kl_idx[mb.anchor_kl]])
        lt = logp(mb.teacher, mb.kl_teacher_rows[mb.anchor_kl])
        v = lt.argmax(-1, keepdim=True)
        want_pt, want_ps = lt.gather(1, v).exp().sum(), ls.gather(1, v).exp().sum()
        want_kl = (lt.exp() * (lt - ls)).sum()  # KL(π_T ‖ π_S): the tg arm's forward direction
    assert stats["anchor_pt_sum"] == pytest.approx(float(want_pt), rel=1e-4)
    assert stats["anchor_ps_sum"] == pytest.approx(float(want_ps), rel=1e-4)
    assert stats["anchor_kl_sum"] == pytest.approx(float(want_kl), rel=1e-3, abs=1e-6)
    red = reduce_stats([stats])
    assert red["guidance/anchor_tokens"] == stats["anchor_n"]
    assert red["guidance/anchor_gap"] == pytest.approx((float(want_pt) - float(want_ps)) / stats["anchor_n"], rel=1e-4)
    # GRPO (λ = 0) runs no teacher: no diagnostics, logged as None
    assert reduce_stats([LossRoot(s.model, F.config("grpo"))(collate(plan.trajs, 0), plan.n_pg, plan.n_kl)[1].stats]
                        )["guidance/anchor_kl"] is None


def test_the_collective_teachers_placeholder_forward_runs_on_the_students_device() -> None:
    """Under FSDP a micro-batch without KL rows still runs a one-token teacher forward (the layers' all-gathers must
    line up across ranks). Its input is sliced from the student's ids, so it is wherever they are; one built from a
    Python list stayed on the CPU, which a model on a GPU refuses. The meta device stands in for the GPU here."""
    s = F.setup()
    enc = ChatEncoder(s.tokenizer)
    cfg = F.config("tg")
    plan = build_batch(_groups(enc), cfg, _hint(enc))
    no_kl = [t for t in plan.trajs if not t.views]
    assert plan.n_kl > 0 and no_kl
    mb = collate(no_kl[:2], 0).to("meta")
    assert mb.kl_idx.numel() == 0 and mb.teacher is None
    seen = []

    class Placeholder(Exception):
        pass

    class Spy(LossRoot):
        def _teacher_hidden(self, seqs):  # noqa: ANN001, ANN202
            seen.append(seqs)
            raise Placeholder

    root = Spy(s.model, cfg)
    root.collective_teacher = True
    with pytest.raises(Placeholder):
        root(mb, plan.n_pg, plan.n_kl)
    (seqs,) = seen
    assert seqs.ids.device.type == "meta" and seqs.mask is not None and seqs.mask.device.type == "meta"
    assert tuple(seqs.ids.shape) == (1, 1) and not seqs.packed and seqs.n_tokens == 1
    root.collective_teacher = False  # one process: no placeholder forward
    seen.clear()
    cpu_mb = collate(no_kl[:2], 0)
    root(cpu_mb, plan.n_pg, plan.n_kl)
    assert seen == []
    first = cpu_mb.student.first_token()
    assert first.ids.tolist() == [[no_kl[0].ids[0]]] and first.mask.tolist() == [[1]]


def _naive_loss(model, groups, cfg, hint: list[int], T: float) -> torch.Tensor:  # noqa: ANN001
    """METHOD §5 written out per trajectory with full logits: advantages r − mean per group, PPO-clip at logits / T
    over the generated tokens, forward KL(π_T ‖ π_S) at T = 1 on FAIL-turn tokens against a teacher run on the ids
    with the hint inserted before each FAIL turn's header and cut after the last one."""
    g, gu = cfg.grpo, cfg.guidance
    pg, kl = [], []
    for grp in groups:
        r = torch.tensor([x.reward for x in grp], dtype=torch.float64)
        for x, a in zip(grp, (r - r.mean()).tolist(), strict=True):
            e = x.encoded
            logits = model(torch.tensor(e.ids)[None]).logits[0]
            lp_t, ls = torch.log_softmax(logits / T, -1), torch.log_softmax(logits, -1)
            for t in (t for t in range(1, len(e.ids)) if e.act[t]):
                rho = torch.exp(lp_t[t - 1, e.ids[t]] - e.logprobs[t])
                pg.append(-torch.min(rho * a, rho.clamp(1 - g.eps_low, 1 + g.eps_high) * a))
            fails = [k for k, v in enumerate(x.verdicts) if v == "FAIL"]
            if not fails:
                continue
            heads = {e.header_starts[k] for k in fails}
            tid, where = [], {}
            for t in range(len(e.ids)):
                if t > e.header_starts[max(fails)] and e.turn[t] != max(fails):
                    break
                tid += hint if t in heads else []
                where[t] = len(tid)
                tid.append(e.ids[t])
            with torch.no_grad():
                lt = torch.log_softmax(model(torch.tensor(tid)[None]).logits[0], -1)
            for t in (t for t in range(1, len(e.ids)) if e.act[t] and e.turn[t] in fails):
                q = lt[where[t] - 1]
                kl.append(torch.clamp((q.exp() * (q - ls[t - 1])).sum(), max=gu.kappa))
    return g.pg_weight * torch.stack(pg).sum() / len(pg) + gu.lam * torch.stack(kl).sum() / len(kl)


@pytest.mark.parametrize("packed", [True, False])
def test_loss_and_gradient_equal_a_naive_per_trajectory_computation(packed: bool) -> None:
    """The tg arm's loss and gradient (float64, sampling temperature 0.7) equal METHOD §5 computed independently,
    one trajectory and one hand-spliced teacher view at a time (audit: max gradient difference ~1e-10)."""
    torch.manual_seed(0)
    s = F.setup()
    enc = ChatEncoder(s.tokenizer)
    model = s.model.double()
    cfg = F.config("tg", "rollout.temperature=0.7")
    groups = _groups(enc)
    hint = enc.hint_ids("Reminder: use Markdown.")
    plan = build_batch(groups, cfg, lambda x, k: hint)
    loss, _ = LossRoot(model, cfg)(collate(plan.trajs, 0, padding_free=packed), plan.n_pg, plan.n_kl)
    loss.backward()
    got = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    ref = _naive_loss(model, groups, cfg, hint, 0.7)
    ref.backward()
    assert float(loss) == pytest.approx(float(ref), rel=1e-9, abs=1e-12)
    for n, p in model.named_parameters():
        assert torch.allclose(got[n], p.grad, rtol=1e-6, atol=1e-9), n
