"""Build a report folder from an analysis: the Python API behind ``tgsuite report``.

``build_report(analysis, out_dir=…)`` reads what it is given (and the run directories the analysis names, when they
exist), builds the view model, renders ``index.html`` and the trajectory pages, and writes ``summary.json`` and
``summary.md``. It never computes statistics: every estimate, interval and verdict is taken from the
``AnalysisResult``; see ``reports.training`` for the one descriptive number derived from training logs.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from evalsuite.schema import AnalysisResult, RunAggregate
from harness.rundir import LoadedRun, episode_dir, load_run
from harness.schema import EpisodeResult, RunManifest
from protocols.freeze import protocol_hash
from protocols.provenance import utc_now
from protocols.schema import FrozenProtocol
from reports import (
    assurance,
    details,
    episodes,
    judged,
    pages,
    paper,
    probes,
    provenance,
    reach,
    render,
    sections,
    studies,
    tiers,
    training,
)
from reports import format as fmt
from reports.model import KeyValue, ReportView
from reports.schema import CriterionSummary, ReportSummary
from reports.summary_md import summary_markdown

log = logging.getLogger(__name__)

DEFAULT_MAX_TRAJECTORY_PAGES = 500
M = TypeVar("M", bound=BaseModel)
TrainingMetrics = Mapping[str, Mapping[Any, "str | Path"]]  # {arm: {seed: training run dir or metrics.jsonl}}


class ReportInputError(ValueError):
    """An input file the report cannot use; the message names the file, the field and the fix."""


def _read_model(path: Path, model: type[M], what: str, fix: str) -> M:
    if not path.is_file():
        raise ReportInputError(f"{path}: {what} not found; {fix}")
    try:
        return model.model_validate_json(path.read_text(encoding="utf-8"))
    except ValidationError as exc:
        e = exc.errors()[0]
        loc = ".".join(str(x) for x in e["loc"]) or "<root>"
        raise ReportInputError(f"{path}: not a valid {what} (field {loc}: {e['msg']}); {fix}") from exc


def load_analysis(path: str | Path) -> AnalysisResult:
    return _read_model(Path(path), AnalysisResult, "analysis.json (AnalysisResult)",
                       "write it with `tgsuite analyze --out analysis.json`")


def load_protocol(path: str | Path) -> FrozenProtocol:
    """A frozen record whose plan still hashes to its ``sha256`` (an edited plan would show other margins)."""
    rec = _read_model(Path(path), FrozenProtocol, "frozen protocol (FrozenProtocol JSON)",
                      "write it with `tgsuite protocol freeze` and pass the resulting .json file")
    actual = protocol_hash(rec.protocol)
    if actual != rec.sha256:
        raise ReportInputError(
            f"{path}: the plan inside this frozen record hashes to {fmt.short_hash(actual)}, the record says "
            f"{fmt.short_hash(rec.sha256)}: it was edited after freezing, and the report would show the edited plan; "
            "fix: restore the record from git (refs/tgsuite/prereg holds it) and pass that"
        )
    return rec


def check_same_plan(a: AnalysisResult, proto: FrozenProtocol, analysis: object, protocol: object) -> None:
    """Refuse a frozen record other than the one the analysis ran against: the report would show that plan's margins
    and rules next to this analysis's verdict."""
    if proto.sha256 != a.protocol_hash:
        raise ReportInputError(
            f"{protocol if isinstance(protocol, str | Path) else 'the frozen protocol'}: plan {proto.protocol.name} "
            f"v{proto.protocol.version} hashes to {fmt.short_hash(proto.sha256)}, but "
            f"{analysis if isinstance(analysis, str | Path) else 'the analysis'} was made against plan {a.plan_name} "
            f"v{a.plan_version} ({fmt.short_hash(a.protocol_hash)}): the report would show one plan's margins next to "
            "another's verdict; fix: pass the record given to `tgsuite analyze --protocol`, or leave --protocol out"
        )


def _resolve_run_dirs(a: AnalysisResult, run_dirs: Sequence[str | Path], base: Path | None) -> tuple[list[Path], list[str]]:
    if run_dirs:
        return [Path(p) for p in run_dirs], []
    found, warn = [], []
    for r in a.runs:
        cands = [Path(r.path)] + ([base / r.path] if base is not None and not Path(r.path).is_absolute() else [])
        hit = next((c for c in cands if c.is_dir()), None)
        if hit is None:
            warn.append(f"Run directory {r.path} (run {r.run_id}) named by the analysis was not found, so its episodes "
                        "are not listed; pass --run-dir to point at it.")
        else:
            found.append(hit)
    return found, warn


