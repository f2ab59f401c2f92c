"""The ``/metrics`` body, rendered once per change of the exported state and served from cache."""

from __future__ import annotations

import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.core import Metric

from kvtop.export.metrics import FixedFamilies, KvtopCollector, ModelMemo, build_metrics, empty_family

_OPENMETRICS_EOF = b"# EOF\n"

SCRAPED_RECENTLY_S = 300.0
"""A scrape within this many seconds makes the exporter render ``/metrics`` after the poll that
precedes the next expected scrape (:meth:`MetricsCache.prerender`), so scrapes are served from
cache; with no scraper it renders nothing until one comes."""

CACHED_FORMATS = 4
"""Encodings (text, OpenMetrics, their versions) kept rendered at once; a scraper asking for yet
another one evicts the oldest."""


@dataclass
class _Rendered:
    """One encoding of the cached families: its encoder, whether it is OpenMetrics (its body ends
    in ``# EOF``, added per scrape after the counter), the body without the per-scrape counter, and
    (once a scraper asked for gzip) the gzip stream of that prefix with the compressor's state,
    copied per scrape to append the tail."""

    encoder: Callable[[Any], bytes]
    prefix: bytes = b""
    openmetrics: bool = False
    gzip: bool = False
    gzip_head: bytes = b""
    gzip_state: Any = None
    stable: tuple[str, ...] = ()
    """Names of the families that were unchanged at the previous render (they lead the body)."""
    stable_head: bytes = b""
    stable_state: Any = None
    """The gzip output and compressor state after the ``stable`` families: when the same families
    are unchanged again (the steady state: only poll counters and timestamps move), only the
    changed ones are compressed."""
    families: dict[str, tuple[list[Any], bytes]] = field(default_factory=dict)
    """Family name -> (its samples, its encoded text) of the previous render: a family whose
    samples did not change since (most of them, poll after poll) is not encoded again."""


