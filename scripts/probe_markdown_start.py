"""How likely is a model to start its summary in Markdown? A diagnostic for a finished mini run (docs/RESULTS.md,
"Run at 8ed4248": the heading probe).

For every held-out episode of the base model's evaluation that ended with a ``finish`` call, the conversation up to
that call's ``"message":`` is encoded exactly as training encodes it (``repro.tokenizer.ChatEncoder`` with the tool
schemas), with or without the Markdown reminder as a user message before the turn (``--hinted``), and the probability
of the next token being one that opens a Markdown heading (`` "#``...) is averaged over the episodes, for the SFT
model and every RL checkpoint of the run.

    .venv/bin/python scripts/probe_markdown_start.py runs/mini [--hinted] [--step 6]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.behaviour import MARKDOWN_HINT  # noqa: E402
from harness.rundir import read_trajectory  # noqa: E402
from harness.tools import tool_schemas  # noqa: E402
from repro.tokenizer import ChatEncoder, load_tokenizer  # noqa: E402


def contexts(run: Path, enc: ChatEncoder, hinted: bool) -> list[list[int]]:
    out = []
    for f in sorted((run / "eval" / "base" / "episodes").glob("*/*/*/*/trajectory.jsonl")):
        msgs = read_trajectory(f).messages
        idx = [i for i, m in enumerate(msgs) if m.role == "assistant" and any(c.name == "finish" for c in m.tool_calls)]
        if not idx:
            continue
        head = msgs[idx[-1]].content.split('"message": "')[0] + '"message":'
        conv = [{"role": m.role, "content": m.content} for m in msgs[: idx[-1]]]  # re-encoded as training encodes
        if hinted:
            conv.append({"role": "user", "content": MARKDOWN_HINT})
        ids = enc.encode([*conv, {"role": "assistant", "content": head}], tool_schemas()).ids
        out.append(ids[:-2])  # without the <|im_end|> and newline the encoder closes the turn with
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", type=Path, help="the reproduce output folder (e.g. runs/mini)")
    ap.add_argument("--hinted", action="store_true", help="add the Markdown reminder before the summary turn")
    ap.add_argument("--step", type=int, default=None, help="RL checkpoint step (default: the last)")
    args = ap.parse_args()
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(1)
    tok = load_tokenizer(args.run / "sft" / "model")
    ctxs = contexts(args.run, ChatEncoder(tok), args.hinted)
    if not ctxs:
        sys.exit(f"{args.run}/eval/base: no episode ended with a finish call; nothing to probe")
    md = [i for i in range(len(tok)) if tok.decode([i]).lstrip().startswith('"#')]
    models = {"sft": args.run / "sft" / "model"}
    for arm_dir in sorted((args.run / "train").glob("*/s*")):
        steps = sorted((arm_dir / "checkpoints").glob("step_*"), key=lambda p: int(p.name.split("_")[1]))
        pick = [p for p in steps if args.step is None or p.name == f"step_{args.step}"]
        if pick:
            models[f"{arm_dir.parent.name}@{arm_dir.name}"] = pick[-1]
    print(f"{len(ctxs)} summary contexts, {'with' if args.hinted else 'without'} the reminder; "
          f"Markdown-opening tokens: {[tok.decode([i]) for i in md]}")
    for name, path in models.items():
        m = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
        with torch.no_grad():
            ps = [float(torch.softmax(m(torch.tensor([c])).logits[0, -1].float(), -1)[md].sum()) for c in ctxs]
        print(f"{name:12s} mean {sum(ps) / len(ps):.3g}  max {max(ps):.3g}")


if __name__ == "__main__":
    main()
