"""Benchmark (b): one RL step of our `grpo` arm against TRL's GRPOTrainer — same model, batch, completion length.

Both sides: the same randomly initialised tiny Qwen3 (``--preset``, tokenizer trained here), the same prompts
(rendered by the same chat template), ``--groups`` prompts × ``--n`` completions per step, completions up to
``--completion`` tokens at temperature 1, the same text reward, Dr.GRPO-style settings (TRL: ``loss_type="dapo"``,
``scale_rewards="none"``, ``beta=0``), AdamW, one optimizer step per batch, all sequences in one micro-batch.
A step = sampling + reward + loss + backward + optimizer step. Each variant runs in its own subprocess (so peak RSS
is its own), does ``--warmup`` steps, then ``--steps`` timed steps (median per run); runs alternate between the two
sides ``--repeats`` times; we report the best and median step time, generated tokens per step and peak RSS, and the
ratio TRL / ours (> 1 means ours is faster).

Differences that remain and are part of what is measured: we sample with ``repro.sampler.KVSampler`` (shared-prompt
prefill, compaction), TRL with ``model.generate``; we compute log-probs in checkpointed chunks from hidden states,
TRL from full logits. Single-turn only (TRL's GRPOTrainer step), so no environment cost on either side.

Usage:  python benchmarks/grpo_step_bench.py [--preset mini] [--groups 4] [--n 8] [--completion 64] [--threads 1]
        [--repeats 2]

Note: on a machine shared with other work, use --threads 1; with 2 threads and other processes running, torch's
thread pool spin-waits and both sides slow down 10x or more (measured), which swamps the comparison.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PROMPTS = [f"Task {i}: fix the bug in module_{i}.py and explain the change in a short summary." for i in range(64)]


def reward_text(text: str) -> float:
    return text.count("a") / max(1, len(text))


def _tokenizer(vocab: int):  # noqa: ANN202
    from repro.tokenizer import train_tokenizer

    corpus = PROMPTS * 4 + ["## Summary\n- fixed `add` in `calc.py`\n- ran the tests"] * 50
    return train_tokenizer(corpus, vocab_size=vocab, min_frequency=1)


def _model(preset: str, tok):  # noqa: ANN001, ANN202
    from repro.models import build_model

    return build_model(preset, len(tok), seed=0, pad_token_id=tok.pad_token_id,
                       eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"))


def run_ours(a: argparse.Namespace) -> dict:
    from harness.schema import Message, TaskInstance
    from repro.config import load_config
    from repro.rollout import EnvOutcome, StepOut
    from repro.train import RLSetup, train_rl

    tok = _tokenizer(a.vocab)
    tasks = [TaskInstance(instance_id=f"p{i}", repo="b", base_commit="0", problem_statement=p, patch="",
                          test_patch="", FAIL_TO_PASS=["x"]) for i, p in enumerate(PROMPTS)]

    class Env:
        def __init__(self, inst: TaskInstance, seed: int) -> None:
            self.inst, self.text = inst, ""

        def reset(self) -> list[Message]:
            return [Message(role="user", content=self.inst.problem_statement)]

        def step(self, text: str) -> StepOut:
            self.text = text
            return StepOut([], True)

        def outcome(self) -> EnvOutcome:
            return EnvOutcome(resolved=False)

        def close(self) -> None:
            pass

    steps = a.warmup + a.steps
    cfg = load_config(arm="grpo", sets=[
        f"run.steps={steps}", "run.progress=false", f"rollout.groups={a.groups}", f"rollout.group_size={a.n}",
        "rollout.max_turns=1", f"rollout.max_new_tokens={a.completion}", f"model.threads={a.threads}",
        f"optim.micro_batch={a.groups * a.n}", "tasks.shuffle=false", "rollout.max_context_tokens=4096"])
    setup = RLSetup(tokenizer=tok, model=_model(a.preset, tok), tasks=tasks, make_env=Env,
                    checker=lambda msgs: ["NA"] * len(msgs), hint_text=lambda *x: "")
    import repro.train as T

    orig_take = T._Sources.take

    def take(self, step):  # noqa: ANN001, ANN202
        groups = orig_take(self, step)  # the same text reward as TRL's, set before advantages are computed
        for g in groups:
            for s in g:
                s.reward = reward_text(s.texts[0]) if s.texts else 0.0
        return groups

    with tempfile.TemporaryDirectory() as d:
        T._Sources.take = take
        train_rl(cfg, Path(d) / "run", setup=setup)
        rows = [json.loads(x) for x in (Path(d) / "run" / "metrics.jsonl").read_text().splitlines()]
        wall = json.loads((Path(d) / "run" / "manifest.json").read_text())["compute"]["wall_s"]
    times = [r["time/step_s"] for r in rows[a.warmup:]]
    toks = [r["rollout/response_tokens"] * a.groups * a.n for r in rows[a.warmup:]]
    return {"step_s": statistics.median(times), "tokens_per_step": statistics.median(toks),
            "phase_wall_s_all_steps": {k: round(v, 2) for k, v in wall.items() if v}}


def run_trl(a: argparse.Namespace) -> dict:
    import torch
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    torch.set_num_threads(a.threads)
    tok = _tokenizer(a.vocab)
    model = _model(a.preset, tok)
    ds = Dataset.from_list([{"prompt": [{"role": "user", "content": p}]} for p in PROMPTS])

    def reward(completions, **kw):  # noqa: ANN001, ANN003, ANN202
        return [reward_text(c[0]["content"] if isinstance(c, list) else c) for c in completions]

    times: list[float] = []
    toks: list[float] = []

    class Timer(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):  # noqa: ANN001, ANN003, ANN202
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):  # noqa: ANN001, ANN003, ANN202
            times.append(time.perf_counter() - self.t0)

        def on_log(self, args, state, control, logs=None, **kw):  # noqa: ANN001, ANN003, ANN202
            if logs and "completions/mean_length" in logs:
                toks.append(logs["completions/mean_length"] * a.groups * a.n)

    with tempfile.TemporaryDirectory() as d:
        cfg = GRPOConfig(output_dir=d, per_device_train_batch_size=a.groups * a.n, num_generations=a.n,
                         max_completion_length=a.completion, max_steps=a.warmup + a.steps, learning_rate=1e-6,
                         beta=0.0, loss_type="dapo", scale_rewards="none", temperature=1.0, top_p=1.0,
                         logging_steps=1, save_strategy="no", report_to=[], use_cpu=True, bf16=False,
                         dataloader_num_workers=0, seed=0, adam_beta2=0.95, weight_decay=0.01, max_grad_norm=1.0,
                         disable_tqdm=True)
        trainer = GRPOTrainer(model=model, reward_funcs=reward, args=cfg, train_dataset=ds, processing_class=tok,
                              callbacks=[Timer()])
        trainer.train()
    return {"step_s": statistics.median(times[a.warmup:]), "tokens_per_step": statistics.median(toks[a.warmup:])
            if toks else None}


def child(a: argparse.Namespace) -> None:
    import torch

    torch.set_num_threads(a.threads)
    out = run_ours(a) if a.variant == "ours" else run_trl(a)
    out["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print("RESULT " + json.dumps(out))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="mini", choices=("nano", "mini"))
    p.add_argument("--vocab", type=int, default=1024)
    p.add_argument("--groups", type=int, default=4)
    p.add_argument("--n", type=int, default=8)
    p.add_argument("--completion", type=int, default=64)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--threads", type=int, default=1, help="torch threads per variant (1 is robust on a busy machine)")
    p.add_argument("--repeats", type=int, default=2, help="alternating runs per variant")
    p.add_argument("--variant", choices=("ours", "trl"), help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.variant:
        child(a)
        return
    runs: dict[str, list[dict]] = {"ours": [], "trl": []}
    args = [x for x in sys.argv[1:]]
    for r in range(a.repeats):  # alternate the order so drifting machine load hits both sides alike
        for variant in (("ours", "trl") if r % 2 == 0 else ("trl", "ours")):
            cmd = [sys.executable, __file__, "--variant", variant] + args
            proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
            line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
            if proc.returncode != 0 or not line:
                print(proc.stdout[-3000:], proc.stderr[-3000:], file=sys.stderr)
                raise SystemExit(f"{variant} failed (exit {proc.returncode})")
            runs[variant].append(json.loads(line[0][7:]))
            print(variant, runs[variant][-1], flush=True)
    summary = {}
    for v, rs in runs.items():
        steps = [x["step_s"] for x in rs]
        summary[v] = {"step_s_min": min(steps), "step_s_median": statistics.median(steps),
                      "tokens_per_step": rs[0]["tokens_per_step"], "peak_rss_mib": max(x["peak_rss_mib"] for x in rs)}
    ratio_min = summary["trl"]["step_s_min"] / summary["ours"]["step_s_min"]
    ratio_med = summary["trl"]["step_s_median"] / summary["ours"]["step_s_median"]
    print(json.dumps({"config": vars(a), **summary, "speedup_min": ratio_min, "speedup_median": ratio_med}, indent=2))
    print(f"one grpo step (best of {a.repeats}): ours {summary['ours']['step_s_min']:.2f} s vs TRL GRPOTrainer "
          f"{summary['trl']['step_s_min']:.2f} s -> TRL/ours = {ratio_min:.2f} (median ratio {ratio_med:.2f}); "
          f"peak RSS ours {summary['ours']['peak_rss_mib']:.0f} MiB, TRL {summary['trl']['peak_rss_mib']:.0f} MiB")


if __name__ == "__main__":
    main()
