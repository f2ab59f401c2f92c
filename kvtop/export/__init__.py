"""Headless exporters: kvtop's per-model memory figures for other tools (``kvtop export ...``).

``kvtop export prometheus [--listen HOST:PORT]`` serves ``/metrics``; ``kvtop export textfile
PATH`` writes the same metrics for node_exporter's textfile collector. The parts: the command line
(:mod:`kvtop.export.command`), the loop that publishes each host's view
(:mod:`kvtop.export.exporter`), the metric catalogue and families (:mod:`kvtop.export.metrics`),
the log-derived counters (:mod:`kvtop.export.log_counters`), the cached ``/metrics`` body
(:mod:`kvtop.export.metrics_cache`), the HTTP server (:mod:`kvtop.export.http_server`, guarded by
:mod:`kvtop.export.httpguard`) and the textfile writer (:mod:`kvtop.export.textfile`). Exporters
run the dashboard's engine (``kvtop.engine``) and never import Textual.
"""

from __future__ import annotations
