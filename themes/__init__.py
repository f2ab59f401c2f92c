"""Bundled themes (shipped in the wheel as kvtop.themes)."""
