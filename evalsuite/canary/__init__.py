"""evalsuite.canary: anytime-valid online (gray-release) decisions; see docs/CANARY.md."""
