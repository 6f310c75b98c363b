"""repro: the training library of tgsuite (model, tokenizer, SFT, GRPO/TG training, rollouts, sampling).

It never imports ``evalsuite``, ``reports`` or ``tgsuite``; the CLI and the reproduction pipeline that drive it
live in ``tgsuite`` (tests/test_import_rules.py).
"""
