"""SFT stage: expert trajectories → tokenizer → tiny Qwen3 → held-out evaluation (``run_sft``).

Data. Either an imported dataset (``dataset``: logged trajectories after ``tgsuite data filter``, used as they are)
or ``ScriptedExpert`` episodes on the TRAIN split (LocalSandbox, the real agent loop and tools). A share
``hint_share`` of episodes gets the Markdown reminder before the summary turn (``correct@before_finish``); the
expert then writes a Markdown summary, otherwise plain text. So the SFT model learns to comply when reminded and
rarely does unprompted — the paper's starting condition (METHOD §6; issue #6 item 2).

Training. Loss = token-mean cross-entropy on assistant tokens only (``EncodedConversation.act``: thinking, visible
text, tool calls and ``<|im_end|>``; never system/user/tool/hint tokens or chat headers), computed from final hidden
states with ``repro.losses.chunked_token_logprobs`` (no [T, V] logits). AdamW, linear warm-up then cosine decay,
gradient clipping; episodes packed into forwards of ``pack_tokens`` tokens (``repro.packing``: no attention across
episodes) under the ``precision`` policy (``repro.precision``, default ``bf16-mixed``: fp32 master weights and
optimizer state, bf16 matmuls), optimizer step every ``batch_tokens`` assistant tokens.

Evaluation (held-out split, temperature ``eval_temperature``): ``harness.runner.run_eval`` with
``repro.sampler.SamplerPolicy`` in LocalSandboxes, graded by the hidden tests — coding success (resolved rate),
unprompted Markdown compliance (no feedback) and hinted compliance (``correct@before_finish``). Compliance is
trajectory-level ``markdown@v1`` over episodes with at least one applicable turn (others are reported as ``n_na``).

Outputs in ``out_dir``: ``config.json``, ``expert.jsonl`` (cached trajectories, reused when the data settings
match), ``model/`` (HF ``save_pretrained`` + tokenizer), ``metrics.jsonl`` (one line per optimizer step),
``sft_report.json`` (``SFTReport``), ``eval/`` (runner directories).
"""

from __future__ import annotations

import json
import logging
import math
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal

import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator

from harness.interfaces import MAX_FORMAT_RETRIES
from harness.policies.expert_test_view import TestView
from repro.config import LoraCfg
from repro.lora import apply_lora, save_pretrained, trainable_parameters
from repro.models import build_model, count_params
from repro.packing import pack, packed_token_logprobs
from repro.precision import Precision, autocast, master_weights_ok
from repro.sft_expert import collect_expert_trajectories
from repro.tokenizer import ChatEncoder, train_tokenizer

log = logging.getLogger(__name__)


class SFTConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    train_tasks: str | None = Field(None, description="task-set directory of the TRAIN split (tgsuite tasks "
                                    "make-mini): the expert episodes are collected there")
    dataset: str | None = Field(None, description="a dataset directory (`tgsuite data filter`): train on its "
                                "logged trajectories instead of collecting expert episodes")
    heldout_tasks: str | None = Field(None, description="held-out task-set directory; None skips the evaluation")
    preset: Literal["nano", "mini"] = "mini"
    init: str | None = Field(None, description="continue from this model directory (HF layout + tokenizer) instead "
                             "of training a tokenizer and building a fresh model; `base:<name>` is the base shipped "
                             "in assets/base/<name>/ (its files are checked against its manifest's sha256 first)")
    vocab_size: int = 4096
    episodes: int = 120
    hint_share: float = Field(0.3, ge=0.0, le=1.0)
    stumble_share: float = Field(0.0, ge=0.0, le=1.0, description="share of expert episodes with one mistake (a "
                                 "wrong path, a wrong `old` text, an unclosed edit call) answered by the real error "
                                 "and followed by the correct call (repro.sft_stumble); the mistake is not trained on")
    finish_notice_turns: int = Field(0, ge=0, description="the agent loop tells the agent when only this many turns "
                                     "are left (harness EpisodeLimits.finish_notice_turns), in the held-out "
                                     "evaluation and in the budget_share episodes; 0 = never")
    budget_share: float = Field(0.0, ge=0.0, le=1.0, description="share of expert episodes run with a turn limit of "
                                "4-9 and the finish notice, so that the expert often gets the notice before its fix "
                                "and finishes with what it changed and what still fails (needs finish_notice_turns)")
    hint_checkers: tuple[str, ...] = Field(("markdown@v1",), min_length=1, description="requirements whose reminder "
                                           "a hinted episode carries (one drawn uniformly per hinted episode), each "
                                           "at its checker's hint_placement")
    think: bool = True
    test_view: TestView = Field("read", description="how the expert looks at the visible tests: "
                                                 "grep the test file for the function's calls, or read all of it "
                                                 "(harness.policies.expert_test_view)")
    epochs: int = 2
    lr: float = 2e-3
    weight_decay: float = 0.01
    warmup_steps: int = 5
    batch_tokens: int = 4096
    pack_tokens: int = Field(8192, ge=16, description="tokens per packed forward (several episodes, no attention "
                             "across them; repro.packing)")
    precision: Precision = Field("bf16-mixed", description="fp32, or bf16-mixed: fp32 master weights and AdamW "
                                 "state, bf16 matmuls under autocast (repro.precision)")
    max_len: int = 6144
    grad_clip: float = 1.0
    context_weight: float = Field(0.0, ge=0.0, description="weight of an auxiliary next-token loss on the "
                                  "non-assistant tokens (tool observations, prompts): 0 = assistant tokens only. "
                                  "A from-scratch model has no pretraining; this term trains it on the code it reads "
                                  "at no extra forward cost (each part is its own token mean). Measured on the mini "
                                  "world: it did not make the model copy names from context (docs/RESULTS.md)")
    rename_repos: bool = Field(False, description="mini task family: give every expert episode a fresh repository "
                               "name (slug and package) each epoch, so names cannot be memorised and must be copied "
                               "from the context (repro.sft_augment)")
    rename_modules: float = Field(0.0, ge=0.0, le=1.0, description="with rename_repos: the share of episodes (drawn "
                                  "per episode and epoch) whose modules also get made-up names, so module paths are "
                                  "copied from the listing and test output, not memorised (repro.sft_augment)")
    rename_identifiers: float = Field(0.0, ge=0.0, le=1.0, description="with rename_repos: the share of episodes "
                                      "whose code's own names (functions, parameters, variables) also get made-up "
                                      "words everywhere in the episode, so code lines are copied, not recalled "
                                      "(repro.sft_identifiers)")
    seed: int = 0
    workers: int = 2
    eval_instances: int = 16
    eval_temperature: float = 1.0
    eval_max_new_tokens: int = 320
    eval_max_turns: int = 16
    eval_format_retries: int = Field(0, ge=0, le=MAX_FORMAT_RETRIES, description="held-out evaluation: a turn without a tool call, or "
                                     "with one that does not parse, is sampled again at most this many times "
                                     "(harness EpisodeLimits.format_retries)")
    eval_concurrency: int = Field(8, ge=1, description="held-out episodes run at once, their turns sampled as one "
                                  "batch (repro.batching)")
    torch_threads: int = 2
    lora: LoraCfg = Field(LoraCfg(), description="LoRA adapters (repro.lora): with lora.enabled only the adapters "
                          "train; model/ holds the merged weights, model/adapter/ the adapters (peft format)")

    @model_validator(mode="after")
    def _source(self) -> SFTConfig:
        if (self.train_tasks is None) == (self.dataset is None):
            raise ValueError("give exactly one of train_tasks (--train-tasks: collect expert episodes) and dataset "
                             "(--dataset: logged trajectories from `tgsuite data filter`)")
        if self.rename_repos and self.train_tasks is None:
            raise ValueError("rename_repos needs train_tasks (the repositories to rename)")
        if self.budget_share > 0 and self.finish_notice_turns == 0:
            raise ValueError("budget_share needs the finish notice: set finish_notice_turns (e.g. 2)")
        if (self.rename_modules > 0 or self.rename_identifiers > 0) and not self.rename_repos:
            raise ValueError("rename_modules and rename_identifiers rename inside renamed episodes: set "
                             "rename_repos=true as well")
        return self


