"""tgsuite evalsuite: outcome tables, statistics, the ship/no-ship decision and study analyses (STATS.md).

Public API (keyword-only options; frozen result objects):
    rd_ci(x1, n1, x2, n2, *, method, alpha)            independent risk-difference CI (newcombe, mn, mee, wald, agresti_caffo)
    rd_ci_paired(a, b, c, d, *, method, alpha)         paired CI (tango, newcombe); a both, b treatment only, c baseline only, d neither
    ni_test / ni_test_paired                           non-inferiority tests at margin delta
    mcnemar_test, wilson_ci, se_clustered              helpers
    crossed_effect, paired_clustered_diff              method- and artifact-level estimators
    variance_components, hierarchical_bootstrap
    power_ni_crossed, power_paired_mcnemar, power_ni_independent, simulate_power
    decide                                             intersection-union ship decision
    analyze                                            FrozenProtocol + run dirs -> AnalysisResult
Importing ``evalsuite`` never imports torch or docker (numpy, scipy, statsmodels, pandas only).
"""

from evalsuite.bootstrap import BootstrapResult, hierarchical_bootstrap
from evalsuite.decide import DecisionOutcome, decide
from evalsuite.noninferiority import (
    NITestResult,
    mcnemar_test,
    ni_test,
    ni_test_paired,
    paired_table,
    rd_ci_paired,
)  # fmt: skip
from evalsuite.power import power_ni_crossed, power_ni_independent, power_paired_mcnemar, simulate_power
from evalsuite.rates import StatsInputError, rd_ci, se_clt, se_clustered, wilson_ci
from evalsuite.variance import EffectEstimate, crossed_effect, paired_clustered_diff, variance_components


def analyze(*args, **kwargs):  # type: ignore[no-untyped-def]
    """See :func:`evalsuite.analyze.analyze` (imported lazily to keep ``import evalsuite`` light)."""
    from evalsuite.analyze import analyze as _analyze

    return _analyze(*args, **kwargs)


__all__ = [
    "BootstrapResult", "DecisionOutcome", "EffectEstimate", "NITestResult", "StatsInputError", "analyze",
    "crossed_effect", "decide", "hierarchical_bootstrap", "mcnemar_test", "ni_test", "ni_test_paired",
    "paired_clustered_diff", "paired_table", "power_ni_crossed", "power_ni_independent", "power_paired_mcnemar",
    "rd_ci", "rd_ci_paired", "se_clt", "se_clustered", "simulate_power", "variance_components", "wilson_ci",
]  # fmt: skip
