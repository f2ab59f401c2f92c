"""The TCP connections established to a local server's API port, kvtop's own left out.

On Linux the kernel's socket tables ``/proc/net/tcp`` and ``/proc/net/tcp6`` are read (every user
may read them; no process is scanned, so the cost is one read of two small files a tick). Each
line gives a socket's local and remote address (hex; IPv4 in host byte order, IPv6 as four
host-order 32-bit words; the port in network order) and its state (``01``: established). The
server's side of a connection has the API port as its local port; kvtop's own connections are the
ones whose client side is one of this process's sockets (``/proc/self/fd`` names their inodes).

Elsewhere ``psutil.net_connections`` is asked (macOS needs root for it); when it refuses, the
snapshot says why and the queue figures are not known.
"""

from __future__ import annotations

import asyncio
import os
import socket
import struct
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from kvtop.model.queue_snapshots import ConnSnapshot, Endpoint

__all__ = ["ConnectionSource", "parse_proc_net_tcp", "read_connections"]

ESTABLISHED = "01"
MAX_TABLE_BYTES = 64 * 1024 * 1024
"""The most of one socket table read (a busy proxy's table is a few MB); the rest is left unread."""
CHUNK_BYTES = 64 * 1024
"""One read of a socket table (the kernel gives whole lines per read)."""


def _address(hex_addr: str) -> str:
    """``0100007F`` → ``127.0.0.1``; 32 hex digits → an IPv6 address (IPv4-mapped ones as IPv4)."""
    raw = bytes.fromhex(hex_addr)
    if len(raw) == 4:
        return socket.inet_ntop(socket.AF_INET, struct.pack("<I", struct.unpack(">I", raw)[0]))
    words = struct.unpack(">4I", raw)
    packed = struct.pack("<4I", *words)
    if packed[:12] == b"\0" * 10 + b"\xff\xff":
        return socket.inet_ntop(socket.AF_INET, packed[12:])
    return socket.inet_ntop(socket.AF_INET6, packed)


def parse_proc_net_tcp(text: str) -> list[tuple[Endpoint, Endpoint, str, int]]:
    """The sockets of one ``/proc/net/tcp`` or ``tcp6`` table: (local, remote, state, inode) each.

    Lines that do not parse (a header, a truncated last line) are left out.
    """
    out: list[tuple[Endpoint, Endpoint, str, int]] = []
    for line in text.splitlines()[1:]:
        parts = line.split()
        if len(parts) < 10:
            continue
        try:
            local_hex, local_port = parts[1].split(":")
            remote_hex, remote_port = parts[2].split(":")
            local = (_address(local_hex), int(local_port, 16))
            remote = (_address(remote_hex), int(remote_port, 16))
            inode = int(parts[9])
        except (ValueError, struct.error, OSError):
            continue
        out.append((local, remote, parts[3], inode))
    return out


def _own_socket_inodes(fd_dir: Path) -> set[int]:
    inodes: set[int] = set()
    try:
        names = os.listdir(fd_dir)
    except OSError:
        return inodes
    for name in names:
        try:
            target = os.readlink(fd_dir / name)
        except OSError:
            continue
        if target.startswith("socket:[") and target.endswith("]"):
            inodes.add(int(target[8:-1]))
    return inodes


def _read_table(path: Path) -> str | None:
    """The table's text, read 64 KiB at a time up to :data:`MAX_TABLE_BYTES` (one ``read`` of the
    whole bound would allocate it every tick: 10 ms of system time for a 10-line table)."""
    chunks: list[bytes] = []
    size = 0
    try:
        with path.open("rb", buffering=0) as f:
            while size < MAX_TABLE_BYTES:
                chunk = f.read(CHUNK_BYTES)
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
    except OSError:
        return None
    return b"".join(chunks).decode("ascii", errors="replace")


def read_connections(
    port: int, *, proc_root: Path = Path("/proc"), clock: Callable[[], float] = time.time
) -> ConnSnapshot:
    """The connections established to local ``port`` (see the module); a snapshot with ``error`` set
    when neither the kernel's tables nor psutil can be read."""
    now = clock()
    tables = [
        t for t in (_read_table(proc_root / "net" / "tcp"), _read_table(proc_root / "net" / "tcp6")) if t is not None
    ]
    if not tables:
        return _psutil_connections(port, now)
    sockets = [s for t in tables for s in parse_proc_net_tcp(t) if s[2] == ESTABLISHED]
    own_inodes = _own_socket_inodes(proc_root / "self" / "fd")
    own_clients = {local for local, remote, _state, inode in sockets if inode in own_inodes and remote[1] == port}
    return _snapshot(port, now, ((local, remote) for local, remote, _s, _i in sockets), own_clients)


def _snapshot(
    port: int, now: float, pairs: Iterable[tuple[Endpoint, Endpoint]], own_clients: set[Endpoint]
) -> ConnSnapshot:
    clients: list[Endpoint] = []
    own = 0
    for local, remote in pairs:
        if local[1] != port:
            continue
        if remote in own_clients:
            own += 1
        else:
            clients.append(remote)
    return ConnSnapshot(now, port, tuple(sorted(clients)), own)


def _psutil_connections(port: int, now: float) -> ConnSnapshot:
    try:
        import psutil

        conns = psutil.net_connections(kind="tcp")
        mine = psutil.Process().net_connections(kind="tcp")
    except Exception as exc:  # noqa: BLE001 - AccessDenied on macOS without root, or no psutil support
        return ConnSnapshot(now, port, error=f"connections not readable: {type(exc).__name__}: {exc}".strip(": "))
    established = [c for c in conns if c.status == "ESTABLISHED" and c.laddr and c.raddr]
    own_clients = {(c.laddr.ip, c.laddr.port) for c in mine if c.raddr and c.raddr.port == port}
    return _snapshot(
        port, now, (((c.laddr.ip, c.laddr.port), (c.raddr.ip, c.raddr.port)) for c in established), own_clients
    )


class ConnectionSource:
    """Reads the connections to a local port off the event loop (a thread), one read per call."""

    def __init__(self, *, proc_root: Path = Path("/proc"), clock: Callable[[], float] = time.time) -> None:
        self._proc_root = proc_root
        self._clock = clock

    async def sample(self, port: int) -> ConnSnapshot:
        """The connections established to ``port`` now (never raises: a failure is the snapshot's ``error``)."""
        try:
            return await asyncio.to_thread(read_connections, port, proc_root=self._proc_root, clock=self._clock)
        except Exception as exc:  # noqa: BLE001 - a reader's bug is data, not a crash of the engine
            return ConnSnapshot(self._clock(), port, error=f"connections not readable: {type(exc).__name__}: {exc}")

    async def aclose(self) -> None:
        """Nothing to close (the reads open and close their files)."""
