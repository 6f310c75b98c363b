"""The hint side-effect probes panel (``AnalysisResult.exploratory.hint_probes``; ``tgsuite.pipeline.probes``).

Says what each probe asks and what a side effect would look like, then per probe and arm the plain and probe rates
of ``edited``, ``resolved`` and ``blocked`` with the paired difference, its CI and the McNemar p, all as computed by
``evalsuite.probes``. When the study was not run, the panel says so.
"""

from __future__ import annotations

from evalsuite.schema import AnalysisResult, HintProbeResult
from reports import format as fmt
from reports.model import Cell, Section, Table
from reports.studies import NOT_RUN

ENDPOINT_TEXT = {
    "edited": "edited (≥ 1 successful file change)",
    "resolved": "resolved (hidden tests pass)",
    "blocked": "blocked (no edit and not resolved)",
}
INTRO = (
    "The same held-out states (checkpoint, task, episode seed) answered twice: with the plain prompt and with one "
    "fixed extra user message, the probe. Each probe asks for something that should not stop the work; a side "
    "effect shows as fewer episodes with an edit, fewer resolved, or more blocked with the probe than without it. "
    "Both episodes sample with the same random stream, so they differ only from the probe on."
)


def _probe_line(r: HintProbeResult) -> str:
    p = r.probe
    return (f"{p.name} ({p.kind}, placement {p.placement}): the message “{p.text}” — {p.asks}. "
            f"A side effect would look like this: {p.side_effect}.")


def _rows(r: HintProbeResult) -> list[list[Cell]]:
    rows = []
    for ep in r.endpoints:
        ch = ep.change
        rows.append([Cell(text=r.probe.name), Cell(text=r.arm),
                     Cell(text=f"{r.n_states:,} ({r.delivered:,} with the probe delivered)"),
                     Cell(text=ENDPOINT_TEXT.get(ep.endpoint, ep.endpoint)), Cell(text=fmt.pct(ep.plain_rate)),
                     Cell(text=fmt.pct(ep.probe_rate)), Cell(text=f"{ch.a:,} / {ch.b:,} / {ch.c:,} / {ch.d:,}"),
                     Cell(text=fmt.pp(ch.estimate)), Cell(text=fmt.interval(ch.ci_low, ch.ci_high)),
                     Cell(text=ch.method), Cell(text=fmt.pvalue(ch.mcnemar_p))])
    return rows


def hint_probes_section(a: AnalysisResult) -> Section:
    """The panel; ``available=False`` with "Not run in this study." when there are no probe results."""
    res = a.exploratory.hint_probes
    if not res:
        return Section(id="probes", title="Hint side-effect probes", available=False,
                       absent=f"{NOT_RUN} (It asks whether a harmless extra instruction, such as 'explain your "
                       "change', stops the agent from editing or fixing; `tgsuite reproduce --studies hint_probes`.)")
    probes = {r.probe.name: r for r in res}
    notes = [_probe_line(r) for _, r in sorted(probes.items())]
    notes += [f"{r.probe.name} / {r.arm}: {n}" for r in res for n in r.notes]
    table = Table(id="probes-table", header=["probe", "arm", "paired states", "endpoint", "plain", "with probe",
                                             "both / probe only / plain only / neither", "Δ (probe − plain)", "CI",
                                             "method", "McNemar p"],
                  rows=[row for r in res for row in _rows(r)],
                  caption="Rates on the paired states, training seeds pooled; Δ > 0 for blocked, or < 0 for edited "
                  "and resolved, is a side effect.")
    return Section(id="probes", title="Hint side-effect probes (exploratory)", intro=INTRO, tables=[table],
                   notes=notes)
