"""The reproduction pipeline of ``tgsuite reproduce``: the stage runner (``stage_runner``), the stages as public
functions (``stages``) and their typed records (``records``), the presets (``presets``), the orchestrator (``reproduce``) and the exploratory studies (``studies``,
``tiers``, ``probes``, all handed a ``study_context.StudyContext``)."""
