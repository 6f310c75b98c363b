"""``tgsuite protocol``: preregistered analysis plans — freeze, check, power, record a deviation."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from tgsuite.commands.common import CLIError, anchor_line

log = logging.getLogger(__name__)

EPILOG = """\
A plan (TOML) says, before anything is trained, what will be compared, how, and what counts as success:
arms, held-out task set (sha256), seeds per arm, endpoints, ship criteria (superiority / non-inferiority
margins), the decision rule, the missing-data rule and the sensitivity analyses. Freezing it records the sha256
of its canonical JSON, the UTC time and the git commit; `tgsuite analyze` refuses data that do not match it
unless you record a deviation (and every deviation is shown in the report).

examples:
  # 1. is the design powerful enough? (analytic, noncentral t; add --simulate 300 for a Monte Carlo check)
  $ tgsuite protocol power protocols/plans/paper_claims.toml --seeds 3,5,10 --tasks 200,500,1000
  # 2. freeze it: the record is committed to refs/tgsuite/prereg of the enclosing git repository (a new repository
  #    in the record's folder when there is none; your branch and index are not touched) and optionally signed
  $ tgsuite protocol keygen --out ~/.tgsuite/prereg.pem
  $ tgsuite protocol freeze my_plan.toml --out prereg/my_plan.frozen.json --sign-key ~/.tgsuite/prereg.pem
  frozen my_plan: sha256 3f1c…  at 2026-11-29T21:40:00Z (git 1a2b3c4, clean)
  anchored: commit 9e0f… on refs/tgsuite/prereg in /home/me/project; signed (public key 5b2a…)
  # 3. later: is the plan file still the frozen one? (it also lists the runs registered under it: every
  #    `tgsuite eval --protocol` run is, before its first episode, and `tgsuite analyze` wants them all)
  $ tgsuite protocol check prereg/my_plan.frozen.json --plan my_plan.toml
  # 4. something changed on purpose: record it (appends to prereg/my_plan.frozen.deviations.json)
  $ tgsuite protocol deviation --frozen prereg/my_plan.frozen.json --kind run_before_freeze \\
        --run-id pilot-1 --description "pilot run started before the freeze" --justification "infra smoke test"

Copy protocols/plans/paper_claims.toml to start your own; unknown keys are errors.
"""


def _freeze(args: argparse.Namespace) -> int:
    from protocols.freeze import freeze_plan
    from protocols.load import ProtocolError

    out = Path(args.out) if args.out else Path(Path(args.plan).stem + ".frozen.json")
    try:
        rec = freeze_plan(args.plan, out=out, overwrite=args.overwrite, sign_key=args.sign_key)
    except ProtocolError as exc:
        raise CLIError(str(exc)) from None
    git = f"git {rec.git.commit[:7]}, {'DIRTY' if rec.git.dirty else 'clean'}" if rec.git.commit else "not in git"
    print(f"frozen {rec.protocol.name}: sha256 {rec.sha256} at {rec.frozen_at} ({git}) -> {out}")
    print(anchor_line(out))
    for c in rec.protocol.criteria:
        if c.kind == "noninferiority" and not c.acceptable_loss.strip():
            print(f"warning: criterion {c.endpoint}: no acceptable_loss — say why losing {c.margin} is acceptable "
                  "(CONSORT-NI 7a)")  # fmt: skip
    if rec.git.dirty:
        print("warning: the checkout has uncommitted changes; commit the plan and the record before training")
    return 0


def _keygen(args: argparse.Namespace) -> int:
    from protocols.anchor import generate_key

    if Path(args.out).exists():
        raise CLIError(f"{args.out} exists; refusing to overwrite a signing key")
    pub = generate_key(args.out)
    print(f"wrote Ed25519 private key {args.out} (keep it secret); public key {pub}")
    print("publish the public key before training; pass it to `tgsuite analyze --verify-key` to pin it")
    return 0


def _check(args: argparse.Namespace) -> int:
    from protocols.deviations import default_log_path, load_deviations
    from protocols.freeze import check
    from protocols.load import ProtocolError

    try:
        rec = check(args.frozen, args.plan)
        devs = load_deviations(default_log_path(args.frozen), protocol_hash=rec.sha256)
    except ProtocolError as exc:
        raise CLIError(str(exc)) from None
    p = rec.protocol
    print(f"ok: {p.name} v{p.version} sha256 {rec.sha256} frozen {rec.frozen_at}")
    print(f"    estimand {p.estimand}; arms {', '.join(f'{a.name} ({a.role})' for a in p.arms)}; "
          f"{p.design.seeds_per_arm} seeds/arm x {p.design.n_tasks} tasks x {p.design.episodes_per_task} episodes")  # fmt: skip
    for c in p.ordered_criteria():
        print(f"    criterion {c.endpoint}: {c.kind}, L > {c.bar:+.3f} at one-sided alpha {c.alpha_one_sided}")
    print(f"    {len(devs)} recorded deviation(s)")
    from protocols.anchor_verify import verify_anchor

    for chk in verify_anchor(args.frozen):
        if chk.name not in ("before_checkpoints", "before_results"):  # those need runs: `tgsuite analyze` checks them
            print(f"    anchor check {chk.name}: {chk.status} ({chk.detail})")
    _print_registered(args.frozen, rec.sha256)
    return 0


def _print_registered(frozen: str, sha: str) -> None:
    """The runs registered under the record (``protocols.run_registry``): every one of them that evaluated the
    plan's cells must be analysed, or set aside by a recorded deviation."""
    from protocols.load import ProtocolError
    from protocols.run_registry import registrations, registry_repo

    try:
        _, repo = registry_repo(frozen)
    except ProtocolError as exc:
        print(f"    registered runs: not available ({str(exc).split(';')[0]})")
        return
    mine = [r for r in registrations(repo) if r.protocol_sha256 == sha]
    print(f"    {len(mine)} run(s) registered under this plan" + (":" if mine else ""))
    for r in mine:
        when = r.registered_at.isoformat() if r.registered_at else "unknown time"
        listed = r.manifest.get("arms")
        arms = ", ".join(str(a.get("name")) for a in listed if isinstance(a, dict)) if isinstance(listed, list) else "?"
        print(f"      {r.run_id}: registered {when}; arms {arms}; {r.run_dir}")


