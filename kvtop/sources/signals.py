"""Signals to a foreign GPU process (the GPU panel's ``k``), as nvitop sends them.

The only process writes kvtop makes, each after the operator confirmed it (never with
``--readonly``: the UI offers no write then). Who may signal whom follows kill(2): root may
signal any process; anyone else a process whose real or saved user id is their real or
effective user id. A PID is checked again just before the signal (same process start time), so a
PID that exited and was reused by another process is never signalled.

Ollama's own server and runners are never targets here: the dashboard lists only the GPU's
other processes (``GpuView.others``); a model is released with unload (``u``), which lets
Ollama's scheduler free its runner cleanly.
"""

from __future__ import annotations

import os
import signal as _signal
import time
from collections.abc import Iterable
from dataclasses import dataclass

import psutil

__all__ = ["SignalTarget", "send_signal", "signal_target", "signal_targets", "wait_gone"]


@dataclass(frozen=True, slots=True)
class SignalTarget:
    """One PID as the signal action sees it.

    Attributes:
        pid: The process id (this PID namespace's).
        allowed: True when this user may signal it (kill(2)'s rule, above).
        reason: Why not, in plain words ("" when allowed).
        user: Its owner's user name (``uid N`` for a uid with no name), None when not readable.
        name: Its process name, None when not readable.
        create_time: Its start time (Unix seconds, psutil), to recognise the same process later;
            None when it is not visible here.
        mine: True when its real or saved user id is kvtop's real or effective one (the
            operator's own process). False for another user's process that kvtop may signal only
            because it runs as root: the UI names the owner and asks a second time.
    """

    pid: int
    allowed: bool
    reason: str = ""
    user: str | None = None
    name: str | None = None
    create_time: float | None = None
    mine: bool = False

    @property
    def owner(self) -> str:
        """``user``, or ``?`` when not readable (for messages)."""
        return self.user or "?"


def _ids() -> tuple[int, set[int]]:
    return os.geteuid(), {os.getuid(), os.geteuid()}


def signal_target(pid: int) -> SignalTarget:
    """Whether this user may signal ``pid``, read with psutil (never raises).

    Refused: PID 1 and lower, kvtop itself, a process that exited or is not visible in this PID
    namespace, one owned by another user (unless kvtop runs as root; then it is allowed with
    ``mine`` False). ``user`` is the owner's name, else ``uid N`` (a uid with no name).
    """
    if pid <= 1:
        return SignalTarget(pid, False, "PID 1 and the kernel are never signalled")
    if pid == os.getpid():
        return SignalTarget(pid, False, "this is kvtop itself")
    try:
        proc = psutil.Process(pid)
        with proc.oneshot():
            created = proc.create_time()
            uids = proc.uids()
            name = proc.name()
            try:
                user: str | None = proc.username()
            except (psutil.AccessDenied, KeyError):
                user = None
    except psutil.NoSuchProcess:
        return SignalTarget(pid, False, "exited, or not visible in kvtop's PID namespace")
    except psutil.AccessDenied:
        return SignalTarget(pid, False, "its owner cannot be read (access denied): not signalled")
    euid, ids = _ids()
    mine = bool(ids & {uids.real, uids.saved})
    user = user or f"uid {uids.real}"
    if euid != 0 and not mine:
        return SignalTarget(pid, False, f"owned by {user}: only its owner or root may signal it", user, name, created)
    return SignalTarget(pid, True, "", user, name, created, mine)


def signal_targets(pids: Iterable[int]) -> dict[int, SignalTarget]:
    """``signal_target`` of each PID (blocking: psutil reads /proc; call it off the event loop)."""
    return {pid: signal_target(pid) for pid in pids}


def _same(target: SignalTarget) -> psutil.Process | None:
    try:
        proc = psutil.Process(target.pid)
        if target.create_time is not None and abs(proc.create_time() - target.create_time) > 0.01:
            return None
        return proc
    except psutil.Error:
        return None


def send_signal(target: SignalTarget, sig: int) -> str | None:
    """Send ``sig`` (``SIGTERM`` or ``SIGKILL``) to the process ``target`` names.

    Returns:
        None when the signal was delivered, else one line saying why not (not allowed, exited,
        PID reused by another process, permission refused by the kernel).
    """
    if sig not in (_signal.SIGTERM, _signal.SIGKILL):
        return f"kvtop sends only SIGTERM or SIGKILL, not {sig}"
    if not target.allowed:
        return f"PID {target.pid}: {target.reason}"
    proc = _same(target)
    if proc is None:
        return f"PID {target.pid} exited (or is now another process): nothing sent"
    try:
        proc.send_signal(sig)
    except psutil.NoSuchProcess:
        return f"PID {target.pid} exited before the signal: nothing sent"
    except (psutil.AccessDenied, PermissionError):
        return f"PID {target.pid}: the kernel refused the signal (permission denied)"
    return None


def wait_gone(target: SignalTarget, timeout_s: float) -> bool:
    """True once the process ``target`` names has exited (or been reaped) within ``timeout_s``
    seconds (blocking; polled every 50 ms)."""
    end = time.monotonic() + timeout_s
    while True:
        proc = _same(target)
        if proc is None:
            return True
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.Error:
            return True
        if time.monotonic() >= end:
            return False
        time.sleep(0.05)