def _header(a: AnalysisResult, now: str, n_runs: int, manifests: Sequence[RunManifest] = ()) -> list[KeyValue]:
    from reports.descriptive import generation_facts

    recorded = {f"generation.{arm.name}.{k}": v for m in manifests for arm in m.arms
                for k, v in arm.generation.items() if v is None or isinstance(v, str | int | float | bool)}
    return [KeyValue(key=k, value=v) for k, v in (
        ("protocol sha256", a.protocol_hash), ("frozen at", a.frozen_at), ("estimand", a.estimand),
        ("treatment arm", a.arms.get("treatment", fmt.DASH)), ("baseline arm", a.arms.get("baseline", fmt.DASH)),
        *(generation_facts(recorded) if recorded else []),
        ("analysis created", a.created_at), ("report generated", now), ("evaluation runs", str(n_runs)))]


def _study_sections(a: AnalysisResult, paper_plan: bool) -> list[Any]:
    """The exploratory study panels; for a plan that is not the paper's, only those that were run."""
    secs = [studies.noisy_section(a), studies.equal_compute_section(a), studies.can_do_section(a),
            studies.label_rates_section(a), probes.hint_probes_section(a), tiers.behaviour_tiers_section(a)]
    return secs if paper_plan else [s for s in secs if s.available]


def build_view(
    a: AnalysisResult,
    *,
    protocol: FrozenProtocol | None,
    manifests: Sequence[RunManifest],
    eps: Sequence[EpisodeResult],
    paged: set[str],
    training_runs: Mapping[str, Mapping[str, list[dict[str, float]]]] | None,
    max_pages: int,
    extra_warnings: Sequence[str] = (),
    now: str,
) -> ReportView:
    """Assemble the whole view model (pure: no file access). A plan that is not the paper's
    (``reports.paper.is_paper_plan``) gets no paper panel and only the study panels that were run."""
    paper_plan = paper.is_paper_plan(a)
    unjudged = judged.unjudged_plan_arms(eps)
    touched = {s.arm: judged.tests_touched(eps, s.arm, plan_arm=True) for s in a.arm_summaries} if eps else None
    secs = [
        sections.criteria_section(a), sections.outcomes_section(a, unjudged, touched),
        reach.reach_section(eps, paper=paper_plan),
        details.variance_section(a),
        details.sensitivity_section(a), studies.training_section(
            training_runs, arm_order=[a.arms[r] for r in ("treatment", "baseline") if r in a.arms]),
        *([paper.paper_section(a, training_runs, arms=(a.arms.get("treatment"), a.arms.get("baseline")))]
          if paper_plan else []),
        *_study_sections(a, paper_plan),
        details.breakdowns_section(a),
        details.secondary_section(a), details.missing_section(a), assurance.assurance_section(a),
        provenance.prereg_section(a, protocol, manifests),
        provenance.provenance_section(a, manifests),
    ]
    warnings = [*a.warnings, *provenance.hash_warnings(a, protocol, manifests), *extra_warnings]
    return ReportView(
        title=f"{a.plan_name} (plan version {a.plan_version})",
        subtitle=f"Evaluation report: {a.arms.get('treatment', '?')} vs {a.arms.get('baseline', '?')}",
        generated_at=now, facts=_header(a, now, len(a.runs), manifests), verdict=sections.verdict_view(a),
        warnings=warnings,
        sections=secs, episodes=pages.episodes_view(eps, paged, cap=max_pages),
        nav=[("verdict", "Verdict"), *[(s.id, s.title.split(" (")[0]) for s in secs], ("episodes", "Episodes")],
    )


def summarize(a: AnalysisResult, view: ReportView, protocol: FrozenProtocol | None, files: list[str]) -> ReportSummary:
    verdict = view.verdict.verdict
    assert verdict != "NO PREREGISTERED DECISION", "an analysis always carries a decision"  # noqa: S101 - narrows
    return ReportSummary(
        verdict=verdict, reasons=[c.text for c in view.verdict.criterion_reasons] + view.verdict.decision_reasons,
        plan_name=a.plan_name, plan_version=a.plan_version, protocol_hash=a.protocol_hash,
        protocol_hash_verified=None if protocol is None else protocol.sha256 == a.protocol_hash, estimand=a.estimand,
        arms=dict(a.arms),
        criteria=[CriterionSummary(endpoint=c.endpoint, kind=c.kind, estimate=c.estimate, ci_low=c.ci_low,
                                   ci_high=c.ci_high, ci_level=c.ci_level, lower_one_sided=c.lower_one_sided, bar=c.bar,
                                   alpha_one_sided=c.alpha_one_sided, verdict=c.verdict,
                                   sensitivity_agree=c.sensitivity_agree) for c in a.criteria],
        coverage=a.missing_data.coverage, coverage_ok=a.missing_data.coverage_ok, n_deviations=len(a.deviations),
        n_episodes=view.episodes.n_total, n_trajectory_pages=view.episodes.n_pages, warnings=list(view.warnings),
        generated_at=view.generated_at, files=files,
    )


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _write_pages(out: Path, runs: Sequence[LoadedRun], paged: set[str]) -> list[str]:
    tdir = out / "trajectories"
    for old in tdir.glob("*.html") if tdir.is_dir() else ():
        old.unlink()  # pages of an earlier report would be stale; nothing else in the folder is touched
    if not paged:
        return []
    tdir.mkdir(parents=True, exist_ok=True)
    written = []
    for run in runs:
        for ep in run.results:
            if pages.episode_key(ep) not in paged:
                continue
            files = episodes.read_episode_files(episode_dir(run.path, ep.instance_id, ep.arm, ep.seed, ep.attempt))
            name = pages.page_name(ep)
            _write(out / name, render.render_trajectory(pages.trajectory_view(ep, files)))
            written.append(name)
    return written


