"""sources/, model/, logparse/ and the exporter never import Textual (CONTRIBUTING.md "Layers"): checked in a fresh interpreter."""

from __future__ import annotations

import subprocess
import sys


def test_sources_and_model_do_not_import_textual() -> None:
    code = (
        "import sys, kvtop.sources.ollama, kvtop.sources.gpu, kvtop.sources.procs, kvtop.model.gpu, kvtop.model.state, kvtop.model.kv, kvtop.report, kvtop.demo.server, "
        "kvtop.sources.slots, kvtop.sources.service_env, kvtop.model.ladder, kvtop.sources.replay, kvtop.sources.protocols, kvtop.sources.hosts, kvtop.sources.tail, kvtop.sources.tail_backlog, "
        "kvtop.model.history, kvtop.model.codec, kvtop.model.slots, kvtop.model.alerts, kvtop.model.plan, kvtop.logparse, "
        "kvtop.export.command;"
        "bad = [m for m in sys.modules if m == 'textual' or m.startswith('textual.')];"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _imports(path: "object") -> set[str]:
    """Every kvtop module a source file imports, TYPE_CHECKING and function-level imports included."""
    import ast
    from pathlib import Path

    tree = ast.parse(Path(str(path)).read_text(encoding="utf-8"))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("kvtop"):
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("kvtop"))
    return out


def test_no_import_circles_between_state_and_alerts_nor_app_and_replay_worker() -> None:
    """State holds data and alert evaluation is a function of it (alerts import state,
    state imports only the alert data types); the replay worker posts messages to the app and
    never imports it (the app imports the worker)."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "kvtop"
    state = _imports(root / "model" / "state.py")
    assert not {
        m
        for m in state
        if m.startswith("kvtop.model.alerts")
        and m != "kvtop.model.alerts.types"
        and not m.startswith("kvtop.model.alerts.types.")
    }, state
    assert "kvtop.model.alerts" not in state
    types = _imports(root / "model" / "alerts" / "types.py")
    assert not any(m.startswith("kvtop.model.state") for m in types), types
    worker = _imports(root / "ui" / "replay_worker.py")
    assert not any(m.startswith("kvtop.ui.app") for m in worker), worker
    assert "kvtop.ui.replay_worker" in _imports(root / "ui" / "app.py")


def test_the_engine_imports_neither_textual_nor_rich() -> None:
    """The headless engine every face shares is asyncio only (checked in a fresh interpreter)."""
    code = (
        "import sys, kvtop.engine, kvtop.engine.engine, kvtop.engine.core, kvtop.engine.once, kvtop.engine.sources, kvtop.engine.fold, kvtop.engine.logfeed;"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('textual', 'rich')];"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "kvtop" / "engine"
    for path in root.glob("*.py"):
        faces = {m for m in _imports(path) if m.split(".")[1:2] and m.split(".")[1] in ("ui", "cli", "export", "demo")}
        assert not faces, (path.name, faces)  # the faces sit above the engine
