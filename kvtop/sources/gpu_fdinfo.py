"""GPU memory per process from DRM fdinfo (``/proc/PID/fdinfo/N`` of an open ``/dev/dri`` node).

The kernel's DRM client usage stats (``Documentation/gpu/drm-usage-stats.rst``, docs/gpu-memory.md)
give, per open DRM file: ``drm-driver``, ``drm-pdev`` (the PCI slot), ``drm-client-id`` (unique per
client: several fds or processes may share one) and per memory region ``drm-total-<region>`` (all
buffers the client holds) and ``drm-resident-<region>`` (those resident in that region now), each
``<uint> [KiB|MiB]``. Intel's ``xe`` names its device memory ``vram0``, ``vram1`` …, ``i915``
``local0`` …; ``system``/``memory``/``gtt``/``stolen-*`` regions are system RAM and not counted.

Only processes kvtop may read are seen (the same user, or root): ``DrmVram.unreadable`` counts
the others, and a device's use is then a lower bound, said so by the caller.
"""

from __future__ import annotations

import os
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

VRAM_REGION = re.compile(r"^(?:vram|local)\d+$")
"""Device-memory region names: ``vram<N>`` (xe), ``local<N>`` (i915 discrete local memory)."""

_UNITS = {"": 1, "B": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3}

MAX_FDS_PER_PID = 4096
"""Open files looked at per process at most (a process with more is read up to this)."""


@dataclass(frozen=True, slots=True)
class DrmClient:
    """One DRM client as its fdinfo describes it (bytes; None when the key is absent)."""

    driver: str
    pdev: str | None
    client_id: str | None
    vram_resident_bytes: int | None
    vram_total_bytes: int | None
    regions: tuple[str, ...] = ()


@dataclass(slots=True)
class DrmVram:
    """Device memory in use on one PCI device, summed over its DRM clients (deduplicated by client id).

    Attributes:
        used_bytes: The sum of the clients' ``drm-resident-<vram region>`` (``drm-total-`` when a
            driver prints no resident figure).
        by_pid: The same per process (a client shared by processes counts for the lowest PID).
        clients: Distinct clients seen with a VRAM region.
        unreadable: Processes whose fd table kvtop may not read (another user's, without root).
    """

    used_bytes: int = 0
    by_pid: dict[int, int] = field(default_factory=dict)
    clients: int = 0
    unreadable: int = 0


def parse_size(text: str) -> int | None:
    """``"123 KiB"`` -> 125952; a plain number is bytes; anything else None."""
    parts = text.split()
    if not parts or not parts[0].isdigit() or len(parts) > 2:
        return None
    unit = parts[1] if len(parts) == 2 else ""
    mult = _UNITS.get(unit)
    return int(parts[0]) * mult if mult is not None else None


def parse_fdinfo(text: str) -> DrmClient | None:
    """A DRM client from one fdinfo file's text, None when it is not a DRM file (no ``drm-driver``)."""
    keys: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.startswith("drm-"):
            keys[key.strip()] = value.strip()
    driver = keys.get("drm-driver")
    if not driver:
        return None
    resident: dict[str, int] = {}
    total: dict[str, int] = {}
    for key, value in keys.items():
        for prefix, into in (("drm-resident-", resident), ("drm-total-", total), ("drm-memory-", total)):
            region = key[len(prefix) :] if key.startswith(prefix) else ""
            size = parse_size(value) if VRAM_REGION.match(region) else None
            if size is not None and (prefix != "drm-memory-" or "drm-total-" + region not in keys):
                into[region] = size  # drm-memory- is the older alias of drm-total- (drm-usage-stats.rst)
    regions = tuple(sorted(set(resident) | set(total)))
    return DrmClient(
        driver,
        keys.get("drm-pdev"),
        keys.get("drm-client-id"),
        sum(resident.values()) if resident else None,
        sum(total.values()) if total else None,
        regions,
    )


FULL_SCAN_S = 10.0
"""Every process's fd table is walked at most this often; between walks only the DRM fds found by
the last walk are read again (a walk costs ~50 ms on a busy 2-core machine with ~170 processes,
``read_drm_vram``'s own measure; re-reading the known fds costs well under 1 ms)."""


@dataclass(slots=True)
class _Walk:
    at: float
    drm_fds: dict[int, list[str]]
    unreadable: int


_walks: dict[tuple[Path, frozenset[str]], _Walk] = {}
_walks_lock = threading.Lock()


def _walk(proc_root: Path) -> tuple[dict[int, list[str]], int]:
    """Every process's fds that link to ``/dev/dri/*``, and the count of unreadable fd tables."""
    found: dict[int, list[str]] = {}
    unreadable = 0
    try:
        pids = sorted(int(e.name) for e in os.scandir(proc_root) if e.name.isdigit())
    except OSError:
        return found, 0
    for pid in pids:
        fd_dir = proc_root / str(pid) / "fd"
        try:
            fds = [e.name for _, e in zip(range(MAX_FDS_PER_PID), os.scandir(fd_dir))]
        except PermissionError:
            unreadable += 1
            continue
        except OSError:
            continue
        drm = []
        for fd in fds:
            try:
                if os.readlink(fd_dir / fd).startswith("/dev/dri/"):
                    drm.append(fd)
            except OSError:
                continue
        if drm:
            found[pid] = drm
    return found, unreadable


def read_drm_vram(
    proc_root: Path, drivers: frozenset[str], *, now: float | None = None, full_scan_s: float = FULL_SCAN_S
) -> dict[str, DrmVram]:
    """Device memory in use per PCI slot (``drm-pdev``) for the clients of ``drivers``.

    Walks ``<proc_root>/<pid>/fd`` for links to ``/dev/dri/*`` (at most every ``full_scan_s``; in
    between, the fds the last walk found are read again, so a new process shows at the next walk)
    and reads those fds' fdinfo; unreadable processes are counted, vanished ones skipped. Never
    raises for I/O. Under ``""`` the unreadable count when no device was seen.
    """
    t = time.monotonic() if now is None else now
    key = (proc_root, drivers)
    with _walks_lock:
        walk = _walks.get(key)
        if walk is None or t - walk.at >= full_scan_s or t < walk.at:
            found, unreadable = _walk(proc_root)
            walk = _walks[key] = _Walk(t, found, unreadable)
        drm_fds = {pid: list(fds) for pid, fds in walk.drm_fds.items()}
        unreadable = walk.unreadable
    out: dict[str, DrmVram] = {}
    seen: set[tuple[str, str]] = set()
    for pid, fds in drm_fds.items():
        for fd in fds:
            try:
                text = (proc_root / str(pid) / "fdinfo" / fd).read_text(encoding="utf-8", errors="replace")
            except OSError:
                continue
            client = parse_fdinfo(text)
            if client is None or client.driver not in drivers or client.pdev is None or not client.regions:
                continue
            ident = (client.pdev, client.client_id or f"pid{pid}/fd{fd}")
            if ident in seen:
                continue
            seen.add(ident)
            used = client.vram_resident_bytes if client.vram_resident_bytes is not None else client.vram_total_bytes
            dev = out.setdefault(client.pdev, DrmVram())
            dev.clients += 1
            dev.used_bytes += used or 0
            dev.by_pid[pid] = dev.by_pid.get(pid, 0) + (used or 0)
    for dev in out.values():
        dev.unreadable = unreadable
    if unreadable:
        out.setdefault("", DrmVram(unreadable=unreadable))  # "": carries the count when no device was seen
    return out
