"""``tgsuite canary``: gray-release decisions (CONTINUE / ROLLBACK / PROMOTE) from logged production episodes.

Three modes: ``--freeze`` a canary plan by hash (before the first canary episode; the record is committed to git
like `tgsuite protocol freeze`'s), ``--replay`` a `tgsuite eval` run as a synthetic production log, and (the
default) decide from a log against a frozen plan, verifying the record's git anchor and writing ``canary.json``
and the report page ``canary.html``. The work is library code: ``protocols.canary``,
``evalsuite.canary`` (``monitor.run_canary``, ``replay.replay``) and ``reports.canary_page``.
"""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from tgsuite.commands.common import CLIError, anchor_line

EPILOG = """\
worked example (measured: a real `tgsuite eval` run, 12 mini tasks x 2 seeds in Docker, the scripted `expert`
policy as control and the `null` policy (it never edits) as the canary):
  $ tgsuite canary --freeze protocols/plans/canary/gray_release.toml --out prereg/gray_release.frozen.json
  froze canary plan gray_release: sha256 dc1cdd280540… at 2026-12-01T10:46:10Z; wrote prereg/gray_release.frozen.json
  anchored: commit <12 hex digits> on refs/tgsuite/prereg in <the enclosing git repository>   (printed since that run)
  $ tgsuite canary --replay runs/expert-vs-null --treatment null --control expert \\
        --plan prereg/gray_release.frozen.json --units 20000 --days 14 --seed 1 --out runs/canary-log
  wrote runs/canary-log/episodes.jsonl (100,170 episodes) and runs/canary-log/assignments.jsonl (20,000 units); ...
  $ tgsuite canary --plan prereg/gray_release.frozen.json --episodes runs/canary-log/episodes.jsonl \\
        --assignments runs/canary-log/assignments.jsonl --out runs/canary-report
  decision: ROLLBACK  (look 3, 2026-12-04T11:00:13Z; plan gray_release, sha256 dc1cdd280540…)
    - harm on task_completion: upper bound -0.9979 < 0 at alpha 0.008333 (effect -1.0000, always-valid p < 1e-300)
      task_completion        inferior     effect -1.0000  lower -1.0019  upper -0.9979  units 287/2603
      ... one line per metric, then one per preregistration check (anchor, commit_exists, ..., signature) ...
  wrote runs/canary-report/canary.json and runs/canary-report/canary.html

The episodes log is JSON Lines, one object per episode: episode_id, unit_id (the randomisation unit), arm
("control" or "canary": the ASSIGNED arm), ts (ISO 8601 with a time zone, e.g. 2026-12-01T10:00:00Z; not Unix
seconds), served_model, task_completed, code_produced, code_ran (null when no code), n_edits, rework, feedback
("up", "down" or null), tool_calls, tool_errors, hallucination_reports. served_model is the plan's control_model
or canary_model (or null). A bad row is an error naming file:line, the field and the fix.
Looks are replayed every plan.look_every_hours up to the last episode, plus one at the last episode; the bounds
are anytime-valid, so running this every hour is as safe as running it once (with method = "gst", only the
scheduled looks are GST looks: the PROMOTE bound does not move at the extra look). The plan must have been frozen
before the first episode.
--freeze also commits the record's exact bytes to refs/tgsuite/prereg of the enclosing git repository (a new one in
the record's folder when there is none; your branch and index are untouched), writes REC.json.anchor.json beside it
and, with --sign-key, signs it. The decision verifies that anchor (gate prereg; every check is printed and kept in
canary.json): a record edited after freezing (frozen_at included), one without its .anchor.json, or one anchored
after the first episode cannot PROMOTE (a harm ROLLBACK still happens; otherwise CONTINUE). To go on, freeze the plan
again into a NEW record and start a new canary with traffic routed after that freeze.
Exit code 0 whatever the decision; 2 on bad input.
"""


def _freeze(args: argparse.Namespace) -> int:
    from protocols.canary import freeze_canary_plan

    if not args.out:
        raise CLIError("--freeze needs --out REC.json (where the frozen record goes)")
    rec = freeze_canary_plan(args.freeze, out=args.out, overwrite=args.overwrite, sign_key=args.sign_key)
    print(f"froze canary plan {rec.plan.name}: sha256 {rec.sha256} at {rec.frozen_at}; wrote {args.out}")
    print(anchor_line(args.out))
    from evalsuite.canary.decide import srm_wait
    from evalsuite.canary.monitor import srm_units_needed

    plan, need = rec.plan, srm_units_needed(rec.plan)
    if need is None or need > plan.horizon_units:
        print("warning: " + srm_wait(plan, 0, need)[0] + f"; the horizon is {plan.horizon_units} units")
    else:
        print(f"PROMOTE waits for {need} assigned units: the SRM check then flags a canary share of "
              f"{plan.srm_detect_share:.3g} (design {plan.canary_share:.3g}) with power {plan.srm_power:g}")
    return 0


