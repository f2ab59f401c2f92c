"""kvtop.model."""
