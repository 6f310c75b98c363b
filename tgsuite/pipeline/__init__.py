"""The reproduction pipeline of ``tgsuite reproduce``: resumable stages (``stages``), their public stage functions
(``steps``), the presets (``presets``), the orchestrator (``reproduce``) and the exploratory studies (``studies``,
``tiers``, ``probes``, all handed a ``study_context.StudyContext``)."""
