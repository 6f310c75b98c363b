"""``tgsuite analyze``: the preregistered confirmatory analysis → ``analysis.json`` (evalsuite.schema.AnalysisResult)."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from tgsuite.commands.common import CLIError

log = logging.getLogger(__name__)

EPILOG = """\
example:
  $ tgsuite analyze --protocol prereg/paper_claims.frozen.json --runs runs/eval-tg-grpo --out analysis.json
  decision: NO_SHIP  (plan paper_claims, sha256 3f1c2a…)
    code_ok       noninferiority      est +0.012  95% CI [-0.031, +0.055]  L -0.024 > bar -0.050  pass
    behaviour_ok  superiority_margin  est +0.210  95% CI [+0.120, +0.300]  L +0.132 > bar +0.100  pass
    joint_ok      superiority         est +0.020  95% CI [-0.040, +0.080]  L -0.031 <= bar +0.000 fail
  coverage 0.994 (threshold 0.950); 0 deviation(s); wrote analysis.json

Runs are `tgsuite eval` output directories. Arms map to the plan's arms by name; a runner arm named
'<arm>@s<seed>' (e.g. 'tg@s2') carries the training seed, or one run per seed with ArmSpec.train_seed set.
Decision: SHIP only if every criterion's one-sided lower bound clears its bar (intersection-union test);
INCONCLUSIVE when coverage is below the plan's threshold, data are degenerate, or there are too few seeds.
The analysis refuses runs whose manifest names another plan hash or predates the freeze, and a --plan that no
longer matches the record, unless a deviation is recorded (`tgsuite protocol deviation`). It verifies the record's
git anchor (the commit exists, is on refs/tgsuite/prereg, holds the record byte for byte and is older than the
first checkpoint and every run) and its signature; a failed check makes the verdict INCONCLUSIVE.
Exit code 0 whatever the decision; 2 on bad input.
"""


def _fmt(x: float | None, sign: bool = True) -> str:
    return "   n/a" if x is None else (f"{x:+.3f}" if sign else f"{x:.3f}")


def _run(args: argparse.Namespace) -> int:
    from evalsuite.analyze import analyze
    from evalsuite.rates import StatsInputError
    from harness.rundir import RunDirError
    from protocols.load import ProtocolError

    if Path(args.out).is_dir():
        raise CLIError(f"--out {args.out} is a directory; fix: give a file path, e.g. --out "
                       f"{Path(args.out) / 'analysis.json'}")
    missing = [r for r in args.runs if not Path(r).is_dir()]
    if missing:
        raise CLIError(f"run directory not found: {missing[0]}; pass the --out folder(s) of `tgsuite eval`")
    try:
        res = analyze(args.protocol, args.runs, plan=args.plan, deviations_path=args.deviations,
                      public_key=args.verify_key)
    except (ProtocolError, StatsInputError, RunDirError) as exc:
        raise CLIError(str(exc)) from None
    out = Path(args.out)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(out.suffix + ".tmp")
        tmp.write_text(res.model_dump_json(indent=2) + "\n", encoding="utf-8")
        tmp.replace(out)
    except OSError as exc:
        raise CLIError(f"--out {out}: cannot write it ({exc.strerror}: {exc.filename}); fix: choose a path whose "
                       "parent folders are folders you can write") from None
    print(f"decision: {res.decision.verdict}  (plan {res.plan_name}, sha256 {res.protocol_hash[:12]}…)")
    for c in res.criteria:
        op = ">" if c.verdict == "pass" else "<=" if c.verdict == "fail" else "?"
        print(f"  {c.endpoint:13s} {c.kind:18s} est {_fmt(c.estimate)}  95% CI [{_fmt(c.ci_low)}, {_fmt(c.ci_high)}]"
              f"  L {_fmt(c.lower_one_sided)} {op} bar {c.bar:+.3f}  {c.verdict}")  # fmt: skip
    for r in res.decision.reasons:
        if r.startswith(("coverage", "preregistration", "the plan has", "the missing cells", "the runs list")) or \
                "no valid lower bound" in r:
            print(f"  reason: {r}")
    md = res.missing_data
    print(f"coverage {md.coverage:.3f} (threshold {md.coverage_threshold:.3f}); {len(res.deviations)} deviation(s); "
          f"wrote {out}")  # fmt: skip
    for chk in res.prereg_checks:
        print(f"  preregistration {chk.name}: {chk.status} ({chk.detail})")
    for w in res.warnings:
        print(f"warning: {w}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("analyze", help="preregistered analysis of eval runs -> analysis.json (SHIP/NO_SHIP)",
                              description=__doc__, epilog=EPILOG,
                              formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--protocol", required=True, help="frozen plan record (from `tgsuite protocol freeze`)")
    p.add_argument("--runs", required=True, nargs="+", help="one or more run directories")
    p.add_argument("--out", default="analysis.json", help="where to write the AnalysisResult JSON")
    p.add_argument("--plan", help="plan TOML; refused if it no longer hashes to the frozen record")
    p.add_argument("--deviations", help="deviation log (default: next to the frozen record)")
    p.add_argument("--verify-key", help="Ed25519 public key (hex) the record's signature must verify with")
    p.set_defaults(func=_run)
