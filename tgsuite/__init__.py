"""tgsuite: the application on top of the libraries: the ``tgsuite`` CLI (``tgsuite.cli``, ``tgsuite.commands``) and
the reproduction pipeline (``tgsuite.pipeline``).

It may import every package of the project; none of them imports it (tests/test_import_rules.py).
"""
