"""The report in a real headless Chromium, offline, from file:// (DevTools protocol over a pipe).

Asserts: no request leaves the page (every Network.requestWillBeSent URL is file:// or data:), the console and
log show no error, no uncaught exception, no JavaScript dialog (an injected ``alert`` would open one), the key
element ids exist, the in-page episode table pages and filters, and agent text shows up as literal text. The
screenshot is kept next to the report for a human to look at.

Skipped without Chromium locally; with CI=true a missing Chromium fails (scripts/setup.sh installs it).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures" / "reports"))
import report_factory as factory  # noqa: E402
from report_cdp import check_page, find_chromium  # noqa: E402

from reports.build import build_report  # noqa: E402

pytestmark = pytest.mark.browser

KEY_IDS = ("verdict", "verdict-word", "criteria", "criteria-table", "outcomes", "variance", "sensitivity", "training",
           "noisy", "compute", "cando", "breakdowns", "missing", "prereg", "deviations", "provenance", "episodes",
           "episode-table", "episode-controls")


@pytest.fixture(scope="module")
def chromium() -> str:
    path = find_chromium()
    if path is None:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail("CI=true but no chromium on PATH; scripts/setup.sh should install Debian's `chromium`")
        pytest.skip("headless Chromium not installed (apt-get install -y chromium)")
    return path


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("browser")
    kw = factory.full_fixture(root, n_tasks=70)  # 280 episodes: more than one page of the in-page table
    kw.pop("episodes")
    build_report(kw.pop("analysis"), out_dir=root / "out", max_trajectory_pages=40, **kw)
    return root / "out"


def _assert_clean(result, name: str) -> None:  # noqa: ANN001
    bad = [u for u in result.requests if not u.startswith(("file://", "data:"))]
    assert not bad, f"{name}: requests left the page: {bad}"
    assert not result.errors(), f"{name}: console/log errors: {result.errors()}"
    assert result.dialogs == [], f"{name}: a JavaScript dialog opened (injected script ran): {result.dialogs}"


def test_index_offline_in_chromium(chromium: str, report: Path) -> None:
    ids = ",".join(f"'{i}'" for i in KEY_IDS)
    nasty_js = factory.NASTY.replace("\\", "\\\\").replace("'", "\\'")
    exprs = {
        "missing_ids": f"[{ids}].filter(i => !document.getElementById(i))",
        "verdict": "document.getElementById('verdict-word').textContent.trim()",
        "rows": "document.querySelectorAll('#episode-rows tr').length",
        "page_label": "document.getElementById('ep-page').textContent",
        "svgs": "document.querySelectorAll('figure svg').length",
        "scripts": "document.scripts.length",
        "imgs": "document.images.length",
        "nasty_literal": f"document.body.textContent.includes('{nasty_js}')",
        "filtered": "(() => { const s = document.getElementById('ep-arm'); s.value = 'grpo';"
                    " s.dispatchEvent(new Event('input')); const r = [...document.querySelectorAll('#episode-rows tr')];"
                    " return [r.length, r.every(t => t.children[2].textContent === 'grpo')]; })()",
        "next_page": "(() => { document.getElementById('ep-next').click();"
                     " return document.getElementById('ep-page').textContent; })()",
    }
    r = check_page(chromium, report / "index.html", expressions=exprs)
    (report / "screenshot-index.png").write_bytes(r.screenshot)
    _assert_clean(r, "index.html")
    assert r.requests and all(u.startswith("file://") for u in r.requests)
    ev = r.evaluated
    assert ev["missing_ids"] == [], ev["missing_ids"]
    assert ev["verdict"] == "NO-SHIP"
    assert ev["rows"] == 100 and "page 1 of 3 (280 episodes)" in ev["page_label"]
    assert ev["svgs"] >= 4 and ev["imgs"] == 0
    assert ev["scripts"] == 2  # the JSON data block and our own inline script; agent text added none
    assert ev["nasty_literal"] is True  # agent text is shown as text, not interpreted
    assert ev["filtered"] == [100, True]
    assert "page 2 of 2 (140 episodes)" in ev["next_page"]
    assert r.screenshot[:8] == b"\x89PNG\r\n\x1a\n" and len(r.screenshot) > 20_000


def test_trajectory_page_offline_in_chromium(chromium: str, report: Path) -> None:
    page = next((report / "trajectories").glob("repo0__task-0__*.html"))
    exprs = {"scripts": "document.scripts.length", "imgs": "document.images.length",
             "ids": "['conversation','diff','grading','behaviour'].filter(i => document.getElementById(i)).length",
             "textareas": "document.querySelectorAll('textarea').length",
             "back": "document.querySelector('a').getAttribute('href')"}
    r = check_page(chromium, page, expressions=exprs)
    (report / "screenshot-trajectory.png").write_bytes(r.screenshot)
    _assert_clean(r, page.name)
    assert r.evaluated == {"scripts": 0, "imgs": 0, "ids": 4, "textareas": 0, "back": "../index.html#episodes"}


def test_csp_blocks_an_injected_script(chromium: str, report: Path) -> None:
    """Defence in depth: if markup ever slipped past escaping, the hash-based CSP would refuse to run it."""
    doc = (report / "index.html").read_text()
    bad = report / "injected.html"
    bad.write_text(doc.replace("<main>", "<main><script>alert('injected')</script>", 1))
    r = check_page(chromium, bad, expressions={"rows": "document.querySelectorAll('#episode-rows tr').length"})
    assert r.dialogs == []  # the injected alert never ran
    assert any("Content Security Policy" in str(e.get("text")) for e in r.logs), r.logs
    assert r.evaluated["rows"] == 100  # while the report's own (hash-allowed) script still ran