def _replay(args: argparse.Namespace) -> int:
    import numpy as np

    from evalsuite.canary.replay import ReplayConfig, replay, write_jsonl
    from protocols.canary import load_frozen_canary, parse_utc

    if not (args.treatment and args.control and args.out):
        raise CLIError("--replay needs --treatment ARM --control ARM --out DIR")
    plan = load_frozen_canary(args.plan).plan if args.plan else None
    share = args.share if args.share is not None else (plan.canary_share if plan else 0.1)
    next_hour = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    start = parse_utc(args.start) if args.start else next_hour
    cfg = ReplayConfig(start=start, n_units=args.units, canary_share=share, days=args.days, aa=args.aa,
                       control_model=plan.control_model if plan else "prod-current",
                       canary_model=plan.canary_model if plan else "tg-candidate")  # fmt: skip
    log = replay(args.replay, treatment=args.treatment, control=args.control, cfg=cfg,
                 rng=np.random.default_rng(args.seed))  # fmt: skip
    out = Path(args.out)
    write_jsonl(log.episodes, out / "episodes.jsonl")
    write_jsonl(log.assignments, out / "assignments.jsonl")
    print(f"wrote {out / 'episodes.jsonl'} ({len(log.episodes):,} episodes) and {out / 'assignments.jsonl'} "
          f"({len(log.assignments):,} units); drawn from {log.source_episodes['control']} control and "
          f"{log.source_episodes['canary']} canary eval episodes ({log.excluded_infra} infra episodes not used)")  # fmt: skip
    return 0


def _decide(args: argparse.Namespace) -> int:
    from evalsuite.canary.monitor import run_canary
    from reports.canary_page import render_canary_page

    if not (args.plan and args.episodes):
        raise CLIError("pass --plan REC.json --episodes LOG.jsonl (or --freeze / --replay; see --help)")
    res = run_canary(args.plan, args.episodes, args.assignments, public_key=args.verify_key)
    out = Path(args.out or "canary-report")
    out.mkdir(parents=True, exist_ok=True)
    data = json.loads(res.model_dump_json())
    (out / "canary.json").write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    (out / "canary.html").write_text(render_canary_page(data), encoding="utf-8")
    last = res.looks[-1]
    print(f"decision: {res.decision}  (look {last.index}, {last.as_of}; plan {res.plan_name}, "
          f"sha256 {res.plan_sha256[:12]}…)")  # fmt: skip
    for r in res.reasons:
        print(f"  - {r}")
    for m in last.metrics:
        def f(x: float | None) -> str:
            return "     n/a" if x is None else f"{x:+.4f}"

        print(f"    {m.name:22s} {m.status:12s} effect {f(m.effect)}  lower {f(m.lower)}  upper {f(m.upper)}"
              f"  units {m.n_canary}/{m.n_control}")  # fmt: skip
    for chk in res.prereg_checks:
        print(f"  preregistration {chk.name}: {chk.status} ({chk.detail})")
    prereg = next(g for g in last.gates if g.name == "prereg")
    if prereg.level != "ok":
        print(f"prereg gate {prereg.level.upper()}: {prereg.detail}")
    print(f"wrote {out / 'canary.json'} and {out / 'canary.html'}")
    return 0


def _run(args: argparse.Namespace) -> int:
    from evalsuite.rates import StatsInputError
    from protocols.load import ProtocolError

    try:
        if args.freeze:
            return _freeze(args)
        if args.replay:
            return _replay(args)
        return _decide(args)
    except (ProtocolError, StatsInputError, ValueError) as exc:
        raise CLIError(str(exc)) from None


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("canary", help="gray release: CONTINUE / ROLLBACK / PROMOTE from logged episodes",
                              description=__doc__, epilog=EPILOG,
                              formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--plan", help="frozen canary plan record (from --freeze)")
    p.add_argument("--episodes", help="episodes log, JSON Lines (one object per episode)")
    p.add_argument("--assignments", help="optional assignments log (unit_id, arm, assign_ts): SRM and first exposure")
    p.add_argument("--out", help="decide: report folder (default canary-report); --freeze: record; --replay: folder")
    p.add_argument("--freeze", metavar="PLAN.toml", help="freeze a canary plan by hash and exit")
    p.add_argument("--overwrite", action="store_true", help="with --freeze: replace a record of another plan (the "
                   "prereg ref keeps the earlier record at that path, so the new one cannot PROMOTE: prefer a new file)")
    p.add_argument("--sign-key", help="with --freeze: Ed25519 private key (PEM, from `tgsuite protocol keygen`) to sign "
                   "the record")
    p.add_argument("--verify-key", help="Ed25519 public key (hex) the record's signature must verify with")
    p.add_argument("--replay", nargs="+", metavar="RUN_DIR", help="turn `tgsuite eval` run dir(s) into a synthetic log")
    p.add_argument("--treatment", help="--replay: the eval arm served to the canary")
    p.add_argument("--control", help="--replay: the eval arm served to control")
    p.add_argument("--units", type=int, default=20000, help="--replay: randomisation units (default 20000)")
    p.add_argument("--share", type=float, help="--replay: canary share (default: the plan's, else 0.1)")
    p.add_argument("--days", type=float, default=14.0, help="--replay: arrival window in days (default 14)")
    p.add_argument("--start", help="--replay: first arrival, ISO 8601 UTC (default: the next full hour)")
    p.add_argument("--seed", type=int, default=0, help="--replay: RNG seed (default 0)")
    p.add_argument("--aa", action="store_true", help="--replay: both arms from the control arm (an A/A log)")
    p.set_defaults(func=_run)
