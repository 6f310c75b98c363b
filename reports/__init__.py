"""tgsuite: reports package."""
