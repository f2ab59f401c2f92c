"""Headless exporters: kvtop's per-model memory figures for other tools (``kvtop export ...``).

``prometheus``: ``kvtop export prometheus [--listen HOST:PORT]`` serves ``/metrics``
(:mod:`kvtop.export.prometheus`). Exporters poll with the same sources and pure state
functions as the dashboard and never import Textual.
"""

from __future__ import annotations
