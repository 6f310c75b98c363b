"""tgsuite evalsuite: outcome tables, statistics, the ship/no-ship decision and study analyses (STATS.md).

Public API (keyword-only options; frozen result objects):
    rd_ci(x1, n1, x2, n2, *, method, alpha)            independent risk-difference CI (newcombe, mn, mee, wald, agresti_caffo)
    rd_ci_paired(a, b, c, d, *, method, alpha)         paired CI (tango, newcombe); a both, b treatment only, c baseline only, d neither
    ni_test / ni_test_paired                           non-inferiority tests at margin delta
    mcnemar_test, wilson_ci, se_clustered              helpers
    crossed_effect, paired_clustered_diff              method- and artifact-level estimators (Wald t)
    crossed_score, paired_score                        the same with the score-type variance (the analysis uses these)
    type_one_error, simulate_plan_power                simulated type-I error at the NI margin; power of a plan's model
    variance_components, hierarchical_bootstrap
    power_ni_crossed, power_paired_mcnemar, power_ni_independent, simulate_power
    decide                                             intersection-union ship decision
The end-to-end analysis is ``from evalsuite.analyze import analyze`` (FrozenProtocol + run dirs -> AnalysisResult;
``evalsuite.analyze`` is the module, so it is not re-exported here).
Importing ``evalsuite`` never imports torch or docker (numpy, scipy, statsmodels, pandas only).
"""

from importlib import import_module
from typing import Any

_WHERE = {
    "BootstrapResult": "bootstrap", "hierarchical_bootstrap": "bootstrap",
    "DecisionOutcome": "decide", "decide": "decide",
    "NITestResult": "noninferiority", "mcnemar_test": "noninferiority", "ni_test": "noninferiority",
    "ni_test_paired": "noninferiority", "paired_table": "noninferiority", "rd_ci_paired": "noninferiority",
    "power_ni_crossed": "power", "power_ni_independent": "power", "power_paired_mcnemar": "power",
    "simulate_power": "power",
    "StatsInputError": "rates", "rd_ci": "rates", "se_clt": "rates", "se_clustered": "rates", "wilson_ci": "rates",
    "EffectEstimate": "variance", "crossed_effect": "variance", "paired_clustered_diff": "variance",
    "variance_components": "variance", "crossed_score": "score_variance", "paired_score": "score_variance",
    "type_one_error": "simulate", "simulate_plan_power": "power_sim",
}  # fmt: skip


def __getattr__(name: str) -> Any:
    """Lazy re-exports, so that ``import evalsuite.schema`` (used by ``reports``) does not load statsmodels."""
    if name in _WHERE:
        return getattr(import_module(f"evalsuite.{_WHERE[name]}"), name)
    raise AttributeError(f"module 'evalsuite' has no attribute {name!r}")


__all__ = [
    "BootstrapResult", "DecisionOutcome", "EffectEstimate", "NITestResult", "StatsInputError",
    "crossed_effect", "decide", "hierarchical_bootstrap", "mcnemar_test", "ni_test", "ni_test_paired",
    "crossed_score", "paired_clustered_diff", "paired_score", "paired_table", "simulate_plan_power", "type_one_error", "power_ni_crossed", "power_ni_independent", "power_paired_mcnemar",
    "rd_ci", "rd_ci_paired", "se_clt", "se_clustered", "simulate_power", "variance_components", "wilson_ci",
]  # fmt: skip