# episode statuses reached through the agent's own `finish` call (the others: a limit, or a protocol violation)
FINISHED = frozenset({"ok", "empty_patch", "patch_apply_failed", "tests_failed"})


class EvalSummary(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    condition: Literal["unprompted", "hinted"]
    n: int
    resolved_rate: float
    compliance: float          # NaN when no episode had an applicable turn
    n_applicable: int
    n_na: int
    infra_errors: int
    finish_rate: float = math.nan         # share of scored episodes that ended with a valid `finish` call
    tool_call_validity: float = math.nan  # mean over scored episodes with a tool call of valid calls / calls


class SFTReport(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    model_dir: str
    n_params: int
    vocab: int
    n_trajectories: int
    n_hinted: int
    train_tokens: int
    train_act_tokens: int
    steps: int
    final_loss: float
    train_tokens_per_s: float
    wall_s: dict[str, float]
    eval: list[EvalSummary] = Field(default_factory=list)


def _encoded(enc: ChatEncoder, messages: list, tools: list) -> tuple[list[int], list[int]]:
    """(ids, loss mask): the assistant tokens, less those of turns answered by an error (``failed_turns``)."""
    from repro.sft_stumble import failed_turns

    e, failed = enc.encode(messages, tools), failed_turns(messages)
    return e.ids, [a if t not in failed else 0 for a, t in zip(e.act, e.turn, strict=True)]


def _lr_at(step: int, total: int, cfg: SFTConfig) -> float:
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    frac = (step - cfg.warmup_steps) / max(1, total - cfg.warmup_steps)
    return cfg.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, frac))))


def batch_losses(model, docs: list[tuple[list[int], list[int]]], *, context: bool = False,
                 precision: Precision = "fp32") -> tuple[torch.Tensor, int, torch.Tensor, int]:
    """(Σ −log π(y_t) over assistant tokens, their count, the same over the other tokens, their count), t ≥ 1,
    summed over ``docs`` = (ids, act mask) run as one packed forward (``repro.packing``: no attention across
    documents). With ``context=False`` only assistant positions reach the LM head and the context part is (0, 0)."""
    classes = [[(1 if a else (2 if context and t else 0)) for t, a in enumerate(act)] for _, act in docs]
    zero = torch.zeros((), dtype=torch.float32)
    if not any(c for cl in classes for c in cl[1:]):
        return zero, 0, zero, 0
    batch = pack([(ids, cl) for (ids, _), cl in zip(docs, classes, strict=True)])
    with autocast(precision):
        lp, where = packed_token_logprobs(model, batch)
    is_act = batch.classes[0][where] == 1
    n_act = int(is_act.sum())
    if not context:
        return -lp.sum(), n_act, zero, 0
    return -lp[is_act].sum(), n_act, -lp[~is_act].sum(), int(where.numel()) - n_act


def sft_losses(model, ids: list[int], act: list[int], *, context: bool = False
               ) -> tuple[torch.Tensor, int, torch.Tensor, int]:
    """``batch_losses`` of one sequence in float32 (the closed form the tests check)."""
    return batch_losses(model, [(ids, act)], context=context)


def sft_loss(model, ids: list[int], act: list[int]) -> tuple[torch.Tensor, int]:
    """Σ −log π(y_t) over tokens with act[t] = 1 (t ≥ 1), and their count; full logits are never formed."""
    nll, n, _, _ = sft_losses(model, ids, act)
    return nll, n


