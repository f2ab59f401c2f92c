"""Bundled recordings and scenarios (shipped in the wheel as kvtop.snapshots)."""
