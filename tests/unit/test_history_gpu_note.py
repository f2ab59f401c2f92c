"""The history's GPU note moves its version: the plots' titles say it ("GPU telemetry: no NVIDIA
driver …"), so a GPU sample that only changes the note must repaint them. Since the engine applies
the first poll before the first GPU sample, a version that stayed put left "GPU telemetry: none
yet" on screen for good."""

from __future__ import annotations

import dataclasses
from datetime import timezone

from kvtop.model.history import History
from kvtop.model.snapshots import OllamaSnapshot
from kvtop.model.state import fold, initial_state
from tests.fakes.gpu_sources import no_gpu_snapshot


def test_a_gpu_sample_that_only_brings_its_note_moves_the_version() -> None:
    state, _ = initial_state("http://127.0.0.1:11434", {}, timezone.utc)
    state = fold(state, OllamaSnapshot(host_url=state.host_url, taken_at=1_795_000_000.0, reachable=True))
    history = History()
    assert history.record(state) and history.version == 1 and history.gpu_note is None
    with_gpu = dataclasses.replace(state, gpu=no_gpu_snapshot())
    assert history.record(with_gpu) and history.version == 2
    assert history.gpu_note == "GPU telemetry: no NVIDIA driver (NVML library not found)"
    assert not history.record(with_gpu) and history.version == 2  # the same sample again: nothing new
