"""The history's compact storage: two ``array('d')`` per series as a ring, the same
answers as the tuple-per-point deque it replaced, and 16–24 bytes a point, not ~128."""

from __future__ import annotations

import dataclasses
import random
import tracemalloc
from collections import deque

import pytest

from kvtop.model.history import History, Series, downsample
from kvtop.model.fold_alerts import fold_with_alerts
from kvtop.model.gpu_snapshots import GpuDevice, GpuSnapshot, ProcSnapshot
from kvtop.model.views import AppState
from tests.ui.fakes import HOST, TAKEN_AT, snapshot_at, step_index

MAX_BYTES_PER_POINT = 24.0
"""16 bytes of payload (two doubles) plus the arrays' over-allocation; the deque of tuples held ~128."""


class DequeSeries:
    """The storage kvtop had before the ring, kept as the reference the ring must agree with."""

    def __init__(self, bucket_s: float, retention_s: float) -> None:
        self.bucket_s, self.retention_s = bucket_s, retention_s
        self.points: deque[tuple[float, float]] = deque(maxlen=max(1, int(round(retention_s / bucket_s))))

    def add(self, t_s: float, value: float) -> None:
        points = self.points
        bucket = (t_s // self.bucket_s) * self.bucket_s
        if points and bucket <= points[-1][0]:
            points[-1] = (points[-1][0], value)
            return
        points.append((bucket, value))
        while points and points[0][0] <= bucket - self.retention_s:
            points.popleft()

    def window(self, start_s: float, end_s: float) -> tuple[tuple[float, float], ...]:
        return tuple(p for p in self.points if start_s <= p[0] <= end_s)


@pytest.mark.parametrize(
    ("bucket_s", "retention_s", "seed"),
    [(1.0, 100.0, 1), (1.0, 100.0, 2), (0.25, 30.0, 3), (2.0, 2.0, 4), (1.0, 3600.0, 5), (1.0, 7.0, 6)],
)
def test_the_ring_answers_as_the_deque_did(bucket_s: float, retention_s: float, seed: int) -> None:
    """Random sample times (coalescing, samples older than the newest bucket, gaps longer than the
    retention, bursts that fill the ring and wrap it many times): after every sample the length,
    the newest point, the oldest time and several windows equal the reference's."""
    rng = random.Random(seed)
    ring, ref = Series(bucket_s, retention_s), DequeSeries(bucket_s, retention_s)
    t = 1_000_000.0
    wrapped = False
    for i in range(6000):
        r = rng.random()
        if r < 0.6:
            t += rng.choice((0.1, 0.25, 1.0, 1.0, 1.0, 2.0, 3.5))
        elif r < 0.7:
            t -= rng.uniform(0, 3)  # older than the newest bucket: coalesced into it
        elif r < 0.72:
            t += retention_s * rng.uniform(0.5, 2.5)  # a long gap: most or all expire
        value = rng.uniform(0, 1e11)
        ring.add(t, value)
        ref.add(t, value)
        wrapped = wrapped or ring._start > 0
        assert len(ring) == len(ref.points), i
        assert ring.latest == ref.points[-1]
        assert ring.oldest_s == ref.points[0][0]
        if i % 7 == 0:
            newest = ref.points[-1][0]
            for lo, hi in (
                (0.0, 1e12),
                (newest - retention_s / 3, newest),
                (newest - retention_s / 2, newest - 2.0),
                (newest + 1, newest + 5),
                (newest - 3.0, newest - 3.0),
            ):
                assert ring.window(lo, hi) == ref.window(lo, hi), (i, lo, hi)
    assert wrapped or ring.cap == 1  # the test went through the wrap-around, not only appends


def test_an_empty_series_answers_empty() -> None:
    s = Series(1.0, 10.0)
    assert len(s) == 0 and s.latest is None and s.oldest_s is None and s.window(0, 1e12) == ()


def test_a_full_series_holds_at_most_24_bytes_a_point() -> None:
    """3,600 points (an hour of 1 s buckets) measured two ways: the arrays' own allocation
    (``sys.getsizeof``) and what tracemalloc saw allocated while the series filled."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        series = Series()
        for i in range(3 * series.cap):  # fills, then wraps twice
            series.add(1_700_000_000.0 + i, float(i * 1024))
        traced = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert len(series) == series.cap == 3600
    assert 16 * 3600 <= series.stored_bytes() <= MAX_BYTES_PER_POINT * 3600
    assert traced <= MAX_BYTES_PER_POINT * 3600, f"{traced / 3600:.1f} B a point"


def test_the_memory_is_given_back_when_the_points_expire() -> None:
    series = Series()
    for i in range(3600):
        series.add(1_700_000_000.0 + i, 1.0)
    full = series.stored_bytes()
    series.add(1_700_000_000.0 + 3600 + 3000, 2.0)  # 50 minutes later: most points are older than the hour
    assert len(series) == 600
    assert series.stored_bytes() < full / 2
    assert series.window(0, 1e12)[0] == (1_700_000_000.0 + 3001.0, 1.0)  # the hour before the newest point


def test_the_history_of_100_models_for_an_hour_stays_small() -> None:
    """100 loaded models and a GPU sampled every second for an hour (the issue's case): 3 series a
    model are filled (``size_vram``, ``size``, KV) plus the GPU's used and total: 302 × 3,600 points.
    The deque held ~128 bytes a point (~133 MiB); the arrays hold at most 24."""
    base = fold_with_alerts(AppState(host_url=HOST), snapshot_at(step_index("raised to 32768"), taken_at=TAKEN_AT))
    view = base.models[0]
    views = tuple(dataclasses.replace(view, name=f"model-{i:03d}:latest") for i in range(100))
    h = History()
    proc = ProcSnapshot(taken_at=0.0)
    for i in range(3600):
        t = TAKEN_AT + i
        snap = dataclasses.replace(base.last_ok, taken_at=t)
        gpu = GpuSnapshot(
            taken_at=t,
            status="GPU telemetry: NVML",
            ok=True,
            backend="nvml",
            devices=(
                GpuDevice(index=0, name="gpu", memory_total_bytes=80 * 2**30, memory_used_bytes=(40 + i % 3) * 2**30),
            ),
        )
        h.record(dataclasses.replace(base, last_ok=snap, ollama=snap, models=views, gpu=gpu, procs=proc), t)
    points = h.point_count()
    assert points == (100 * 3 + 2) * 3600
    assert h.stored_bytes() <= MAX_BYTES_PER_POINT * points, f"{h.stored_bytes() / points:.1f} B a point"


@pytest.mark.parametrize("seed", [11, 12, 13])
def test_downsampled_equals_downsample_of_the_window(seed: int) -> None:
    """``Series.downsampled`` (binary search and ``max`` per slice, on the arrays) gives exactly
    what ``downsample(window())`` gives: the same points, the first highest of each slice, for
    windows that do and do not line up with the buckets, and ties (flat stretches)."""
    rng = random.Random(seed)
    s = Series(1.0, 3600.0)
    t = 1_700_000_000.0
    for _ in range(5000):
        t += rng.choice((1.0, 1.0, 1.0, 2.0, 7.0))
        s.add(t, float(rng.choice((5, 5, 5, 6, rng.randint(0, 100)))))  # many ties
    newest = s.latest[0] if s.latest else 0.0
    for _ in range(200):
        span = rng.choice((60.0, 600.0, 3600.0, rng.uniform(10, 4000)))
        end = newest - rng.choice((0.0, 0.3, rng.uniform(0, 300)))
        slots = rng.choice((10, 107, 160, 214, 320, rng.randint(1, 700)))
        expected = downsample(s.window(end - span, end), end - span, end, slots)
        assert s.downsampled(end - span, end, slots) == expected, (span, end, slots)
        assert s.count(end - span, end) == len(s.window(end - span, end))