def _parse_ints(text: str | None, name: str) -> list[int]:
    if not text:
        return []
    try:
        vals = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise CLIError(f"{name} must be comma-separated integers such as 3,5,10; got {text!r}") from None
    if any(v < 2 for v in vals):
        raise CLIError(f"{name}: every value must be >= 2")
    return vals


def _power(args: argparse.Namespace) -> int:
    from evalsuite.analyze import power_summaries
    from evalsuite.power import power_ni_crossed
    from protocols.load import ProtocolError, load_plan
    from protocols.schema import PowerAssumptions

    try:
        plan = load_plan(args.plan)
    except ProtocolError as exc:
        raise CLIError(str(exc)) from None
    if plan.power is None:
        plan = plan.model_copy(update={"power": PowerAssumptions()})
        print("note: the plan has no [power] section; using STATS §7 defaults (sigma_seed 0.02, tau 0.15, icc 0.1)")
    pa, d = plan.power, plan.design
    assert pa is not None
    who = "one checkpoint per arm (artifact estimand)" if plan.estimand == "artifact" else f"{d.seeds_per_arm} seeds/arm"
    print(f"plan {plan.name}: {who}, {d.n_tasks} tasks in {d.n_repositories} repositories")
    low = False
    summaries = power_summaries(plan)
    for s in summaries:
        flag = "" if s.power >= pa.target_power else f"  < target {pa.target_power}"
        low |= bool(flag)
        print(f"  {s.endpoint:13s} {s.kind:18s} power {s.power:.3f}  (SE {s.se:.4f}, df {s.df:.1f}){flag}")
    for s in summaries:
        if s.power_low is not None and s.sigma_seed_range is not None:
            lo, hi = s.sigma_seed_range
            print(f"  {s.endpoint:13s} power {s.power_low:.3f} .. {s.power_high:.3f} for sigma_seed {lo:.3f} .. {hi:.3f}"
                  f" ({s.sigma_seed_note})")  # fmt: skip
    from evalsuite.checks import MIN_SEEDS_METHOD_CLAIM, min_randomisation_p

    if plan.estimand == "method" and d.seeds_per_arm < MIN_SEEDS_METHOD_CLAIM:
        print(f"warning: {d.seeds_per_arm} seeds per arm: a method-level claim needs >= {MIN_SEEDS_METHOD_CLAIM} (the "
              f"smallest seed-level permutation p is {min_randomisation_p(d.seeds_per_arm):.3f}); the analysis will "
              "not SHIP or claim endpoints with this plan")  # fmt: skip
    weakest = min(s.power for s in summaries)
    print(f"  all-pass power <= {weakest:.3f} (the weakest criterion; simulate with --simulate N for the joint value)")
    if pa.stated_power is not None and abs(pa.stated_power - weakest) > 0.02:
        print(f"warning: the plan states power {pa.stated_power:.3f}, its assumptions give {weakest:.3f} for the "
              "weakest criterion; fix [power].stated_power or the assumptions before freezing")
    seeds, tasks = _parse_ints(args.seeds, "--seeds"), _parse_ints(args.tasks, "--tasks")
    if (seeds or tasks) and plan.estimand == "artifact":
        print("note: --seeds/--tasks grids are for the method estimand; an artifact plan has one checkpoint per arm")
    elif seeds or tasks:
        seeds, tasks = seeds or [d.seeds_per_arm], tasks or [d.n_tasks]
        npr = pa.tasks_per_repo or d.n_tasks / d.n_repositories
        for c in plan.ordered_criteria():
            delta1 = pa.expected_differences.get(c.endpoint, pa.true_difference)
            print(f"  grid for {c.endpoint} (rows seeds/arm, columns tasks {tasks}):")
            for m in seeds:
                vals = [power_ni_crossed(margin=-c.bar, true_difference=delta1, seeds_treatment=m, seeds_baseline=m,
                                         n_tasks=n, tasks_per_repo=npr, sigma_seed=pa.sigma_seed, tau=pa.tau,
                                         icc_repo=pa.icc_repo, sigma_e2=pa.sigma_e2 / d.episodes_per_task,
                                         alpha=c.alpha_one_sided).power for n in tasks]  # fmt: skip
                print(f"    {m:4d}  " + "  ".join(f"{v:.3f}" for v in vals))
    if args.simulate:
        _simulate(plan, args.simulate)
    if low:
        print("warning: power is below target for at least one criterion; the joint (all-pass) power is lower still."
              " Add seeds, widen a justified margin, or change the estimand before training (STATS §7)")  # fmt: skip
    return 0