def build_report(
    analysis: AnalysisResult | str | Path,
    *,
    out_dir: str | Path,
    protocol: FrozenProtocol | str | Path | None = None,
    manifests: Sequence[RunManifest] = (),
    run_dirs: Sequence[str | Path] = (),
    training_metrics: TrainingMetrics | None = None,
    max_trajectory_pages: int = DEFAULT_MAX_TRAJECTORY_PAGES,
    now: str | None = None,
) -> ReportSummary:
    """Write ``index.html``, ``trajectories/*.html``, ``summary.json`` and ``summary.md`` into ``out_dir``.

    ``run_dirs`` defaults to the run paths the analysis names (relative ones are also looked up next to
    ``analysis.json``). ``training_metrics`` is ``{arm: {seed: training run dir or metrics.jsonl}}``. Trajectory
    pages are written for at most ``max_trajectory_pages`` episodes (stratified sample; see ``reports.pages``).
    """
    base = Path(analysis).parent if isinstance(analysis, str | Path) else None
    a = load_analysis(analysis) if isinstance(analysis, str | Path) else analysis
    proto = load_protocol(protocol) if isinstance(protocol, str | Path) else protocol
    if proto is not None:
        check_same_plan(a, proto, analysis, protocol)
    dirs, warn = _resolve_run_dirs(a, run_dirs, base)
    runs = [load_run(d, require_manifest=False) for d in dirs]
    all_manifests = list(manifests) + [r.manifest for r in runs if r.manifest is not None]
    eps = [e for r in runs for e in r.results]
    paged = pages.select_pages(eps, max_trajectory_pages)
    train = training.load_training(training_metrics) if training_metrics else None
    now = now or utc_now()
    view = build_view(a, protocol=proto, manifests=all_manifests, eps=eps, paged=paged, training_runs=train,
                      max_pages=max_trajectory_pages, extra_warnings=warn, now=now)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = _write_pages(out, runs, paged)
    _write(out / "index.html", render.render_index(view))
    files = ["index.html", "summary.json", "summary.md", *sorted(written)]
    summary = summarize(a, view, proto, files)
    _write(out / "summary.json", summary.model_dump_json(indent=2))
    _write(out / "summary.md", summary_markdown(summary, a))
    log.info("report: %s (%s, %d episodes, %d trajectory pages)", out / "index.html", view.verdict.verdict,
             len(eps), len(written))
    return summary


def build_descriptive_report(
    run_dir: str | Path,
    aggregate: RunAggregate,
    *,
    out_dir: str | Path,
    max_trajectory_pages: int = DEFAULT_MAX_TRAJECTORY_PAGES,
    now: str | None = None,
) -> tuple[int, int]:
    """A report for a run without a plan (``reports.descriptive``): ``index.html``, ``trajectories/*.html`` and
    ``aggregate.json`` (the aggregate it shows) in ``out_dir``. Returns (episodes, trajectory pages)."""
    from reports.descriptive import descriptive_view

    run = load_run(run_dir, require_manifest=False)
    eps = list(run.results)
    paged = pages.select_pages(eps, max_trajectory_pages)
    now = now or utc_now()
    view = descriptive_view(aggregate, eps, paged=paged, max_pages=max_trajectory_pages, now=now)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = _write_pages(out, [run], paged)
    _write(out / "index.html", render.render_index(view))
    _write(out / "aggregate.json", aggregate.model_dump_json(indent=1) + "\n")
    log.info("descriptive report: %s (%d episodes, %d trajectory pages)", out / "index.html", len(eps), len(written))
    return len(eps), len(written)
