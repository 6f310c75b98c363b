"""tgsuite: evalsuite package."""
