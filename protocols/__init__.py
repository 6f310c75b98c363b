"""tgsuite: protocols package."""