class MetricsCache:
    """The ``/metrics`` body, rendered once per change of the exported state and served from cache.

    A render (:func:`build_metrics` plus prometheus-client's encoder: about 15 ms of CPU at 100
    models) happens only when a poll published a new state since the last one (:meth:`invalidate`),
    and then at most once: right after the poll when the next scrape is due before the next poll
    (:meth:`prerender`: the scrape period is learnt from the last scrapes, so a Prometheus
    scraping every 15 s of a 1 s poll costs one render per scrape, not fifteen), else on the
    first scrape that finds the cache stale. Every other scrape copies the cached bytes and
    appends the one per-scrape sample, ``kvtop_exporter_scrapes_total``. The GPU telemetry in
    the body is as of the latest render (at most one interval old). Thread-safe: scrapes run in
    the HTTP workers, :meth:`invalidate` and :meth:`prerender` on the event loop.

    Attributes:
        renders: Renders of the families so far (each one :func:`build_metrics` call).
        encodes: Encodings of rendered families (one per render per format scrapers asked for, at
            most ``CACHED_FORMATS``; a prerender encodes them all, so the scrape only copies).
        served: Scrapes answered from this cache.
    """

    def __init__(self, collector: KvtopCollector, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._collector = collector
        self._clock = clock
        self._lock = threading.Lock()
        self._families: list[Metric] | None = None
        self._key: tuple[Any, ...] = ()
        self._dirty = True
        self._formats: dict[str, _Rendered] = {}
        self._memo: ModelMemo = {}
        self._last_scrape: float | None = None
        self._scrape_period: float | None = None
        self.renders = 0
        self.encodes = 0
        self.served = 0

    def invalidate(self) -> None:
        """Say that a poll published a new state: the next scrape or :meth:`prerender` renders."""
        self._dirty = True

    @property
    def scraped_recently(self) -> bool:
        """Whether a scrape came within ``SCRAPED_RECENTLY_S``."""
        last = self._last_scrape
        return last is not None and self._clock() - last < SCRAPED_RECENTLY_S

    def prerender(self, next_poll_in_s: float | None = None) -> bool:
        """Render now if the state changed, a scraper came recently and (when ``next_poll_in_s``
        is given) the next scrape is expected before the next poll: within ``next_poll_in_s``
        seconds, give or take a quarter of that (or a tenth of the scrape period, if less). The
        scrape period is learnt from the scrapes; until two came, or once two expected scrapes
        did not come, nothing is prerendered.

        Returns:
            True when it rendered.
        """
        if not (self._dirty and self.scraped_recently):
            return False
        last, period = self._last_scrape, self._scrape_period
        if next_poll_in_s is not None:
            if last is None or period is None:
                return False
            spare = min(0.1 * period, 0.25 * next_poll_in_s)
            now = self._clock()
            if now + next_poll_in_s + spare < last + period:
                return False  # another poll comes before the next scrape: it renders then
            if now > last + 2 * period + next_poll_in_s:
                return False  # two scrapes missed: the scraper left (the next one renders, if any)
        with self._lock:
            return self._refresh_locked()

    def _refresh_locked(self) -> bool:
        """Render the families again if the views changed, and every encoding scrapers asked for."""
        views, gpu = self._collector.latest()
        key = (*views, gpu)
        fresh = (
            self._families is not None and len(key) == len(self._key) and all(a is b for a, b in zip(key, self._key))
        )
        self._dirty = False
        if fresh:
            return False
        self._families = build_metrics(views, gpu, scrapes=None, memo=self._memo)
        self._key = key
        self.renders += 1
        for rendered in self._formats.values():
            self._encode(rendered)
        return True

    def _encode(self, rendered: _Rendered) -> None:
        """Encode the families for ``rendered``'s format, reusing the text of unchanged families.

        The families unchanged since the previous render come first (in catalogue order), then
        the changed ones: the body's order of families carries no meaning in either format, and
        this way the gzip stream of an unchanged leading run is reused too.
        """
        assert self._families is not None
        stable: list[tuple[str, bytes]] = []
        changed: list[tuple[str, bytes]] = []
        kept: dict[str, tuple[list[Any], bytes]] = {}
        for fam in self._families:
            key = fam.samples  # Sample tuples (name, labels, value, ...): compared in C
            old = rendered.families.get(fam.name)
            if old is not None and old[0] == key:
                stable.append((fam.name, old[1]))
                text = old[1]
            else:
                text = rendered.encoder(FixedFamilies([fam]))
                if rendered.openmetrics and text.endswith(_OPENMETRICS_EOF):
                    text = text[: -len(_OPENMETRICS_EOF)]
                changed.append((fam.name, text))
            kept[fam.name] = (key, text)
        rendered.families = kept
        stable_names = tuple(name for name, _ in stable)
        stable_text = b"".join(text for _, text in stable)
        changed_text = b"".join(text for _, text in changed)
        rendered.prefix = stable_text + changed_text
        if rendered.gzip:
            if stable_names and stable_names == rendered.stable and rendered.stable_state is not None:
                comp = rendered.stable_state.copy()
                head = rendered.stable_head
            else:
                comp = zlib.compressobj(1, zlib.DEFLATED, 31)  # wbits 31: a gzip member; level 1: 3x faster than 6
                head = comp.compress(stable_text)
                rendered.stable, rendered.stable_head, rendered.stable_state = stable_names, head, comp.copy()
            rendered.gzip_head = head + comp.compress(changed_text)
            rendered.gzip_state = comp
        self.encodes += 1

    def body(self, accept: str | None, accept_encoding: str | None) -> tuple[bytes, list[tuple[str, str]]]:
        """One scrape's body and headers (``Content-Type``, and ``Content-Encoding: gzip`` when
        the scraper accepts it), as prometheus-client's WSGI app would answer ``accept``."""
        from prometheus_client.exposition import choose_encoder, gzip_accepted

        encoder, content_type = choose_encoder(accept or "")
        gzip_wanted = gzip_accepted(accept_encoding or "")
        scrapes = self._collector.count_scrape()
        with self._lock:
            now = self._clock()
            if self._last_scrape is not None:
                gap = now - self._last_scrape
                self._scrape_period = gap if self._scrape_period is None else 0.5 * (self._scrape_period + gap)
            self._last_scrape = now
            self.served += 1
            if self._dirty or self._families is None:
                self._refresh_locked()
            rendered = self._formats.get(content_type)
            if rendered is None or (gzip_wanted and not rendered.gzip):
                if rendered is None:
                    while len(self._formats) >= CACHED_FORMATS:
                        del self._formats[next(iter(self._formats))]
                    rendered = self._formats[content_type] = _Rendered(
                        encoder, openmetrics=encoder(FixedFamilies(())) == _OPENMETRICS_EOF
                    )
                rendered.gzip = rendered.gzip or gzip_wanted
                self._encode(rendered)
            prefix, openmetrics, head = rendered.prefix, rendered.openmetrics, rendered.gzip_head
            comp = rendered.gzip_state.copy() if gzip_wanted else None
        tail = encoder(FixedFamilies([_scrapes_family(scrapes)]))
        if not openmetrics and tail.endswith(_OPENMETRICS_EOF):
            tail = tail[: -len(_OPENMETRICS_EOF)]
        headers = [("Content-Type", content_type)]
        if comp is not None:
            headers.append(("Content-Encoding", "gzip"))
            return head + comp.compress(tail) + comp.flush(), headers
        return prefix + tail, headers


def _scrapes_family(scrapes: int) -> Metric:
    fam = empty_family("kvtop_exporter_scrapes_total")
    fam.add_metric([], float(scrapes))  # type: ignore[attr-defined]
    return fam
