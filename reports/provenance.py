"""Preregistration and provenance sections: what was planned (and frozen when), what deviated, what ran where.

The frozen protocol's hash is compared with the hash the analysis and each run manifest name; any mismatch is a
warning at the top of the report. The deviations table is always shown (CONSORT/Willroth & Atherton 2024): with
no deviations it says "none recorded" rather than disappearing.
"""

from __future__ import annotations

from collections.abc import Sequence

from evalsuite.schema import AnalysisResult
from harness.schema import RunManifest
from protocols.schema import FrozenProtocol, Protocol
from reports import format as fmt
from reports.model import Cell, Section, Table


def hash_warnings(a: AnalysisResult, protocol: FrozenProtocol | None, manifests: Sequence[RunManifest]) -> list[str]:
    out = []
    if protocol is not None and protocol.sha256 != a.protocol_hash:
        out.append(f"The frozen protocol given to the report hashes to {fmt.short_hash(protocol.sha256)} but the "
                   f"analysis names {fmt.short_hash(a.protocol_hash)}: this report may describe another plan.")
    for m in manifests:
        if m.protocol_hash != a.protocol_hash:
            named = fmt.short_hash(m.protocol_hash) if m.protocol_hash else "no protocol"
            out.append(f"Run {m.run_id} names {named}, not the analysed protocol {fmt.short_hash(a.protocol_hash)}.")
    return out


def _kv(rows: list[tuple[str, str]], id: str, caption: str = "") -> Table:
    return Table(id=id, header=["", ""], rows=[[Cell(text=k), Cell(text=v)] for k, v in rows], caption=caption)


def _plan_tables(p: Protocol) -> list[Table]:
    d = p.design
    plan = [
        ("question", p.question), ("estimand", f"{p.estimand} (weighting: {p.weighting})"),
        ("arms", "; ".join(f"{a.name} ({a.role}){': ' + a.description if a.description else ''}"
                           f"{' recipe ' + a.recipe if a.recipe else ''}"
                           f"{' config ' + fmt.short_hash(a.config_sha256) if a.config_sha256 else ''}" for a in p.arms)),
        ("task set", f"{p.task_set.name} ({p.task_set.split}), sha256 {fmt.short_hash(p.task_set.sha256)}"),
        ("design", f"{d.seeds_per_arm} training seeds per arm, {d.n_tasks:,} tasks in {d.n_repositories} repositories, "
                   f"{d.episodes_per_task} episode(s) per task; {d.seed_generation}" + (f"; decoding: {d.decoding}" if d.decoding else "")),
        ("decision rule", f"{p.decision.rule} (intersection–union test); claims by {p.decision.claims}; "
                          f"df rule {p.decision.df_rule}; fallback {p.decision.fallback_method}"),
        ("missing data", f"infra errors: {p.missing_data.infra} after {p.missing_data.max_retries} retries; missing "
                         f"cells: {p.missing_data.missing_cell}; coverage threshold {fmt.pct(p.coverage_threshold)}"
                         + (f"; {p.missing_data.note}" if p.missing_data.note else "")),
        ("sensitivity analyses", ", ".join(p.sensitivity) or "none"),
        ("exploratory", ", ".join(p.exploratory) or "none declared"),
        ("analysis seed", f"{p.analysis_seed} ({p.bootstrap_resamples:,} bootstrap resamples)"),
    ]
    if p.power is not None:
        pw = p.power
        plan.append(("power assumptions", f"true Δ {fmt.pp(pw.true_difference)}, σ seed {pw.sigma_seed:g}, τ {pw.tau:g}, "
                                          f"repo ICC {pw.icc_repo:g}, σ²e {pw.sigma_e2:g}; target power "
                                          f"{fmt.pct(pw.target_power, digits=0)}" + (f"; {pw.source}" if pw.source else "")))
    crit = Table(
        id="prereg-criteria", header=["endpoint", "kind", "threshold X", "margin δ", "one-sided α", "rationale"],
        rows=[[Cell(text=c.endpoint), Cell(text=c.kind), Cell(text=fmt.pp(c.threshold) if c.kind in ("superiority_margin", "dual") else fmt.DASH),
               Cell(text=fmt.pp(c.margin, signed=False) if c.margin is not None else fmt.DASH),
               Cell(text=f"{c.alpha_one_sided:g}"), Cell(text=c.rationale or fmt.DASH)] for c in p.ordered_criteria()],
        caption="Criteria as preregistered, in claim order.",
    )
    return [_kv(plan, "prereg-plan", "The plan as frozen."), crit]


