"""Capped in-memory history of what the dashboard shows, for the plots and the table's sparkline.

Pure and synchronous: no I/O, no clock, no Textual. The app calls ``History.record(state)``
after each handler applied a message; every timestamp comes from the snapshots themselves
(``OllamaSnapshot.taken_at``, ``GpuSnapshot.taken_at``; log throughput points take the newest of
the two), so a replay plots recorded time, not the time it is watched.

Each point costs 16 bytes (two ``array('d')`` per series used as a ring, ``Series``); memory is
bounded whatever the poll interval (0.25–60 s) and however long kvtop runs: each series
keeps one point per ``bucket_s`` time bucket (samples in the same bucket are coalesced, the newest
wins), at most ``retention_s / bucket_s`` points (3600 at the defaults: one hour of 1 s buckets),
and points older than ``retention_s`` before the newest are dropped. At most ``max_models`` models
and ``max_devices`` GPUs are tracked; a model gone for longer than ``retention_s`` is forgotten,
and the one gone longest goes first when the cap is reached. Markers (load, unload, reload) are
capped at ``max_markers``.
"""

from __future__ import annotations

import sys
from array import array
from bisect import bisect_left
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from kvtop.model.views import AppState, ModelView

BUCKET_S = 1.0
"""Width of one time bucket, seconds: one stored point per series per bucket."""

RETENTION_S = 3600.0
"""How far back the history reaches, seconds (the longest plot window)."""

MAX_MODELS = 32
"""Models tracked at once (loaded now or seen within ``RETENTION_S``)."""

MAX_DEVICES = 16
"""GPUs tracked."""

MAX_MARKERS = 256
"""Load / unload / reload markers kept."""

WINDOWS_S: tuple[float, ...] = (60.0, 600.0, 3600.0)
"""The plot windows the history screen cycles through: 1 min, 10 min, 1 h."""

ModelKey = tuple[str, str]
"""A model's identity in the history: ``(name, manifest digest)``."""

MarkerKind = Literal["load", "unload", "reload"]


