"""kvtop.sources."""