def prereg_section(a: AnalysisResult, protocol: FrozenProtocol | None, manifests: Sequence[RunManifest]) -> Section:
    head = [("plan", f"{a.plan_name} version {a.plan_version}"), ("protocol sha256", a.protocol_hash),
            ("frozen at", a.frozen_at)]
    items = []
    if protocol is not None:
        ok = protocol.sha256 == a.protocol_hash
        head += [("hash check", "matches the frozen protocol file" if ok else "DOES NOT MATCH the frozen protocol file"),
                 ("frozen from git", f"{protocol.git.commit or fmt.DASH}{' (dirty)' if protocol.git.dirty else ''}"),
                 ("plan file", f"{protocol.source_path or fmt.DASH} (sha256 {fmt.short_hash(protocol.source_sha256)})"),
                 ("packages at freeze", ", ".join(f"{k} {v}" for k, v in sorted(protocol.packages.items())) or fmt.DASH)]
    else:
        items.append("The frozen protocol file was not given to the report (--protocol), so the plan's text is not "
                     "shown and its hash was not re-checked here; the hash above is the one the analysis used.")
    tables = [_kv(head, "prereg-head")]
    if protocol is not None:
        tables += _plan_tables(protocol.protocol)
    dev_rows = [[Cell(text=d.kind), Cell(text=d.description), Cell(text=d.justification), Cell(text=d.time),
                 Cell(text={True: "before", False: "after", None: "unknown"}[d.before_outcome_data],
                      tone="warn" if d.before_outcome_data is not True else None),
                 Cell(text=d.preregistered or fmt.DASH), Cell(text=d.done or fmt.DASH),
                 Cell(text=d.effect_on_results or fmt.DASH), Cell(text=d.run_id or fmt.DASH)] for d in a.deviations]
    tables.append(Table(id="deviations", header=["kind", "what", "why", "recorded", "before outcome data?",
                                                 "preregistered", "done", "effect on results", "run"], rows=dev_rows,
                        caption=f"Deviations from the frozen plan: {len(a.deviations)} recorded.",
                        note="" if dev_rows else "No deviations recorded."))
    return Section(id="prereg", title="Preregistration", tables=tables, notes=items,
                   warnings=hash_warnings(a, protocol, manifests))


def provenance_section(a: AnalysisResult, manifests: Sequence[RunManifest]) -> Section:
    ana = [("analysis created", a.created_at), ("analysis seed", str(a.analysis_seed)),
           *[(f"software: {k}", v) for k, v in sorted(a.software.items())]]
    runs = [[Cell(text=r.run_id), Cell(text=r.created_at), Cell(text=fmt.short_hash(r.git_commit)),
             Cell(text=fmt.short_hash(r.protocol_hash), tone=None if r.protocol_hash == a.protocol_hash else "fail"),
             Cell(text=fmt.short_hash(r.task_set_sha256)), Cell(text=f"{r.n_episodes:,}"), Cell(text=r.path)]
            for r in a.runs]
    tables = [_kv(ana, "provenance-analysis", "The analysis.")]
    if runs:
        tables.append(Table(id="provenance-runs", header=["run", "created", "git", "protocol", "task set", "episodes",
                                                          "path"], rows=runs, caption="Evaluation runs analysed."))
    items = []
    for m in manifests:
        env = [("git", f"{m.git_commit or fmt.DASH}{' (dirty working tree)' if m.git_dirty else ''}"),
               ("sandbox", f"{m.sandbox}, {'isolated' if m.isolated else 'NOT isolated'}"),
               ("task set", f"{m.task_set_name} sha256 {fmt.short_hash(m.task_set_sha256)} ({len(m.instance_ids):,} instances)"),
               ("arms", "; ".join(f"{x.name} = {x.policy}" + (f" (ckpt {fmt.short_hash(x.checkpoint_sha256)})"
                                                              if x.checkpoint_sha256 else "") for x in m.arms)),
               ("seeds", ", ".join(map(str, m.seeds))), ("grader", m.grader_version),
               ("behaviour checkers", ", ".join(m.behaviour_checkers) or fmt.DASH),
               ("limits", ", ".join(f"{k} = {v:g}" for k, v in sorted(m.limits.items())) or fmt.DASH),
               ("command", " ".join(m.argv) or fmt.DASH),
               *[(f"image {k}", v) for k, v in sorted(m.image_digests.items())],
               *[(f"host {k}", str(v)) for k, v in sorted(m.host.items())],
               *[(f"package {k}", v) for k, v in sorted(m.packages.items())]]
        tables.append(_kv(env, f"provenance-run-{m.run_id}", f"Run {m.run_id} (created {m.created_at})."))
    if not manifests:
        items.append("No run manifest was readable (run directories not given or not found), so git state, "
                     "packages, images and hardware of the evaluation runs are not shown.")
    return Section(id="provenance", title="Provenance", tables=tables, notes=items)
