"""The textfile for node_exporter's textfile collector: its body and its atomic, periodic write."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterable

from kvtop.export.exporter import Exporter, say
from kvtop.export.metrics import FixedFamilies, HostView, build_metrics
from kvtop.model.gpu_snapshots import GpuSnapshot


def textfile_body(hosts: Iterable[HostView], gpu: GpuSnapshot | None) -> bytes:
    """The textfile's content: the families :func:`build_metrics` gives ``/metrics`` (without
    ``kvtop_exporter_scrapes_total``: nothing scrapes kvtop), in the Prometheus text format 0.0.4
    that node_exporter's textfile collector reads."""
    from prometheus_client.exposition import generate_latest

    return generate_latest(FixedFamilies(build_metrics(hosts, gpu, scrapes=None)))  # type: ignore[arg-type]


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_atomically(path: str | os.PathLike[str], body: bytes, *, mode: int | None = None) -> None:
    """Replace ``path`` with ``body`` so that a reader sees the old file or the new one, whole.

    A temporary file in the same directory (``.<name>.<random>.tmp``: node_exporter reads only
    ``*.prom``) is written, flushed and ``fsync``-ed, given ``mode`` (default ``0o666`` less the
    umask: ``mkstemp``'s ``0o600`` would hide it from a node_exporter running as another user),
    then renamed over ``path`` with ``os.replace`` (atomic on POSIX); the directory is ``fsync``-ed
    so the rename survives a crash. On any error the temporary file is removed.

    Raises:
        OSError: The directory does not exist or cannot be written, the disk is full, …
    """
    import tempfile

    target = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(target))
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(target)}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(body)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode if mode is not None else 0o666 & ~_umask())
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    try:
        dir_fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dir_fd)
    except OSError:
        pass
    finally:
        os.close(dir_fd)


TEXTFILE_FIRST_WAIT_S = 1.0
"""Beyond the request timeout, how long the first write waits for every host's first poll."""


def first_sample_read(exporter: Exporter) -> bool:
    """Whether every source of the first sample was read: every host polled once, this machine's
    GPUs (when sampled), the server log's first batch (when one is read) and the connections to
    the local API port (the queue, when they are read)."""
    if not all(p.view.polls > 0 for p in exporter.pollers):
        return False
    if exporter.gpu_source is not None and exporter.gpu is None:
        return False
    engine = exporter.engine
    log_state = engine.states.get(engine.log_host) if engine.log_host is not None else None
    if exporter.log_source is not None and log_state is not None and log_state.log.source is None:
        return False
    local = engine.states.get(engine.local_host)
    return (
        engine.sources.conns is None or engine.queue_port() is None or (local is not None and local.queue is not None)
    )


async def write_textfile_forever(
    exporter: Exporter, path: str, stop: asyncio.Event, *, once: bool = False, first_wait_s: float
) -> str | None:
    """Write ``path`` (:func:`write_atomically`) every ``exporter.interval_s`` until ``stop``.

    The first write waits (at most ``first_wait_s``) until the first sample is whole
    (:func:`first_sample_read`), so the file never starts empty and ``--once`` writes what
    ``kvtop --once`` prints. A write that fails is
    said once on stderr (and again when the error changes or clears) and tried again next
    interval.

    Returns:
        With ``once``: None after one write, else the error text. Without: None when stopped.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + first_wait_s
    while loop.time() < deadline and not stop.is_set():
        if first_sample_read(exporter):
            break
        await asyncio.sleep(0.02)
    said: str | None = None
    while not stop.is_set():
        views, gpu = exporter.collector.latest()
        try:
            body = textfile_body(views, gpu)
            await asyncio.to_thread(write_atomically, path, body)
        except OSError as exc:
            problem = f"cannot write {path}: {exc.strerror or exc}"
            if once:
                return problem
            if problem != said:
                say(f"{problem}; trying again every {exporter.interval_s:g} s")
                said = problem
        else:
            if said is not None:
                say(f"writing {path} again")
                said = None
            if once:
                return None
        try:
            await asyncio.wait_for(stop.wait(), timeout=exporter.interval_s)
        except asyncio.TimeoutError:
            pass
    return None