def _micro_batches(data: list[tuple[list[int], list[int]]], order: list[int], cfg: SFTConfig
                   ) -> list[tuple[list[tuple[list[int], list[int]]], bool]]:
    """Consecutive examples (in ``order``) grouped into packed forwards of at most ``pack_tokens`` tokens, none
    crossing an optimizer step (every ``batch_tokens`` assistant tokens); the flag marks a step's last forward."""
    out, cur, size, acc = [], [], 0, 0
    for idx in order:
        ids, act = data[idx]
        if cur and size + len(ids) > cfg.pack_tokens:
            out.append((cur, False))
            cur, size = [], 0
        cur.append((ids, act))
        size += len(ids)
        acc += sum(act)
        if acc >= cfg.batch_tokens:
            out.append((cur, True))
            cur, size, acc = [], 0, 0
    if cur:
        out.append((cur, True))
    return out


def sft_train(model, examples: list[tuple[list[int], list[int]]], cfg: SFTConfig, metrics_path: Path,
              epoch_examples: Callable[[int], list[tuple[list[int], list[int]]]] | None = None) -> dict:
    """Assistant-token cross-entropy over ``examples`` = (ids, act mask); returns training statistics.
    ``epoch_examples(e)``, when given, supplies epoch e's examples instead (same count and order of episodes).
    Examples are packed into forwards of ``pack_tokens`` tokens under the ``precision`` policy; an optimizer step
    follows every ``batch_tokens`` assistant tokens (the step's exact token mean)."""
    gen = random.Random(f"sft-order:{cfg.seed}")
    per_epoch = sum(sum(a) for _, a in examples)
    ctx_ratio = max(1.0, sum(len(i) - 1 for i, _ in examples) / max(1, per_epoch) - 1.0)  # ctx tokens per act token
    w_ctx = cfg.context_weight / ctx_ratio  # so that the context part is ≈ its own token mean
    total_steps = max(1, cfg.epochs * math.ceil(per_epoch / cfg.batch_tokens))
    params = trainable_parameters(model)  # the adapters' alone under LoRA
    opt = torch.optim.AdamW(params, lr=cfg.lr, betas=(0.9, 0.95), weight_decay=cfg.weight_decay)
    master_weights_ok(model, cfg.precision)
    model.train()
    step, acc_tokens, acc_loss, n_tok, t0 = 0, 0, 0.0, 0, time.perf_counter()
    acc_ctx, acc_nctx = 0.0, 0
    last_loss = math.nan
    with metrics_path.open("w") as mf:
        for epoch in range(cfg.epochs):
            epoch_data = examples if epoch_examples is None else epoch_examples(epoch)
            order = list(range(len(epoch_data)))
            gen.shuffle(order)
            for docs, ends_step in _micro_batches(epoch_data, order, cfg):
                nll, n_act, ctx_nll, n_ctx = batch_losses(model, docs, context=cfg.context_weight > 0,
                                                          precision=cfg.precision)
                if n_act or n_ctx:
                    ((nll + w_ctx * ctx_nll) / cfg.batch_tokens).backward()
                acc_ctx += float(ctx_nll.detach())
                acc_nctx += n_ctx
                acc_tokens += n_act
                acc_loss += float(nll.detach())
                n_tok += sum(len(i) for i, _ in docs)
                if acc_tokens and ends_step:
                    for g in opt.param_groups:
                        g["lr"] = _lr_at(step, total_steps, cfg)
                    scale = cfg.batch_tokens / acc_tokens  # turn the fixed divisor into an exact token mean
                    for p in params:
                        if p.grad is not None:
                            p.grad.mul_(scale)
                    gnorm = float(torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip))
                    opt.step()
                    opt.zero_grad(set_to_none=True)
                    last_loss = acc_loss / acc_tokens
                    el = time.perf_counter() - t0
                    ctx_loss = acc_ctx / acc_nctx if acc_nctx else None
                    mf.write(json.dumps({"step": step, "epoch": epoch, "loss/sft": last_loss, "loss/context": ctx_loss,
                                         "grad_norm": gnorm,
                                         "lr": opt.param_groups[0]["lr"], "tokens": n_tok,
                                         "tokens_per_s": n_tok / el}) + "\n")
                    mf.flush()
                    log.info("sft step %d epoch %d loss %.4f (%.0f tok/s)", step, epoch, last_loss, n_tok / el)
                    step, acc_tokens, acc_loss, acc_ctx, acc_nctx = step + 1, 0, 0.0, 0.0, 0
    model.eval()
    return {"steps": step, "final_loss": last_loss, "tokens": n_tok, "tokens_per_s": n_tok / (time.perf_counter() - t0)}