def _simulate(plan, n_sims: int) -> None:  # type: ignore[no-untyped-def]
    import numpy as np

    from evalsuite.power_sim import simulate_plan_power

    r = simulate_plan_power(plan, n_sims=n_sims, rng=np.random.default_rng(plan.analysis_seed))
    per = ", ".join(f"{k} {v:.3f} ± {r.mc_se[k]:.3f}" for k, v in r.per_criterion.items())
    print(f"  simulated ({n_sims} sims of the plan's own [power] model, analysed with the interval `tgsuite analyze` uses): {per}; "
          f"all pass {r.all_pass:.3f} (endpoints independent)")  # fmt: skip


def _deviation(args: argparse.Namespace) -> int:
    from protocols.deviations import default_log_path, record_deviation
    from protocols.freeze import load_frozen
    from protocols.load import ProtocolError

    try:
        rec = load_frozen(args.frozen)
        path = Path(args.log) if args.log else default_log_path(args.frozen)
        dev = record_deviation(path, protocol_hash=rec.sha256, kind=args.kind, description=args.description,
                               justification=args.justification, run_id=args.run_id,
                               before_outcome_data=args.before_outcome_data)  # fmt: skip
    except (ProtocolError, ValueError) as exc:
        raise CLIError(str(exc)) from None
    print(f"recorded deviation {dev.kind} at {dev.time} -> {path}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    from protocols.schema import Deviation

    kinds = list(Deviation.model_fields["kind"].annotation.__args__)  # type: ignore[union-attr]
    parser = subparsers.add_parser("protocol", help="preregistered plans: freeze, check, power, deviation",
                                   description=__doc__, epilog=EPILOG,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    sub = parser.add_subparsers(dest="protocol_command", metavar="ACTION")
    p = sub.add_parser("freeze", help="freeze a plan TOML into a hashed record", epilog=EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("plan", help="plan TOML, e.g. protocols/plans/paper_claims.toml")
    p.add_argument("--out", help="record path (default: ./<plan>.frozen.json)")
    p.add_argument("--overwrite", action="store_true", help="replace a record with a different hash (the prereg ref keeps the earlier record at that path, "
                   "so an analysis under the new one is INCONCLUSIVE: prefer a new file)")
    p.add_argument("--sign-key", help="Ed25519 private key (PEM, from `protocol keygen`) to sign the record")
    p.set_defaults(func=_freeze)
    p = sub.add_parser("keygen", help="make an Ed25519 key pair for signing frozen records", epilog=EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--out", required=True, help="private key file to write (PEM)")
    p.set_defaults(func=_keygen)
    p = sub.add_parser("check", help="verify a frozen record (and that a plan still matches it); list its runs",
                       epilog=EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("frozen", help="frozen record JSON")
    p.add_argument("--plan", help="plan TOML that must hash to the record")
    p.set_defaults(func=_check)
    p = sub.add_parser("power", help="analytic (and simulated) power of a plan's design", epilog=EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("plan", help="plan TOML")
    p.add_argument("--seeds", help="grid of seeds per arm, e.g. 3,5,10")
    p.add_argument("--tasks", help="grid of task counts, e.g. 200,500,1000")
    p.add_argument("--simulate", type=int, default=0, metavar="N", help="also simulate the all-pass power (N sims)")
    p.set_defaults(func=_power)
    p = sub.add_parser("deviation", help="record a deviation from a frozen plan (append-only)", epilog=EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--frozen", required=True, help="frozen record JSON")
    p.add_argument("--kind", required=True, choices=kinds)
    p.add_argument("--description", required=True, help="what was done differently")
    p.add_argument("--justification", required=True, help="why")
    p.add_argument("--run-id", help="the run it concerns (for run-level deviations)")
    p.add_argument("--log", help="deviation log (default: next to the record)")
    p.add_argument("--before-outcome-data", action=argparse.BooleanOptionalAction, default=None,
                   help="was it decided before seeing outcome data?")  # fmt: skip
    p.set_defaults(func=_deviation)
    parser.set_defaults(func=lambda a: (parser.print_help(), 2)[1])
