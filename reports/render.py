"""Jinja2 rendering of the view models into self-contained HTML.

The environment autoescapes everything (``autoescape=True``) and fails on any missing field
(``undefined=StrictUndefined``), so a template that refers to something the view model lacks raises instead of
printing an empty string. Only figure SVG produced by ``reports.figures`` is marked safe. Data embedded for the
in-page episode table goes through ``|tojson``, which escapes ``<``, ``>``, ``&`` and ``'`` so agent text cannot
close the ``<script>`` element; the page's script writes it with ``textContent`` only.

Pages carry a Content-Security-Policy that forbids every network fetch (``default-src 'none'``): nothing in the
report can load anything from anywhere, even if a future template change tried to. The index page allows exactly
one script, its own, by hash (see :func:`page_script`); trajectory pages allow none.
"""

from __future__ import annotations

import base64
import hashlib
from functools import lru_cache
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined

from reports.model import ReportView, TrajectoryView

CSP_PAGE = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
SCRIPT_TEMPLATE = "_episodes_script.html"


@lru_cache(maxsize=1)
def environment() -> Environment:
    env = Environment(
        loader=PackageLoader("reports", "templates"),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    return env


def render_template(name: str, **context: Any) -> str:
    """Render one template by name (raises ``jinja2.UndefinedError`` on any missing field)."""
    return environment().get_template(name).render(**context)


def page_script() -> tuple[str, str]:
    """The index page's one inline script (static, ours) and the CSP that allows exactly it (by sha256).

    With ``script-src 'sha256-…'`` the browser runs this script and nothing else: even a ``<script>`` that slipped
    past escaping would be refused (and logged as a CSP violation, which the browser test treats as an error).
    """
    text = environment().loader.get_source(environment(), SCRIPT_TEMPLATE)[0]  # type: ignore[union-attr]
    digest = base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii")
    return text, f"default-src 'none'; style-src 'unsafe-inline'; script-src 'sha256-{digest}'; img-src data:"


def render_index(view: ReportView) -> str:
    script, csp = page_script()
    return render_template("index.html", view=view, csp=csp, script=script)


def render_trajectory(view: TrajectoryView) -> str:
    return render_template("trajectory.html", view=view, csp=CSP_PAGE)
