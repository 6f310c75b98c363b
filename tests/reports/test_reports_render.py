"""Rendering the report from fixtures: files, sections, honesty about absent data, escaping, StrictUndefined, CLI."""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import re
import sys
from html.parser import HTMLParser
from pathlib import Path

import jinja2
import pytest
from markupsafe import escape

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures" / "reports"))
import report_factory as factory  # noqa: E402

from reports import render  # noqa: E402
from reports.build import ReportInputError, build_report, build_view  # noqa: E402
from reports.schema import ReportSummary  # noqa: E402

RAW_DANGERS = ("<script>alert", "</textarea>", "<img src=http", "}} x{%", "<b onmouseover")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, ReportSummary]:
    root = tmp_path_factory.mktemp("rep")
    kw = factory.full_fixture(root)
    kw.pop("episodes")
    summary = build_report(kw.pop("analysis"), out_dir=root / "out", now="2026-11-29T23:00:00Z", **kw)
    return root / "out", summary


class _TagCollector(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, list[tuple[str, str | None]]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, attrs))


def _tags(doc: str) -> list[tuple[str, list[tuple[str, str | None]]]]:
    p = _TagCollector()
    p.feed(doc)
    return p.tags


def _texts(out: Path) -> dict[str, str]:
    return {str(p.relative_to(out)): p.read_text(encoding="utf-8") for p in out.rglob("*") if p.is_file()}


def test_files_and_summary(built: tuple[Path, ReportSummary]) -> None:
    out, summary = built
    assert (out / "index.html").is_file() and (out / "summary.md").is_file()
    again = ReportSummary.model_validate_json((out / "summary.json").read_text())
    assert again == summary
    assert summary.verdict == "NO-SHIP" and summary.protocol_hash_verified is True
    assert summary.n_episodes == 80 and summary.n_trajectory_pages == 80
    assert len(list((out / "trajectories").glob("*.html"))) == 80
    assert [c.verdict for c in summary.criteria] == ["pass", "pass", "fail"]
    md = (out / "summary.md").read_text()
    assert md.startswith("## ❌ NO-SHIP") and "| joint\\_ok | superiority |" in md and "**disagree**" in md


def test_index_has_every_section_and_honest_absence(built: tuple[Path, ReportSummary]) -> None:
    out, _ = built
    doc = (out / "index.html").read_text()
    for sid in ("verdict", "criteria", "criteria-table", "outcomes", "joint-tg", "joint-grpo", "variance",
                "sensitivity", "training", "training-window", "noisy", "compute", "cando", "probes", "breakdowns",
                "breakdown-repo", "missing", "prereg", "deviations", "provenance", "episodes", "episode-table",
                "episodes-data"):
        assert f'id="{sid}"' in doc, sid
    compute = doc[doc.index('<section id="compute">'):]
    compute = compute[: compute.index("</section>")]
    assert "Not run in this study." in compute  # equal-compute study absent in the fixture, said plainly
    assert "Per difficulty: not computed in this analysis." in doc
    assert doc.count("<svg") >= 4  # forest + 2 training curves + noisy feedback
    assert "DISAGREES" in doc and "hierarchical_bootstrap gives FAIL" in doc
    # nothing a browser would fetch: parse the real tags (escaped agent text is not a tag)
    tags = _tags(doc)
    assert not {t for t, _ in tags} & {"link", "img", "iframe", "object", "embed", "base", "audio", "video"}
    for tag, attrs in tags:
        for k, v in attrs:
            if k in ("src", "href", "action", "data", "xlink:href"):
                assert v is not None and (v.startswith("#") or not re.match(r"^[a-z]+:|^//", v)), (tag, k, v)
    style = doc[doc.index("<style>") : doc.index("</style>")]
    assert "url(" not in style and "@import" not in style
    csp = [dict(a)["content"] for t, a in tags if t == "meta" and dict(a).get("http-equiv") == "Content-Security-Policy"]
    assert csp and (csp[0] or "").startswith("default-src 'none'") and "unsafe-inline'; img" not in csp[0]
    # exactly one executable inline script, allowed by its sha256 in the CSP (no 'unsafe-inline' for scripts)
    scripts = re.findall(r"<script>(.*?)</script>", doc, flags=re.S)
    assert len(scripts) == 1 and doc.count("<script") == 2  # plus the JSON data block (not executable)
    digest = base64.b64encode(hashlib.sha256(scripts[0].encode()).digest()).decode()
    assert f"script-src 'sha256-{digest}'" in (csp[0] or "")