class Series:
    """One bounded time series of ``(t_s, value)`` points, one point per time bucket.

    ``t_s`` is Unix seconds (the sample's own time); points are stored oldest first and never
    go back in time: a sample older than the newest point's bucket is coalesced into it.

    Storage is two ``array('d')`` (times, values) used as a ring: 16 bytes a point plus the
    arrays' small over-allocation while they grow, at most ``cap`` points (``stored_bytes``).
    The arrays grow as points arrive and shrink back when the retention dropped most of them.
    """

    __slots__ = ("_t", "_v", "_start", "_n", "bucket_s", "retention_s", "cap")

    def __init__(self, bucket_s: float = BUCKET_S, retention_s: float = RETENTION_S) -> None:
        if bucket_s <= 0 or retention_s < bucket_s:
            raise ValueError(f"bucket_s must be > 0 and <= retention_s (got {bucket_s}, {retention_s})")
        self.bucket_s = bucket_s
        self.retention_s = retention_s
        self.cap = max(1, int(round(retention_s / bucket_s)))
        """The most points this series ever holds (``retention_s / bucket_s``)."""
        self._t = array("d")
        self._v = array("d")
        self._start = 0  # physical index of the oldest point
        self._n = 0  # points stored

    def __len__(self) -> int:
        return self._n

    def _phys(self, i: int) -> int:
        """The physical index of the ``i``-th point, oldest first."""
        j = self._start + i
        size = len(self._t)
        return j - size if j >= size else j

    def add(self, t_s: float, value: float) -> None:
        """Add a sample at ``t_s``; a sample in the newest point's bucket (or older) replaces it."""
        bucket = (t_s // self.bucket_s) * self.bucket_s
        n = self._n
        if n:
            last = self._phys(n - 1)
            if bucket <= self._t[last]:
                self._v[last] = value
                return
        size = len(self._t)
        if n < size:  # a free slot in the ring
            j = self._phys(n)
            self._t[j] = bucket
            self._v[j] = value
            self._n = n + 1
        elif size < self.cap:  # grow: the ring is made linear first (start 0), then appended to
            if self._start:
                self._linearize()
            self._t.append(bucket)
            self._v.append(value)
            self._n = n + 1
        else:  # full: the oldest point is overwritten
            j = self._start
            self._t[j] = bucket
            self._v[j] = value
            self._start = j + 1 if j + 1 < size else 0
        horizon = bucket - self.retention_s
        t = self._t
        while self._n and t[self._start] <= horizon:
            self._start = self._start + 1 if self._start + 1 < len(t) else 0
            self._n -= 1
        if self._n * 4 < len(t) and len(t) > 64:  # most of it expired: give the memory back
            self._linearize()

    def _linearize(self) -> None:
        """Copy the points into arrays of exactly ``len(self)`` items, oldest first (start 0)."""
        t, v = self._arrays(0, self._n)
        self._t, self._v, self._start = t, v, 0

    def _arrays(self, a: int, b: int) -> tuple[array[float], array[float]]:
        """Points ``a`` to ``b`` (logical, oldest first, ``b`` excluded) as two new arrays."""
        if a >= b:
            return array("d"), array("d")
        pa, pb = self._phys(a), self._phys(b - 1) + 1
        if pa < pb:
            return self._t[pa:pb], self._v[pa:pb]
        return self._t[pa:] + self._t[:pb], self._v[pa:] + self._v[:pb]

    def _first_at_or_after(self, t_s: float) -> int:
        """The logical index of the first point with ``t >= t_s`` (``len(self)`` when none)."""
        lo, hi = 0, self._n
        t = self._t
        while lo < hi:
            mid = (lo + hi) // 2
            if t[self._phys(mid)] < t_s:
                lo = mid + 1
            else:
                hi = mid
        return lo

    @property
    def latest(self) -> tuple[float, float] | None:
        """The newest ``(t_s, value)``, None when empty."""
        if not self._n:
            return None
        j = self._phys(self._n - 1)
        return (self._t[j], self._v[j])

    @property
    def oldest_s(self) -> float | None:
        """The oldest point's time (Unix seconds), None when empty."""
        return self._t[self._start] if self._n else None

    def _range(self, start_s: float, end_s: float) -> tuple[int, int]:
        """Logical indexes ``[a, b)`` of the points with ``start_s <= t_s <= end_s``."""
        if not self._n or end_s < start_s:
            return 0, 0
        a = self._first_at_or_after(start_s)
        b = self._n
        if self._t[self._phys(b - 1)] > end_s:
            lo, hi = a, b  # the first point after end_s
            while lo < hi:
                mid = (lo + hi) // 2
                if self._t[self._phys(mid)] <= end_s:
                    lo = mid + 1
                else:
                    hi = mid
            b = lo
        return a, max(a, b)

    def window(self, start_s: float, end_s: float) -> tuple[tuple[float, float], ...]:
        """The points with ``start_s <= t_s <= end_s``, oldest first."""
        t, v = self._arrays(*self._range(start_s, end_s))
        return tuple(zip(t, v))

    def count(self, start_s: float, end_s: float) -> int:
        """How many points have ``start_s <= t_s <= end_s``."""
        a, b = self._range(start_s, end_s)
        return b - a

    def downsampled(self, start_s: float, end_s: float, slots: int) -> tuple[tuple[float, float], ...]:
        """``downsample(self.window(start_s, end_s), start_s, end_s, slots)``, the same points,
        computed on the arrays (the plots ask for it every poll): one pass without a dict for a
        few points a slice, a binary search and one ``max`` per slice for many."""
        a, b = self._range(start_s, end_s)
        t, v = self._arrays(a, b)
        n = len(t)
        if slots <= 0 or n <= slots or end_s <= start_s:
            return tuple(zip(t, v))
        width = (end_s - start_s) / slots
        last = slots - 1
        out: list[tuple[float, float]] = []
        if n < 4 * slots:  # a few points a slice: one pass (every point is in [start_s, end_s])
            cur = -1
            best_t = best_v = 0.0
            for x, y in zip(t, v):
                k = int((x - start_s) / width)
                if k > last:
                    k = last
                if k != cur:
                    if cur >= 0:
                        out.append((best_t, best_v))
                    cur, best_t, best_v = k, x, y
                elif y > best_v:  # the first highest, as downsample keeps it
                    best_t, best_v = x, y
            out.append((best_t, best_v))
            return tuple(out)

        def slot(x: float) -> int:  # exactly downsample's slice of a point
            return min(last, max(0, int((x - start_s) / width)))

        i = 0
        while i < n:  # many points a slice: a binary search and one max per slice
            k = slot(t[i])
            if k == last:
                j = n
            else:  # the first point of a later slice, exact at the edge
                j = bisect_left(t, start_s + (k + 1) * width, i + 1)
                while j < n and slot(t[j]) <= k:
                    j += 1
                while j > i + 1 and slot(t[j - 1]) > k:
                    j -= 1
            seg = v[i:j]
            top = max(seg)
            out.append((t[i + seg.index(top)], top))  # the first highest, as downsample keeps it
            i = j
        return tuple(out)

    def stored_bytes(self) -> int:
        """Bytes the two arrays hold, their allocation included (``sys.getsizeof``)."""
        return sys.getsizeof(self._t) + sys.getsizeof(self._v)


def downsample(
    points: tuple[tuple[float, float], ...], start_s: float, end_s: float, slots: int
) -> tuple[tuple[float, float], ...]:
    """At most ``slots`` points: the window is cut into ``slots`` equal slices and each slice keeps
    its highest point (a peak never disappears when an hour is drawn on 80 columns)."""
    if slots <= 0 or len(points) <= slots or end_s <= start_s:
        return points
    width = (end_s - start_s) / slots
    best: dict[int, tuple[float, float]] = {}
    for t, v in points:
        i = min(slots - 1, max(0, int((t - start_s) / width)))
        kept = best.get(i)
        if kept is None or v > kept[1]:
            best[i] = (t, v)
    return tuple(best[i] for i in sorted(best))


@dataclass(frozen=True, slots=True)
class Marker:
    """A model appeared, disappeared or was reloaded between two samples.

    Attributes:
        t_s: The time of the sample that showed it (Unix seconds).
        kind: ``load`` (new in ``/api/ps``), ``unload`` (gone from it) or ``reload`` (same model,
            a new runner: the log's load changed or ``/api/ps``'s context changed).
        model: The model's name.
    """

    t_s: float
    kind: MarkerKind
    model: str


class DeviceSeries:
    """One GPU's memory: used and total bytes (driver figures, ``GpuDevice``)."""

    __slots__ = ("index", "name", "used_bytes", "total_bytes")

    def __init__(self, index: int, name: str | None, bucket_s: float, retention_s: float) -> None:
        self.index = index
        self.name = name
        self.used_bytes = Series(bucket_s, retention_s)
        self.total_bytes = Series(bucket_s, retention_s)


class ModelSeries:
    """One model's series.

    Attributes:
        key: ``(name, digest)``.
        vram_bytes / size_bytes: ``/api/ps`` ``size_vram`` and ``size`` (reported).
        kv_bytes: The KV cache (``ModelView.memory.kv``); ``kv_source`` is its newest source
            (``allocated``, ``estimated`` …).
        decode_tps: Decode tokens/s, one point each time the newest timed request changed
            (runner log); ``requests_per_min``: timed requests in the minute before each sample.
        last_seen_s: When a sample last listed the model.
    """

    __slots__ = (
        "key",
        "vram_bytes",
        "size_bytes",
        "kv_bytes",
        "kv_source",
        "decode_tps",
        "requests_per_min",
        "last_seen_s",
        "_timing",
        "_load_sig",
    )

    def __init__(self, key: ModelKey, bucket_s: float, retention_s: float) -> None:
        self.key = key
        self.vram_bytes = Series(bucket_s, retention_s)
        self.size_bytes = Series(bucket_s, retention_s)
        self.kv_bytes = Series(bucket_s, retention_s)
        self.kv_source: str | None = None
        self.decode_tps = Series(bucket_s, retention_s)
        self.requests_per_min = Series(bucket_s, retention_s)
        self.last_seen_s = 0.0
        self._timing: tuple[int, float | None] | None = None
        self._load_sig: tuple[int | None, int | None, bool] | None = None
        """(runner log load index, num_ctx, a reload was marked before its load was read)."""

    @property
    def name(self) -> str:
        return self.key[0]

    def series(self) -> tuple[Series, ...]:
        return (self.vram_bytes, self.size_bytes, self.kv_bytes, self.decode_tps, self.requests_per_min)


GPU_SOURCE_LABELS = {
    "nvml": "NVML",
    "amd-sysfs": "amdgpu sysfs",
    "intel-sysfs": "Intel sysfs",
    "sysfs": "sysfs",
    "ioreg": "ioreg",
}
"""Plot-title names of the GPU backends (``GpuSnapshot.backend``)."""


def gpu_source_label(backend: str | None, status: str = "") -> str:
    """``NVML``, ``amdgpu sysfs``, ``ioreg``… for a GPU sample's ``backend``; ``DEMO, simulated`` for
    the demo's simulated GPU (its status says DEMO; it goes through the NVML protocol)."""
    if "DEMO" in status:
        return "DEMO, simulated"
    return GPU_SOURCE_LABELS.get(backend or "", backend or "GPU telemetry")


class History:
    """The bounded history of one kvtop session (see the module docstring for the bounds).

    Attributes:
        version: Increases whenever something was stored (a plot re-renders only when it moves).
        latest_s: The newest timestamp stored (Unix seconds), None before anything was.
    """

    def __init__(
        self,
        *,
        bucket_s: float = BUCKET_S,
        retention_s: float = RETENTION_S,
        max_models: int = MAX_MODELS,
        max_devices: int = MAX_DEVICES,
        max_markers: int = MAX_MARKERS,
    ) -> None:
        Series(bucket_s, retention_s)  # validates the arguments
        self.bucket_s = bucket_s
        self.retention_s = retention_s
        self.max_models = max_models
        self.max_devices = max_devices
        self.devices: dict[int, DeviceSeries] = {}
        self.models: dict[ModelKey, ModelSeries] = {}
        self.markers: deque[Marker] = deque(maxlen=max_markers)
        self.version = 0
        self.latest_s: float | None = None
        self.gpu_note: str | None = None
        self.gpu_source: str = "NVML"
        """Where the GPU figures come from, for plot titles (:func:`gpu_source_label`)."""
        self._models_t: float | None = None
        self._gpu_t: float | None = None
        self._loaded: frozenset[ModelKey] | None = None

    # ---------------------------------------------------------------- recording

    def record(self, state: AppState, now_s: float | None = None) -> bool:
        """Store what ``state`` holds that is newer than what was stored.

        Args:
            state: The state right after a handler applied a message.
            now_s: Unix seconds, the time of throughput points (the log has no sample time);
                default: the newest sample time in ``state``. Without any sample nothing is stored.

        Returns:
            True when anything was stored (``version`` moved).
        """
        if now_s is None:
            times = [t.taken_at for t in (state.ollama, state.gpu) if t is not None]
            if not times:
                return False
            now_s = max(times)
        changed = False
        gpu = state.gpu
        if gpu is not None and (self._gpu_t is None or gpu.taken_at > self._gpu_t):
            self._gpu_t = gpu.taken_at
            note, source = None if gpu.ok else gpu.status, gpu_source_label(gpu.backend, gpu.status)
            if (note, source) != (self.gpu_note, self.gpu_source):
                changed = True  # the plots' titles say these: a GPU sample that only changes them is news
            self.gpu_note, self.gpu_source = note, source
            for dev in gpu.devices:
                if dev.memory_used_bytes is None or dev.error:
                    continue
                series = self.devices.get(dev.index)
                if series is None:
                    if len(self.devices) >= self.max_devices:
                        continue
                    series = self.devices[dev.index] = DeviceSeries(
                        dev.index, dev.name, self.bucket_s, self.retention_s
                    )
                series.used_bytes.add(gpu.taken_at, float(dev.memory_used_bytes))
                if dev.memory_total_bytes is not None:
                    series.total_bytes.add(gpu.taken_at, float(dev.memory_total_bytes))
                changed = True
            self._seen(gpu.taken_at)
        snap = state.last_ok
        if snap is not None and (self._models_t is None or snap.taken_at > self._models_t):
            self._models_t = snap.taken_at
            self._record_models(state, snap.taken_at)
            changed = True
        for view in state.models:
            mseries = self.models.get((view.name, view.digest))
            t = view.throughput
            if mseries is None or t is None or t.last_decode_tps is None:
                continue
            sig = (t.requests, t.last_decode_tps)
            if sig != mseries._timing:
                mseries._timing = sig
                mseries.decode_tps.add(now_s, t.last_decode_tps)
                self._seen(now_s)
                changed = True
        if changed:
            self.version += 1
        return changed

    def _record_models(self, state: AppState, t_s: float) -> None:
        loaded: set[ModelKey] = set()
        for view in state.models:
            key = (view.name, view.digest)
            loaded.add(key)
            series = self.models.get(key)
            if series is None:
                series = self.models[key] = ModelSeries(key, self.bucket_s, self.retention_s)
            series.last_seen_s = t_s
            if view.size_vram_bytes is not None:
                series.vram_bytes.add(t_s, float(view.size_vram_bytes))
            if view.size_bytes is not None:
                series.size_bytes.add(t_s, float(view.size_bytes))
            if view.memory.kv.value is not None:
                series.kv_bytes.add(t_s, float(view.memory.kv.value))
                series.kv_source = view.memory.kv.source
            if view.throughput is not None and view.throughput.requests_per_min is not None:
                series.requests_per_min.add(t_s, float(view.throughput.requests_per_min))
            if self._reloaded(series, view) and self._loaded is not None and key in self._loaded:
                self.markers.append(Marker(t_s, "reload", view.name))
        now_loaded = frozenset(loaded)
        if self._loaded is not None:  # the models loaded before kvtop started are not "loads"
            for key in sorted(now_loaded - self._loaded):
                self.markers.append(Marker(t_s, "load", key[0]))
            for key in sorted(self._loaded - now_loaded):
                self.markers.append(Marker(t_s, "unload", key[0]))
        self._loaded = now_loaded
        self._seen(t_s)
        self._forget(t_s)

    @staticmethod
    def _reloaded(series: ModelSeries, view: ModelView) -> bool:
        """Whether ``view`` is a new runner of a model already listed: its runner log load or its
        ``num_ctx`` changed. A figure that is not known (yet) is no change, and one reload is one
        marker: a new model's ``/api/show`` (its weights blob, which pairs it with its load)
        arrives a poll after ``/api/ps`` lists it, and during a reload the log and ``/api/ps``
        are read at different times, so for a poll the row pairs with no load; the load that
        follows a ``num_ctx`` change already marked is that reload's, not another."""
        old_load, old_ctx, awaiting = series._load_sig or (None, None, False)
        new_load = view.load.index if view.load is not None else None
        new_ctx = view.context.value
        new_runner = new_load is not None and old_load is not None and new_load != old_load
        changed = (new_runner and not awaiting) or (new_ctx is not None and old_ctx is not None and new_ctx != old_ctx)
        if new_load is not None and new_load != old_load:
            awaiting = False
        elif changed:
            awaiting = True  # marked before its load was read: that load is this reload's
        series._load_sig = (
            new_load if new_load is not None else old_load,
            new_ctx if new_ctx is not None else old_ctx,
            awaiting,
        )
        return changed

    def _seen(self, t_s: float) -> None:
        if self.latest_s is None or t_s > self.latest_s:
            self.latest_s = t_s

    def _forget(self, now_s: float) -> None:
        """Drop models gone for longer than the retention, then the longest-gone over the cap."""
        loaded = self._loaded or frozenset()
        for key in [k for k, s in self.models.items() if k not in loaded and now_s - s.last_seen_s > self.retention_s]:
            del self.models[key]
        if len(self.models) > self.max_models:
            gone = sorted((s.last_seen_s, k) for k, s in self.models.items() if k not in loaded)
            for _, key in gone[: len(self.models) - self.max_models]:
                del self.models[key]
        horizon = now_s - self.retention_s
        while self.markers and self.markers[0].t_s < horizon:
            self.markers.popleft()

    # ---------------------------------------------------------------- reading

    def point_count(self) -> int:
        """Every point stored, all series together (what bounds the memory)."""
        total = sum(len(d.used_bytes) + len(d.total_bytes) for d in self.devices.values())
        total += sum(len(s) for m in self.models.values() for s in m.series())
        return total

    def stored_bytes(self) -> int:
        """Bytes the series' point arrays hold, all series together (``Series.stored_bytes``)."""
        total = sum(d.used_bytes.stored_bytes() + d.total_bytes.stored_bytes() for d in self.devices.values())
        total += sum(s.stored_bytes() for m in self.models.values() for s in m.series())
        return total

    def span_s(self) -> float:
        """Seconds between the oldest and the newest point stored (0 when fewer than two)."""
        firsts = [t for d in self.devices.values() if (t := d.used_bytes.oldest_s) is not None]
        firsts += [t for m in self.models.values() for s in m.series() if (t := s.oldest_s) is not None]
        if not firsts or self.latest_s is None:
            return 0.0
        return max(0.0, self.latest_s - min(firsts))

    def markers_between(self, start_s: float, end_s: float) -> tuple[Marker, ...]:
        """Markers with ``start_s <= t_s <= end_s``, oldest first."""
        return tuple(m for m in self.markers if start_s <= m.t_s <= end_s)

    def models_by_recency(self) -> tuple[ModelSeries, ...]:
        """Tracked models, the most recently seen first (then by name)."""
        return tuple(sorted(self.models.values(), key=lambda s: (-s.last_seen_s, s.key)))

    def sparklines(self, window_s: float = 60.0, cells: int = 8) -> dict[ModelKey, str]:
        """Each tracked model's ``size_vram`` over the ``window_s`` before the newest sample, as
        ``cells`` characters (``sparkline``), keyed by ``(name, digest)``."""
        end = self.latest_s
        if end is None:
            return {}
        return {
            key: sparkline(s.vram_bytes.window(end - window_s, end), end - window_s, end, cells)
            for key, s in self.models.items()
        }

    def model(self, name: str, digest: str) -> ModelSeries | None:
        """The series of one model, if tracked."""
        return self.models.get((name, digest))


SPARK_CHARS = "▁▂▃▄▅▆▇█"


def sparkline(points: Iterable[tuple[float, float]], start_s: float, end_s: float, cells: int) -> str:
    """``cells`` characters from ``▁`` to ``█``: each cell is one slice of ``[start_s, end_s]``
    showing its highest point, scaled from 0 to the highest point of all; a slice with no point
    is a space (the model was not loaded, or not sampled, then)."""
    if cells <= 0 or end_s <= start_s:
        return ""
    width = (end_s - start_s) / cells
    best: list[float | None] = [None] * cells
    for t, v in points:
        if t < start_s or t > end_s:
            continue
        i = min(cells - 1, int((t - start_s) / width))
        cur = best[i]
        best[i] = v if cur is None or v > cur else cur
    top = max((v for v in best if v is not None), default=None)
    if top is None:
        return " " * cells
    out = []
    for high in best:
        if high is None:
            out.append(" ")
        elif top <= 0:
            out.append(SPARK_CHARS[0])
        else:
            out.append(SPARK_CHARS[min(len(SPARK_CHARS) - 1, max(0, int(round(high / top * (len(SPARK_CHARS) - 1)))))])
    return "".join(out)
