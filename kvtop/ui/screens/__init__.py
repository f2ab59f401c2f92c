"""kvtop.ui.screens."""
