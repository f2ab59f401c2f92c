"""kvtop.demo."""
