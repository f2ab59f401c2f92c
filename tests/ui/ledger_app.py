"""An app for the memory ledger's face tests: the demo scenario's "spills" step, its ``gemma4:latest`` row given the
weights blob of a real llama-server run (``tests/fixtures/logs/llama-server-runs/gemma3-iswa-prompt-cache-np2.log``:
an interleaved-SWA model with both KV pools, a host prompt cache and context checkpoints), that run as the server
log (``--log file:…``), and the shared two-GPU server's GPU and process samples (the gemma runner's ``--model``
that blob: NVML measures it on both GPUs)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from kvtop.config import Settings
from kvtop.model.snapshots import OllamaSnapshot, detail_key
from kvtop.ui.app import KvtopApp, make_app
from tests.fakes.gpu_sources import FixedGpuSource, FixedProcSource
from tests.fakes.scenario import GEMMA_PID, shared_sample
from tests.ui.fakes import HOST, FakeSource, snapshot_at, step_index

LEDGER_LOG = (
    Path(__file__).resolve().parents[1] / "fixtures" / "logs" / "llama-server-runs" / "gemma3-iswa-prompt-cache-np2.log"
)
MODEL = "gemma4:latest"


def ledger_blob() -> str:
    """The weights blob of the run's ``--model``."""
    m = re.search(r"--model \S*/(sha256-[0-9a-f]{64})", LEDGER_LOG.read_text(encoding="utf-8"))
    assert m is not None
    return m.group(1)


def ledger_snapshot() -> OllamaSnapshot:
    """The "spills" step with ``gemma4:latest``'s /api/show naming the run's weights blob."""
    snap = snapshot_at(step_index("spills"))
    shows = dict(snap.shows)
    (m,) = [m for m in snap.models if m.name == MODEL]
    key = detail_key(m)
    shows[key] = dataclasses.replace(shows[key], model_blob=ledger_blob())
    return dataclasses.replace(snap, shows=shows)


def ledger_app(tmp_root: Path, *, gpu: bool = True) -> KvtopApp:
    """The dashboard on :func:`ledger_snapshot` with the run as its log (``gpu=False``: no NVIDIA)."""
    gpu_snap, procs, _models = shared_sample(tmp_root)
    blob = ledger_blob()
    runners = tuple(dataclasses.replace(r, blob=blob) if r.pid == GEMMA_PID else r for r in procs.runners)
    procs = dataclasses.replace(procs, runners=runners)
    return make_app(
        Settings(host_url=HOST, interval_s=0.25, log_spec=f"file:{LEDGER_LOG}"),
        FakeSource(ledger_snapshot(), hold=True),
        gpu_source=FixedGpuSource(gpu_snap if gpu else None),
        proc_source=FixedProcSource(procs if gpu else None),
    )
