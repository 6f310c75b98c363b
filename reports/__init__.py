"""tgsuite reports: self-contained HTML evaluation reports built from an ``AnalysisResult``.

Python API: ``reports.build_report(analysis, out_dir=..., protocol=..., run_dirs=..., training_metrics=...)``
(see :func:`reports.build.build_report`); CLI: ``tgsuite report``. The package formats what the analysis carries and
never computes statistics. ``build_report`` is imported lazily so that reading ``reports.schema`` stays light
(no matplotlib import).
"""

from __future__ import annotations

from typing import Any

__all__ = ["build_report"]


def __getattr__(name: str) -> Any:
    if name == "build_report":
        from reports.build import build_report

        return build_report
    raise AttributeError(f"module 'reports' has no attribute {name!r}")