def test_absent_training_and_runs_are_stated(tmp_path: Path) -> None:
    fp = factory.frozen_protocol()
    a = factory.analysis(fp.sha256, run_path=str(tmp_path / "missing-run"))
    summary = build_report(a, out_dir=tmp_path / "out")
    doc = (tmp_path / "out" / "index.html").read_text()
    assert "No training metrics were given to the report" in doc
    assert "was not found, so its episodes are not listed" in doc
    assert "No run directory was given or found" in doc
    assert "The frozen protocol file was not given to the report" in doc
    assert summary.protocol_hash_verified is None and summary.n_episodes == 0


def test_agent_text_is_escaped_everywhere(built: tuple[Path, ReportSummary]) -> None:
    out, _ = built
    texts = _texts(out)
    html_files = {k: v for k, v in texts.items() if k.endswith(".html")}
    for name, text in html_files.items():
        for danger in RAW_DANGERS:
            assert danger not in text, (name, danger)
    escaped = str(escape(factory.NASTY))
    index = html_files["index.html"]
    assert escaped in index  # warnings, deviations, notes, protocol text
    data = index[index.index('id="episodes-data">') :]
    assert "\\u003cscript\\u003e" in data  # repo name inside the embedded JSON cannot close the script element
    page = next(v for k, v in html_files.items() if k.startswith("trajectories/repo0__task-0__"))
    # user message, assistant text, tool call arguments, tool output, final message, diff, test log, error, checker
    assert page.count(escaped) >= 6
    assert str(escape(json.dumps("cat x.py " + factory.NASTY, ensure_ascii=False)[1:-1])) in page
    assert "{{ 7*7 }} {% if 1 %}x{% endif %}" in page and "&amp;amp;" in page and "&amp;lt;b&amp;gt;" in page
    assert str(escape("+new # " + factory.NASTY)) in page
    # an instance id that is markup: escaped in the table and its page title, sanitised in the page's file name
    assert str(escape(factory.NASTY_ID)) in index
    odd = next(v for k, v in html_files.items() if k.startswith("trajectories/repo1___b_onmouseover_alert_1_x_amp___"))
    assert f"<h1 id=\"title\">{escape(factory.NASTY_ID)} · " in odd
    # summary.md: user text cannot inject HTML or break the table
    md = texts["summary.md"]
    assert "<script>" not in md and "&lt;script&gt;" in md


def test_trajectory_page_content(built: tuple[Path, ReportSummary]) -> None:
    out, _ = built
    page_path = next((out / "trajectories").glob("repo1__task-1__tg__s0__a0__*.html"))
    page = page_path.read_text()
    for needle in ('id="conversation"', 'id="discarded"', 'class="msg user hint"', "tool call: bash", 'class="add"', 'class="del"',
                   "FAIL_TO_PASS", "test_output.txt", "markdown@v1", 'href="../index.html#episodes"'):
        assert needle in page, needle
    index = (out / "index.html").read_text()
    name = page_path.name
    assert f'"trajectories/{name}"' in index  # in the embedded table data (paged by the inline script)
    assert re.search(r'<a href="trajectories/repo\d__task-\d+__grpo__s\d__a0__\w+\.html">repo\d__task-\d+</a>', index)


def test_strict_undefined_catches_missing_field() -> None:
    env = render.environment()
    assert env.autoescape is True and env.undefined is jinja2.StrictUndefined
    fp = factory.frozen_protocol()
    view = build_view(factory.analysis(fp.sha256), protocol=fp, manifests=[], eps=[], paged=set(), training_runs=None,
                      max_pages=10, now="2026-11-29T23:00:00Z")
    full = view.model_dump()
    assert "NO-SHIP" in render.render_template("index.html", view=full, csp="", script="")  # the dict form renders (control)
    for drop in (("warnings",), ("verdict", "claims"), ("episodes", "absent")):
        broken = json.loads(json.dumps(full))
        parent = broken
        for key in drop[:-1]:
            parent = parent[key]
        del parent[drop[-1]]
        with pytest.raises(jinja2.UndefinedError):
            render.render_template("index.html", view=broken, csp="", script="")


