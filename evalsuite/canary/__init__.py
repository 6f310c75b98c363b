"""evalsuite.canary: gray-release decisions CONTINUE / ROLLBACK / PROMOTE with anytime-valid error control.

Modules (pure functions, frozen results; numpy and scipy only; formulas and references in each docstring):
    mixture     normal-mixture mSPRT / confidence sequences, one-sided bounds, tau² tuning, always-valid p
    delta       ratio metrics over randomisation units, delta-method variances, difference / log-ratio effects
    srm         sample-ratio mismatch: sequential Dirichlet-multinomial Bayes factor, single-look chi-square
    gsd         group-sequential boundaries (Lan–DeMets spending, classical OBF / Pocock), crossing probabilities
    guardrails  one metric at one look: harm and non-inferiority bounds, status; Bonferroni allocation
    decide      the decision rule (union of harm tests, intersection–union for PROMOTE)
    aggregate   logged episodes -> cohort-window unit aggregates
    monitor     looks, data-quality gates (``prereg``: the record's git anchor), ``run_canary(record, episodes, ...)``
    logs        reading the JSON Lines logs with located errors; schema: the row and result models
    replay      a `tgsuite eval` run -> a synthetic production log (explicit RNG)
    simulate    Monte Carlo error rates under continuous monitoring
Design and measured figures: docs/CANARY.md. Submodules are imported explicitly (nothing is loaded here).
"""
