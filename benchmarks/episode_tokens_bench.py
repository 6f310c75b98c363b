"""Benchmark: how many tokens a mini expert episode costs, and where they go.

Generates train tasks (default: the mini preset's first 13 repositories x 10 tasks) and held-out tasks, runs
``ScriptedExpert`` (``think=False``, as the mini SFT preset) for ``--episodes`` train episodes (default 128, the mini
preset's SFT) in a ``LocalSandbox`` exactly as the SFT stage collects them (``repro.sft.collect_expert_trajectories``:
``hint_share`` of the episodes get a hint), trains the tokenizer the way the SFT stage trains it (byte-level BPE on
those rendered conversations, ``--vocab-size``, default the mini preset's 4,096) and prints, per split:

- ``tokens_median`` / ``tokens_p90``: tokens per episode (``ChatEncoder.encode(messages, tools=tool_schemas())``);
- ``assistant_turns_median`` and ``assistant_token_share`` (tokens the policy generated / all tokens);
- ``tool_output_tokens_median``: tokens inside ``<tool_response>`` blocks, and ``run_tests_tokens_median``;
- the constant part: ``system_block_tokens`` (system prompt + tools as the template renders them) and
  ``tool_schema_tokens`` (the ``<tools>`` JSON lines alone);
- ``tokens_by_part_mean``: tokens per episode in the system block, the issue, hints, assistant turns and each
  tool's observations (message bodies; the template's framing tokens are in none);
- on held-out (every task once, no hints): ``resolve_rate`` (the real grader in a fresh sandbox, hidden tests) and
  ``finished_rate``.

It measures the code it runs; to compare two commits run it on each. Measured on this 2-core machine with the
defaults (128 train episodes, 20 held-out), main at 2bec4a7 -> after issue #20's compact episodes:
system block 951 -> 448 tokens (tool schemas 695 -> 333, system prompt 161 -> 36); train median 2,403 -> 1,542
(p90 2,708 -> 1,695), 7 assistant turns in both, assistant share 11.1 % -> 15.8 %; run_tests output per episode
(median) 286 -> 122; held-out median 2,532 -> 1,724, expert resolve rate 1.0 -> 1.0 (20 of 20). Counted with the shipped base's
tokenizer (``--tokenizer assets/base/mini``), 32 train episodes and 8 held-out, ``--test-view read`` -> ``search``:
train median 1,710 -> 1,427 (read_file 563 -> 212 tokens per episode, search 56), held-out 1,816 -> 1,527,
7 assistant turns in both, expert resolve rate 8 of 8 in both.
Usage:  python benchmarks/episode_tokens_bench.py [--episodes 128] [--heldout-repos 10] [--seed 0] [--tokenizer DIR]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.agent import run_episode  # noqa: E402
from harness.grading import extract_patch, grade_patch  # noqa: E402
from harness.interfaces import EpisodeLimits  # noqa: E402
from harness.minirepos import make_mini  # noqa: E402
from harness.policies.scripted import ScriptedExpert  # noqa: E402
from harness.runner_sandbox import TaskSandboxFactory  # noqa: E402
from harness.sandbox import SandboxSpec  # noqa: E402
from harness.tasks import load_task_set  # noqa: E402
from harness.tools import tool_schemas  # noqa: E402
from repro.sft import collect_expert_trajectories  # noqa: E402
from repro.tokenizer import ChatEncoder, tool_json, train_tokenizer  # noqa: E402

SPEC = SandboxSpec(env={"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONDONTWRITEBYTECODE": "1"})


def _p90(xs: list[int]) -> float:
    return statistics.quantiles(xs, n=10, method="inclusive")[-1] if len(xs) > 1 else float(xs[0])


def _heldout_episodes(task_dir: Path, seed: int, test_view: str) -> tuple[list, list[bool]]:
    """The expert on every held-out task without hints, graded by the real grader (hidden tests)."""
    ts = load_task_set(task_dir)
    trajs, resolved = [], []
    with TaskSandboxFactory(ts, kind="local", run_id="bench-episode-tokens", spec=SPEC) as fac:
        for k, inst in enumerate(ts.instances):
            sb, head = fac.open(inst, role="agent", attempt=0)
            with sb:
                traj = run_episode(inst, ScriptedExpert(think=False, test_view=test_view), sb, EpisodeLimits(per_exec_timeout_s=120),
                                   seed=seed * 100_003 + k)
                patch = extract_patch(sb, head)
            gsb, _ = fac.open(inst, role="grade", attempt=0)
            with gsb:
                grade = grade_patch(inst, patch, gsb, timeout_s=120)
            if not grade.valid:
                raise RuntimeError(f"{inst.instance_id}: grading infrastructure failed ({grade.reason})")
            trajs.append(traj)
            resolved.append(grade.resolved)
    return trajs, resolved


def _part(m) -> str:  # noqa: ANN001
    if m.role == "tool":
        return f"tool:{m.tool_name}"
    return "hint" if m.is_hint else m.role


def _parts(enc: ChatEncoder, messages: list, tools: list) -> dict[str, int]:
    """Tokens per part of one episode (message bodies; the template's framing tokens are in none)."""
    out = {"system_block": len(enc.system_ids(messages[0].content, tools))}
    for m in messages[1:]:
        out[_part(m)] = out.get(_part(m), 0) + len(enc.text_ids(m.content))
    return out


def _split_stats(enc: ChatEncoder, trajs: list, tools: list) -> dict[str, float]:
    totals, shares, turns, tool_out, run_out = [], [], [], [], []
    parts: dict[str, list[int]] = {}
    for tr in trajs:
        for k, v in _parts(enc, tr.messages, tools).items():
            parts.setdefault(k, []).append(v)
        e = enc.encode(tr.messages, tools)
        totals.append(len(e))
        shares.append(sum(e.act) / len(e))
        turns.append(sum(1 for m in tr.messages if m.role == "assistant"))
        tool_msgs = [m for m in tr.messages if m.role == "tool"]
        tool_out.append(sum(len(enc.text_ids(m.content)) for m in tool_msgs))
        run_out.append(sum(len(enc.text_ids(m.content)) for m in tool_msgs if m.tool_name == "run_tests"))
    return {"episodes": len(trajs), "tokens_median": statistics.median(totals), "tokens_p90": _p90(totals),
            "tokens_max": max(totals), "assistant_turns_median": statistics.median(turns),
            "assistant_token_share": round(sum(s * n for s, n in zip(shares, totals, strict=True)) / sum(totals), 4),
            "tool_output_tokens_median": statistics.median(tool_out),
            "run_tests_tokens_median": statistics.median(run_out),
            "tokens_by_part_mean": {k: round(sum(v) / len(trajs), 1) for k, v in sorted(parts.items())}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--train-repos", type=int, default=13)
    ap.add_argument("--train-tasks-per-repo", type=int, default=10, help="as the mini preset")
    ap.add_argument("--episodes", type=int, default=128, help="train episodes (the mini preset's SFT episodes)")
    ap.add_argument("--heldout-repos", type=int, default=10)
    ap.add_argument("--heldout-tasks-per-repo", type=int, default=2)
    ap.add_argument("--hint-share", type=float, default=0.3, help="as SFTConfig.hint_share")
    ap.add_argument("--vocab-size", type=int, default=4096, help="the mini preset's SFT vocabulary")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--test-view", choices=("read", "search"), default="search",
                    help="how the expert looks at the visible tests (harness.policies.expert_test_view): grep the test "
                         "file for the function's calls (default) or read all of it (the mini SFT preset's view)")
    ap.add_argument("--tokenizer", default=None, metavar="DIR",
                    help="count with this tokenizer (an HF tokenizer folder, e.g. a base's, assets/base/mini) "
                         "instead of one trained on the episodes")
    args = ap.parse_args()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="episode-tokens-") as tmp:
        train_dir, held_dir = Path(tmp) / "train", Path(tmp) / "heldout"
        make_mini(train_dir, split="train", repos=args.train_repos, tasks_per_repo=args.train_tasks_per_repo,
                  seed=args.seed)
        make_mini(held_dir, split="heldout", repos=args.heldout_repos, tasks_per_repo=args.heldout_tasks_per_repo,
                  seed=args.seed)
        train = collect_expert_trajectories(train_dir, episodes=args.episodes, hint_share=args.hint_share,
                                            think=False, seed=args.seed, workers=1, test_view=args.test_view)
        held, resolved = _heldout_episodes(held_dir, args.seed, args.test_view)
    tools = tool_schemas()
    probe = train_tokenizer([json.dumps(tools)], vocab_size=300, min_frequency=1)  # as repro.sft does
    corpus = [probe.apply_chat_template([m.model_dump() for m in tr.messages], tools=tools, tokenize=False)
              for tr in train]
    if args.tokenizer:
        from transformers import AutoTokenizer

        enc = ChatEncoder(AutoTokenizer.from_pretrained(args.tokenizer))
    else:
        enc = ChatEncoder(train_tokenizer(corpus, vocab_size=args.vocab_size))
    system = train[0].messages[0].content
    schema_ids = enc.text_ids("".join("\n" + tool_json(t) for t in tools))
    print(json.dumps({
        "test_view": args.test_view,
        "vocab_size_reached": len(enc.tok),
        "system_block_tokens": len(enc.system_ids(system, tools)),
        "system_prompt_tokens": len(enc.text_ids(system)),
        "tool_schema_tokens": len(schema_ids),
        "train": _split_stats(enc, train, tools),
        "heldout": {**_split_stats(enc, held, tools), "resolve_rate": round(sum(resolved) / len(resolved), 4),
                    "finished_rate": round(sum(t.finished for t in held) / len(held), 4)},
        "wall_s": round(time.perf_counter() - t0, 1),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }, indent=1))


if __name__ == "__main__":
    main()
