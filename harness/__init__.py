"""tgsuite: harness package."""