def test_bad_inputs_name_file_and_fix(tmp_path: Path) -> None:
    bad = tmp_path / "analysis.json"
    bad.write_text(json.dumps({"plan_name": "x"}))
    with pytest.raises(ReportInputError, match=r"analysis\.json: not a valid .*field .*tgsuite analyze"):
        build_report(bad, out_dir=tmp_path / "o")
    with pytest.raises(ReportInputError, match="not found"):
        build_report(tmp_path / "nope.json", out_dir=tmp_path / "o")


def _cli(argv: list[str]) -> int:
    from tgsuite.commands import report

    parser = argparse.ArgumentParser(prog="tgsuite")
    report.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    return args.func(args)


def test_cli_renders_and_gates(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    kw = factory.full_fixture(tmp_path, n_tasks=4, with_files=False)
    tr = kw["training_metrics"]
    argv = ["report", "--analysis", str(kw["analysis"]), "--out", str(tmp_path / "r"), "--protocol",
            str(kw["protocol"]), *[x for a, seeds in tr.items() for s, d in seeds.items() for x in ("--training", f"{a}:{s}={d}")]]
    assert _cli(argv) == 0
    assert "NO-SHIP" in capsys.readouterr().out
    assert _cli([*argv, "--fail-unless-ship"]) == 1
    doc = (tmp_path / "r" / "index.html").read_text()
    assert "last 32 logged steps" in doc
    page = next((tmp_path / "r" / "trajectories").glob("*.html")).read_text()
    assert "trajectory.jsonl: not found" in page and "No patch.diff was recorded" in page
    from tgsuite.commands.common import CLIError

    with pytest.raises(CLIError, match="given twice"):
        _cli([*argv, "--training", f"tg:0={tr['tg'][0]}"])
    with pytest.raises(SystemExit):
        _cli(["report", "--analysis", "a", "--out", "o", "--training", "tg-no-seed"])


def test_other_branches_render(tmp_path: Path) -> None:
    """INCONCLUSIVE with low coverage, a dual criterion, a not-evaluated one, a degenerate fallback, equal compute."""
    from evalsuite.schema import ComputeRow, EqualComputeResult, Exploratory, MatchedComparison

    fp = factory.frozen_protocol()
    a = factory.analysis(fp.sha256)
    c0, c1, c2 = a.criteria
    crits = [c0.model_copy(update={"degenerate": True, "fallback_used": "newcombe"}),
             c1.model_copy(update={"kind": "dual", "threshold": 0.1, "bar": 0.0}),
             c2.model_copy(update={"verdict": "not_evaluated", "lower_one_sided": None, "estimate": None,
                                   "ci_low": None, "ci_high": None, "variance": None})]
    ec = EqualComputeResult(
        compute=[ComputeRow(arm=arm, seed=0, rollout_tokens=10**6, flops=1e15, wall_s=3600, peak_memory_bytes=2**31)
                 for arm in factory.ARMS],
        totals={"tg": {"flops": 1.2e15}, "grpo": {"flops": 1e15}}, ratios={"flops": 1.2},
        comparisons=[MatchedComparison(endpoint="code_ok", compute_axis="flops", budget=1e15, treatment_rate=0.5,
                                       baseline_rate=0.45, estimate=0.05, ci_low=-0.02, ci_high=0.12)])
    md = a.missing_data.model_copy(update={"coverage": 0.8, "coverage_ok": False, "dropped_tasks": ["repo0__task-0"]})
    a = a.model_copy(update={"criteria": crits, "missing_data": md,
                             "decision": a.decision.model_copy(update={"verdict": "INCONCLUSIVE"}),
                             "exploratory": Exploratory(equal_compute=ec)})
    s = build_report(a, out_dir=tmp_path / "out", protocol=fp)
    doc = (tmp_path / "out" / "index.html").read_text()
    assert s.verdict == "INCONCLUSIVE" and 'class="banner warn"' in doc
    for needle in ('id="compute-table"', 'id="compute-ratios"', 'id="compute-matched"', "1.200×", "1 h 00 min",
                   "2.00 GiB", "estimate +21.0 pp ≥ +10.0 pp", "joint_ok — superiority: lower bound &gt; 0: not evaluated",
                   "fallback used: newcombe", "Coverage 80.0% is below the preregistered 95.0%", "repo0__task-0",
                   "Noisy feedback</h2>\n  <p class=\"absent\">Not run in this study."):
        assert needle in doc, needle