def _load_or_collect(cfg: SFTConfig, out: Path) -> list:
    from harness.schema import Trajectory

    if cfg.dataset is not None:  # logged trajectories, imported and filtered (repro.dataset_io)
        from repro.dataset_io import sft_trajectories

        return sft_trajectories(cfg.dataset)
    cache, key = out / "expert.jsonl", json.dumps(
        {k: getattr(cfg, k) for k in ("train_tasks", "episodes", "hint_share", "think", "seed")}
        | ({"hint_checkers": list(cfg.hint_checkers)} if cfg.hint_checkers != ("markdown@v1",) else {})
        | ({"stumble_share": cfg.stumble_share} if cfg.stumble_share else {})
        | ({"test_view": cfg.test_view} if cfg.test_view != "read" else {})
        | ({"budget_share": cfg.budget_share, "finish_notice_turns": cfg.finish_notice_turns}
           if cfg.budget_share else {}),
        sort_keys=True)
    if cache.is_file():
        lines = cache.read_text().splitlines()
        if lines and lines[0] == key:
            return [Trajectory.model_validate_json(x) for x in lines[1:]]
    trajs = collect_expert_trajectories(cfg.train_tasks, episodes=cfg.episodes, hint_share=cfg.hint_share,
                                        think=cfg.think, seed=cfg.seed, workers=cfg.workers,
                                        hint_checkers=cfg.hint_checkers, stumble_share=cfg.stumble_share,
                                        budget_share=cfg.budget_share, test_view=cfg.test_view,
                                        finish_notice_turns=cfg.finish_notice_turns)
    cache.write_text("\n".join([key] + [t.model_dump_json() for t in trajs]) + "\n")
    return trajs


def _model_and_tokenizer(cfg: SFTConfig, trajs: list, tools: list) -> tuple:
    """A fresh tokenizer (trained on the rendered expert conversations) and model, or both from ``cfg.init``."""
    if cfg.init is not None:
        from transformers import Qwen3ForCausalLM

        from repro.pretrain.ship import is_base, load_base, resolve_init
        from repro.tokenizer import load_tokenizer

        path = resolve_init(cfg.init)
        if is_base(path):  # a shipped base: every file checked against its manifest's sha256 first
            model, tok, manifest = load_base(path)
            log.info("SFT from base %s: pretrained %.2fM tokens, step %d", path, manifest.tokens_seen / 1e6,
                     manifest.step)
            return model, tok
        from repro.sft_ship import is_sft_coder, verify_sft

        if is_sft_coder(path):
            verify_sft(path)
        return Qwen3ForCausalLM.from_pretrained(path, dtype=torch.float32), load_tokenizer(path)
    probe = train_tokenizer([json.dumps(tools)], vocab_size=300, min_frequency=1)  # template text for the corpus
    corpus = [probe.apply_chat_template([m.model_dump() for m in tr.messages], tools=tools, tokenize=False)
              for tr in trajs]
    tok = train_tokenizer(corpus, vocab_size=cfg.vocab_size)
    model = build_model(cfg.preset, len(tok), seed=cfg.seed, pad_token_id=tok.pad_token_id,
                        eos_token_id=tok.eos_token_id)
    return model, tok


