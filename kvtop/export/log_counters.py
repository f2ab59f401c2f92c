"""Counters the exporter derives from the server log, kept so that they only ever grow (pure)."""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from kvtop.logparse.events import LogEvent, Truncation
from kvtop.logparse.load_build import Load


@dataclass(frozen=True, slots=True)
class LogCounters:
    """Counters derived from the server log, kept by the exporter so they only ever grow.

    ``LogState`` keeps a bounded window of events; these counts are taken from each batch as
    it arrives, so trimming the window never lowers them.

    Attributes:
        truncations: ``kvtop_prompt_truncations_total`` by weights blob (``""`` = unknown); 0 from a
            blob's first load, so the series exists before its first truncation and PromQL's
            ``increase()`` counts that one (a series that appears at 1 shows no increase).
        reloads: ``kvtop_model_reloads_total`` by weights blob; 0 after a blob's first load.
        counted_loads: First log line of every load already counted (loads in the window only).
    """

    truncations: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    reloads: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    counted_loads: frozenset[int] = frozenset()


def count_log(counters: LogCounters, events: Sequence[LogEvent], loads: Sequence[Load]) -> LogCounters:
    """Return the counters after one batch of parsed events.

    Args:
        counters: The counts so far.
        events: The batch's events (a ``Truncation`` counts once, for the load that was
            running when its line was printed: the newest load that began at or before it).
        loads: The log state's loads after the batch (``LogState.loads``, log order). A load
            counts once its weights blob is known: as the first load of that blob, or as a
            reload when an earlier load of the same blob was seen.

    Returns:
        ``counters`` itself when nothing changed, else new counters.
    """
    truncations = dict(counters.truncations)
    starts = [ld.first_line for ld in loads]
    for e in events:
        if isinstance(e, Truncation):
            i = bisect.bisect_right(starts, e.line_no) - 1
            blob = (loads[i].model_blob or "") if i >= 0 else ""
            truncations[blob] = truncations.get(blob, 0) + 1
    reloads = dict(counters.reloads)
    counted = set(counters.counted_loads)
    for load in loads:
        if load.model_blob is None or load.first_line in counted:
            continue
        counted.add(load.first_line)
        if load.model_blob in reloads:
            reloads[load.model_blob] += 1
        else:
            reloads[load.model_blob] = 0
        truncations.setdefault(load.model_blob, 0)
    if starts:  # loads dropped from the window never come back: forget their lines
        counted = {n for n in counted if n >= starts[0]}
    if truncations == counters.truncations and reloads == counters.reloads and counted == counters.counted_loads:
        return counters
    return LogCounters(MappingProxyType(truncations), MappingProxyType(reloads), frozenset(counted))
