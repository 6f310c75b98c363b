"""Packaged configuration data: ``base.toml`` (every default) and ``arms.toml`` (METHOD §6.9 arm presets)."""
