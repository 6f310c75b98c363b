"""tgsuite: repro package."""
