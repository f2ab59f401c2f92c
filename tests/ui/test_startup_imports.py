"""What ``import kvtop.ui.app`` costs at startup: not the screens, dialogs, plots and planner that
the dashboard's first frame does not need (they are imported when first opened;
``benchmarks/startup.py`` measures the whole start). Checked in a fresh interpreter."""

from __future__ import annotations

import subprocess
import sys

NOT_AT_STARTUP = (
    "kvtop.ui.screens.plan",
    "kvtop.ui.screens.plan_text",
    "kvtop.ui.screens.history",
    "kvtop.ui.screens.model_detail",
    "kvtop.ui.screens.server_view",
    "kvtop.ui.screens.help",
    "kvtop.ui.screens.confirm",
    "kvtop.ui.screens.write_dialogs",
    "kvtop.ui.widgets.plot",
    "plotext",
    "kvtop.model.preflight",
    "kvtop.model.server_view",
    "kvtop.model.plan",
    "kvtop.ui.replay_worker",
    "kvtop.sources.signals",
)
"""Modules the first frame does not need: the pushed screens and dialogs, the plot widget and
plotext, the server view's model and its pre-flight, the planner (the spill rule loads it for a spilled
model), replay, signals."""


def test_importing_the_app_leaves_out_what_the_first_frame_does_not_need() -> None:
    code = "import sys, kvtop.ui.app; print('\\n'.join(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    loaded = set(done.stdout.split())
    assert "kvtop.ui.screens.dashboard" in loaded and "kvtop.ui.app" in loaded  # the listing is real
    assert sorted(m for m in NOT_AT_STARTUP if m in loaded) == []