def run_sft(cfg: SFTConfig, out_dir: str | Path) -> SFTReport:
    """The whole SFT stage (see module docstring). Deterministic given the config, up to thread scheduling."""
    from harness.tools import tool_schemas

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(cfg.model_dump_json(indent=2))
    torch.set_num_threads(cfg.torch_threads)
    wall: dict[str, float] = {}
    t = time.perf_counter()
    trajs = _load_or_collect(cfg, out)
    wall["expert"] = time.perf_counter() - t
    if not trajs:
        raise RuntimeError(f"no finished expert trajectories from {cfg.train_tasks}; check the task set with "
                           "`tgsuite tasks validate`.")
    tools = tool_schemas()
    t = time.perf_counter()
    model, tok = _model_and_tokenizer(cfg, trajs, tools)
    if cfg.lora.enabled:
        apply_lora(model, cfg.lora, seed=cfg.seed)
    enc = ChatEncoder(tok)
    encoded = [_encoded(enc, tr.messages, tools) for tr in trajs]
    keep = [tr for tr, e in zip(trajs, encoded, strict=True) if len(e[0]) <= cfg.max_len]
    examples = [e for e in encoded if len(e[0]) <= cfg.max_len]
    if len(keep) < len(trajs):
        log.warning("skipping %d trajectories longer than max_len=%d tokens", len(trajs) - len(keep), cfg.max_len)
    epoch_examples = None
    if cfg.rename_repos:
        from harness.tasks import load_task_set
        from repro.sft_augment import renamed_episodes

        repos = {i.instance_id: i.repo for i in load_task_set(cfg.train_tasks).instances}

        def epoch_examples(epoch: int) -> list[tuple[list[int], list[int]]]:
            return [_encoded(enc, msgs, tools) for msgs in renamed_episodes(keep, repos, seed=cfg.seed, epoch=epoch,
                                                                                module_share=cfg.rename_modules,
                                                                                identifier_share=cfg.rename_identifiers)]
    wall["tokenize"] = time.perf_counter() - t
    t = time.perf_counter()
    stats = sft_train(model, examples, cfg, out / "metrics.jsonl", epoch_examples)
    wall["train"] = time.perf_counter() - t
    model_dir = out / "model"
    save_pretrained(model, model_dir)  # a LoRA model: merged weights + adapter/ (repro.lora)
    tok.save_pretrained(model_dir)
    evals = []
    if cfg.heldout_tasks:
        t = time.perf_counter()
        evals = evaluate_sft(model, tok, cfg, out / "eval")
        wall["eval"] = time.perf_counter() - t
    report = SFTReport(
        model_dir=str(model_dir), n_params=count_params(model), vocab=len(tok), n_trajectories=len(examples),
        n_hinted=sum(1 for tr in trajs if any(m.is_hint for m in tr.messages)),
        train_tokens=sum(len(i) for i, _ in examples), train_act_tokens=sum(sum(a) for _, a in examples),
        steps=stats["steps"], final_loss=stats["final_loss"], train_tokens_per_s=stats["tokens_per_s"],
        wall_s=wall, eval=evals)
    (out / "sft_report.json").write_text(report.model_dump_json(indent=2))
    return report


def evaluate_sft(model, tok, cfg: SFTConfig, out_dir: Path) -> list[EvalSummary]:
    """Held-out coding success and Markdown compliance, unprompted and hinted, at ``eval_temperature``."""
    from harness.feedback_spec import parse_feedback
    from harness.interfaces import EpisodeLimits
    from harness.runner import run_eval
    from harness.runner_sandbox import TaskSandboxFactory
    from harness.tasks import load_task_set
    from repro.batching import BatchingEngine
    from repro.sampler import KVSampler, SamplerPolicy

    ts = load_task_set(cfg.heldout_tasks)
    ts = ts.model_copy(update={"instances": ts.instances[: cfg.eval_instances]})
    limits = EpisodeLimits(max_turns=cfg.eval_max_turns, finish_notice_turns=cfg.finish_notice_turns,
                           format_retries=cfg.eval_format_retries)
    out = []
    for cond, spec in (("unprompted", "none"), ("hinted", "correct@before_finish")):
        with TaskSandboxFactory(ts, kind="local", run_id=f"sft-{cond}") as fac, BatchingEngine(
                KVSampler(model, prefix_cache=2 * cfg.eval_concurrency), max_batch=cfg.eval_concurrency) as eng:
            policy = SamplerPolicy(eng, tok, name="sft", max_new_tokens=cfg.eval_max_new_tokens,
                                   temperature=cfg.eval_temperature)
            res = run_eval(ts, {"sft": policy}, [0], out_dir / cond, sandbox_factory=fac,
                           workers=cfg.eval_concurrency, limits=limits, run_seed=cfg.seed,
                           feedback=parse_feedback(spec))
        out.append(eval_summary(cond, res))
        log.info("eval %s: %s", cond, out[-1])
    return out


