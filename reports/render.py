"""Jinja2 rendering of the view models into self-contained HTML.

The environment autoescapes everything (``autoescape=True``) and fails on any missing field
(``undefined=StrictUndefined``), so a template that refers to something the view model lacks raises instead of
printing an empty string. Only figure SVG produced by ``reports.figures`` is marked safe. Data embedded for the
in-page episode table goes through ``|tojson``, which escapes ``<``, ``>``, ``&`` and ``'`` so agent text cannot
close the ``<script>`` element; the page's script writes it with ``textContent`` only.

Pages carry a Content-Security-Policy that forbids every network fetch (``default-src 'none'``): nothing in the
report can load anything from anywhere, even if a future template change tried to.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined

from reports.model import ReportView, TrajectoryView

CSP_INDEX = "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:"
CSP_PAGE = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"


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


def render_index(view: ReportView) -> str:
    return render_template("index.html", view=view, csp=CSP_INDEX)


def render_trajectory(view: TrajectoryView) -> str:
    return render_template("trajectory.html", view=view, csp=CSP_PAGE)
