"""kvtop.ui."""
