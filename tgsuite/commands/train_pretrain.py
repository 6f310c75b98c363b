"""``tgsuite train pretrain``: pretrain the mini base from nothing, resumable across sessions."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from tgsuite.commands.common import CLIError

EPILOG = """\
Worked example:
  tgsuite train pretrain --preset mini --out runs/pretrain             # hours on 2 CPU cores; resumable
  tgsuite train pretrain --preset mini --out runs/pretrain --stop-after-min 30   # 30 minutes now, more later
  tgsuite train pretrain --preset nano --out /tmp/pt                   # seconds (tests)
  tgsuite train pretrain --out runs/pretrain --export-resume state/    # carry the run to another machine ...
  tgsuite train pretrain --preset mini --out runs/p2 --resume-from state/   # ... and continue it there
  tgsuite train pretrain --out runs/pretrain --export-base bases/mini      # ship it: bf16 + manifest + sha256s
  tgsuite train pretrain --preset mini --out runs/pc --from-base base:mini  # a later phase, from a shipped base

Re-running the same command resumes from the newest checkpoint in --out (written every few minutes, at every
stage end and on Ctrl-C / SIGTERM) and sees exactly the batches an uninterrupted run would. Progress:
OUT/metrics.jsonl (one line per step), OUT/probes.jsonl (held-out copy probes), OUT/pretrain_state.json.
"""


def add_parser(sub: Any) -> None:
    p = sub.add_parser("pretrain", help="pretrain the mini base (curriculum: synthetic copying, then the world)",
                       description=__doc__, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="mini", help="pretraining recipe: mini (the shipped base) or nano (tests)")
    p.add_argument("--out", type=Path, required=True, help="run directory (created, or resumed)")
    p.add_argument("--max-steps", type=int, help="stop after this many more optimizer steps")
    p.add_argument("--stop-after-min", type=float, help="stop (with a checkpoint) after this many minutes")
    p.add_argument("--threads", type=int, help="torch intra-op threads (default: the recipe's)")
    p.add_argument("--resume-from", type=Path, help="start --out from a resume state (a folder written by "
                   "--export-resume), e.g. the one committed in the repository")
    p.add_argument("--from-base", metavar="BASE", help="start a new --out where a restart phase of the recipe begins, "
                   "from a shipped base of the phase before (base:mini = the one in this checkout, or a folder); "
                   "refused unless the base's recipe and step are that phase's start")
    p.add_argument("--export-resume", type=Path, metavar="DIR", help="copy --out's resume state (config, tokenizer, "
                   "newest checkpoint) to DIR, replacing it, and exit without training")
    p.add_argument("--export-base", type=Path, metavar="DIR", help="write --out's newest checkpoint to DIR as a "
                   "bf16 base with a manifest (recipe hash, tokens seen, probes, commit, sha256 of every file), and "
                   "exit without training")
    p.set_defaults(func=_pretrain)


def _pretrain(args: argparse.Namespace) -> int:
    from repro.pretrain.loop import PretrainError, run_pretrain
    from repro.pretrain.presets import preset
    from repro.pretrain.resume import ResumeError, export_resume, seed_from
    from repro.pretrain.ship import BaseIntegrityError, export_base

    try:
        if args.export_base is not None:
            m = export_base(args.out, args.export_base)
            print(f"exported base {args.export_base}: step {m.step} of {m.total_steps}, {m.tokens_seen / 1e6:.2f}M "
                  f"tokens, {sum((args.export_base / f).stat().st_size for f in m.files) / 1e6:.1f} MB")
            return 0
        if args.export_resume is not None:
            print(f"exported {export_resume(args.out, args.export_resume)}")
            return 0
        if args.resume_from is not None:
            print(f"seeded {args.out} from {seed_from(args.resume_from, args.out)}")
    except (ResumeError, BaseIntegrityError) as exc:
        raise CLIError(str(exc)) from exc

    try:
        cfg = preset(args.preset)
    except ValueError as exc:
        raise CLIError(str(exc)) from exc
    if args.threads is not None:
        if args.threads < 1:
            raise CLIError(f"--threads {args.threads}: give at least 1.")
        cfg = cfg.model_copy(update={"torch_threads": args.threads})
    for flag, value in (("--max-steps", args.max_steps), ("--stop-after-min", args.stop_after_min)):
        if value is not None and value <= 0:
            raise CLIError(f"{flag} {value}: give a positive number (or leave it out to run to the end).")
    if args.from_base is not None:
        from repro.pretrain.from_base import seed_from_base
        from repro.pretrain.ship import resolve_init

        try:
            at = seed_from_base(resolve_init(args.from_base), cfg, args.out)
        except (PretrainError, BaseIntegrityError) as exc:
            raise CLIError(str(exc)) from exc
        print(f"seeded {args.out} from base {args.from_base} at step {at}")
    try:
        st = run_pretrain(cfg, args.out, max_steps=args.max_steps,
                          stop_after_s=None if args.stop_after_min is None else args.stop_after_min * 60)
    except PretrainError as exc:
        raise CLIError(str(exc)) from exc
    last = st.probes[-1] if st.probes else None
    print(f"{st.status}: step {st.step} of {cfg.total_steps} ({st.tokens_seen / 1e6:.2f}M tokens, {st.wall_s / 60:.1f} "
          f"min of training) in {args.out}")
    if last:
        print(f"probes at step {last.step}: induction {last.induction:.3f}, path exact {last.path_exact:.3f}, "
              f"old line exact {last.old_exact:.3f}")
    return 0
