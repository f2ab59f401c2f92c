"""sources/, model/, logparse/ and the exporter never import Textual (style guide §5): checked in a fresh interpreter."""

from __future__ import annotations

import subprocess
import sys


def test_sources_and_model_do_not_import_textual() -> None:
    code = (
        "import sys, kvtop.sources.ollama, kvtop.sources.gpu, kvtop.sources.procs, kvtop.model.gpu, kvtop.model.state, kvtop.model.kv, kvtop.report, kvtop.demo.server, "
        "kvtop.sources.slots, kvtop.sources.service_env, kvtop.model.ladder, kvtop.sources.replay, kvtop.sources.protocols, kvtop.sources.hosts, kvtop.sources.tail, kvtop.sources.tail_backlog, "
        "kvtop.model.history, kvtop.model.codec, kvtop.model.slots, kvtop.model.alerts, kvtop.model.plan, kvtop.logparse, "
        "kvtop.export.prometheus;"
        "bad = [m for m in sys.modules if m == 'textual' or m.startswith('textual.')];"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
