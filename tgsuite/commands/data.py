"""tgsuite data import|filter: logged trajectories in, a filtered dataset (with its card) out, for SFT and distill."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from tgsuite.commands.common import CLIError

EPILOG = """\
Worked example (a tgsuite eval run; OpenAI chat JSONL and Inspect .json/.eval logs import the same way):
  tgsuite eval --tasks tasks/train --policy oracle --seeds 0,1 --out runs/logs --sandbox local
  tgsuite data import runs/logs --out data/raw                  # every episode, normalised, with provenance
  tgsuite data import chats.jsonl inspect-logs/run.eval --out data/raw2 --skip-invalid
  tgsuite data filter data/raw --out data/clean --tasks tasks/train --resolved-only
  cat data/clean/card.md                                        # what each filter removed, with examples
  tgsuite train distill --dataset data/clean --out runs/distill --set model.init=runs/sft/model
  tgsuite train sft --dataset data/clean --out runs/sft-logs --preset nano

Formats (--format, default auto): a directory = a tgsuite run (`tgsuite eval --out`); .jsonl = OpenAI-style chat
completions, one conversation per line ({"messages": [...], "metadata": {"instance_id", "resolved", "reward",
"user_feedback"}}); .json / .eval = an Inspect eval log (.eval logs need pip install 'tgsuite[inspect]' for
Inspect's zstd compression). A bad record stops the import with the file, the place, the field and the fix;
--skip-invalid counts it in the card instead.

Filters (in order, each counted in card.json / card.md): infrastructure errors, malformed tool calls, truncated
episodes, leaks of hidden tests or gold patches (needs --tasks), exact duplicates, near duplicates (MinHash
Jaccard >= --near-dup-threshold, seeded with --seed), then the optional --resolved-only and --min-reward.
--min-reward compares the reward logged with each record (metadata.reward of a chat log, the reward of an
Inspect score); a record without a logged reward is removed. With --reward-from-arm ARM it instead recomputes each
record's reward with that arm's [reward] weights (repro/rewards.py; e.g. --reward-from-arm multi_reward), and the
card says so. user_feedback may be a number in [-1, 1] or "up" / "down" (read as 1 / -1).
"""


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("data", help="import logged trajectories and filter them into a training dataset",
                              description=__doc__, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="data_command", metavar="STEP")
    im = sub.add_parser("import", help="logs (tgsuite runs, OpenAI chat JSONL, Inspect logs) -> an unfiltered dataset",
                        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    im.add_argument("sources", nargs="+", metavar="SOURCE", help="log files or tgsuite run directories")
    im.add_argument("--out", type=Path, required=True, help="dataset directory to write (must not hold one)")
    im.add_argument("--format", choices=("auto", "openai", "inspect", "tgsuite"), default="auto")
    im.add_argument("--skip-invalid", action="store_true", help="count bad records in the card instead of stopping")
    im.add_argument("--instance-id", help="instance id for chat records that carry none (logs of one task)")
    im.add_argument("--score", help="Inspect: the score that is the task outcome (needed when a log has several)")
    im.set_defaults(func=_import)
    fl = sub.add_parser("filter", help="a dataset -> a filtered dataset with a card saying what each filter removed",
                        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    fl.add_argument("dataset", type=Path, help="dataset directory written by `tgsuite data import`")
    fl.add_argument("--out", type=Path, required=True, help="dataset directory to write (must not hold one)")
    fl.add_argument("--tasks", help="task-set directory: enables the leak filter (hidden tests, gold patches)")
    fl.add_argument("--near-dup-threshold", type=float, default=0.9, help="MinHash Jaccard threshold (default 0.9)")
    fl.add_argument("--no-near-dup", action="store_true", help="skip the near-duplicate filter")
    fl.add_argument("--seed", type=int, default=0, help="seed of the MinHash permutations (default 0)")
    fl.add_argument("--resolved-only", action="store_true", help="keep episodes whose task the log says was resolved")
    fl.add_argument("--min-reward", type=float,
                    help="keep episodes whose logged reward is at least this (records without one are removed)")
    fl.add_argument("--reward-from-arm", metavar="ARM",
                    help="with --min-reward: recompute each record's reward with this arm's [reward] weights "
                         "(e.g. base, multi_reward) instead of reading the logged one")
    fl.set_defaults(func=_filter)
    p.set_defaults(func=lambda a: (p.print_help(), 2)[1])


def _import(args: argparse.Namespace) -> int:
    from harness.trajdata.build import import_dataset
    from harness.trajdata.common import RecordError

    try:
        card = import_dataset(args.sources, args.out, fmt=args.format, skip_invalid=args.skip_invalid,
                              default_instance_id=args.instance_id, score_name=args.score)
    except (RecordError, FileExistsError) as exc:
        raise CLIError(str(exc)) from None
    skipped = sum(k.count for s in card.sources for k in s.skipped)
    print(f"imported {card.n_records} records from {len(card.sources)} source(s), {skipped} skipped (counted in "
          f"{args.out / 'card.md'})")
    return 0


def _reward_of(arm: str | None) -> Any:
    from repro.config import ConfigError, load_config
    from repro.dataset_io import record_reward

    try:
        weights = load_config(arm=arm).reward
    except ConfigError as exc:
        raise CLIError(str(exc)) from None
    return lambda record: record_reward(record, weights)


def _filter(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from harness.tasks import load_task_set
    from harness.trajdata.build import filter_dataset
    from harness.trajdata.filters import FilterOptions

    try:
        opts = FilterOptions(near_dup_threshold=None if args.no_near_dup else args.near_dup_threshold,
                             seed=args.seed, resolved_only=args.resolved_only, min_reward=args.min_reward)
    except ValidationError as exc:
        raise CLIError(f"{exc.errors()[0]['loc'][0]}: {exc.errors()[0]['msg']}; fix the option") from None
    if args.reward_from_arm is not None and args.min_reward is None:
        raise CLIError("--reward-from-arm only chooses how --min-reward reads rewards; fix: add --min-reward X or "
                       "drop --reward-from-arm")
    recompute = args.reward_from_arm is not None
    notes = [] if args.min_reward is None else [
        f"--min-reward {args.min_reward} compared each record's reward recomputed with the [reward] weights of arm "
        f"{args.reward_from_arm} (repro/rewards.py), not the logged reward" if recompute else
        f"--min-reward {args.min_reward} compared the reward logged with each record; records without one were "
        "removed"]
    for note in notes:
        print(f"note: {note}")
    try:
        ts = load_task_set(args.tasks) if args.tasks else None
        card = filter_dataset(args.dataset, args.out, opts, task_set=ts, notes=notes,
                              reward_of=_reward_of(args.reward_from_arm) if recompute else None)
    except (ValueError, OSError) as exc:
        raise CLIError(str(exc)) from None
    print(f"kept {card.n_records} of {card.filters[0].n_in if card.filters else card.n_records} records; "
          + ", ".join(f"{f.name} -{f.removed}" for f in card.filters) + f"; card: {args.out / 'card.md'}")
    return 0
