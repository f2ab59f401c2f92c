"""kvtop: ``top`` for an Ollama server's memory."""

from __future__ import annotations

__version__ = "0.1.0"
