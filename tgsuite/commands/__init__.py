"""Sub-commands of the ``tgsuite`` CLI: one module each, exposing ``register(subparsers)``."""
