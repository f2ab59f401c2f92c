"""kvtop.logparse."""
