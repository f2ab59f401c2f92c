"""kvtop.ui.widgets."""