def eval_summary(cond: Literal["unprompted", "hinted"], res: list) -> EvalSummary:
    """One condition's numbers from its ``EpisodeResult``s: infrastructure errors are counted, never scored."""
    scored = [r for r in res if r.failure_class in ("none", "agent")]
    # the Markdown checker the tasks name (markdown@v1 or @v2: harness.behaviour), as the episodes were judged
    md = [next((b for b in r.behaviour if b.checker.startswith("markdown@")), None) for r in scored]
    appl = [b for b in md if b is not None and any(v != "NA" for v in b.turn_verdicts)]
    validity = [r.metrics.tool_call_validity for r in scored if r.metrics.tool_call_validity is not None]
    return EvalSummary(
        condition=cond, n=len(scored), resolved_rate=sum(r.resolved for r in scored) / max(1, len(scored)),
        compliance=(sum(all(v != "FAIL" for v in b.turn_verdicts) for b in appl) / len(appl)) if appl
        else math.nan, n_applicable=len(appl), n_na=len(scored) - len(appl),
        infra_errors=len(res) - len(scored),
        finish_rate=sum(r.status in FINISHED for r in scored) / len(scored) if scored else math.nan,
        tool_call_validity=sum(validity) / len(validity) if validity else math.nan)


class ProbeSummary(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    condition: Literal["unprompted", "hinted"]
    n: int
    finish_rate: float        # share of sampled turns that call finish
    compliance: float         # PASS / (PASS + FAIL) of markdown@v1 on the sampled turn; NaN if none applicable
    n_applicable: int


def summary_probe(model, tok, trajs: list, *, temperature: float = 1.0, max_new_tokens: int = 320,
                  seed: int = 0) -> list[ProbeSummary]:
    """Can-do vs does-do of the FORMAT alone, independent of coding ability: for each (expert) trajectory, cut the
    context just before its final assistant turn (dropping any hint), then sample that turn from ``model`` without
    and with the Markdown reminder inserted, and judge it with ``markdown@v1``. A diagnostic, not the held-out
    episode metric (which needs the model to reach the summary turn by itself)."""
    from harness.behaviour import get_checker, hint_text
    from harness.schema import Message
    from harness.tools import parse_tool_calls, tool_schemas
    from repro.sampler import KVSampler, SamplerPolicy

    checker = get_checker("markdown@v1")
    policy = SamplerPolicy(KVSampler(model), tok, max_new_tokens=max_new_tokens, temperature=temperature)
    out = []
    for cond in ("unprompted", "hinted"):
        verdicts, finishes = [], 0
        for i, tr in enumerate(trajs):
            last = max(j for j, m in enumerate(tr.messages) if m.role == "assistant")
            ctx = [m for m in tr.messages[:last] if not m.is_hint]
            if cond == "hinted":
                ctx.append(Message(role="user", content=hint_text("markdown@v1"), is_hint=True))
            res = policy.act(ctx, tools=tool_schemas(), rng=random.Random(f"probe:{seed}:{i}:{cond}"))
            calls = parse_tool_calls(res.text)
            finishes += any(c.name == "finish" for c in calls)
            verdicts.append(checker.verify_turn(Message(role="assistant", content=res.text, tool_calls=calls)))
        appl = [v for v in verdicts if v != "NA"]
        out.append(ProbeSummary(condition=cond, n=len(trajs), finish_rate=finishes / max(1, len(trajs)),
                                compliance=sum(v == "PASS" for v in appl) / len(appl) if appl else math.nan,
                                n_applicable=len(appl)))
    return out
