"""psutil-like processes for ``ProcSource(process_iter=...)``: other users' processes raise
``psutil.AccessDenied`` for their command line and user, exiting ones ``NoSuchProcess``.

``as_dict`` follows psutil's own rule: ``AccessDenied`` and ``ZombieProcess`` become ``ad_value``,
``NoSuchProcess`` propagates.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import psutil  # type: ignore[import-untyped]


@dataclass
class MemInfo:
    rss: int
    vms: int = 0


class FakeProcess:
    """One process. ``denied``: attributes that raise AccessDenied; ``gone``: the process exited;
    ``gone_after_reads``: it exits after that many ``as_dict`` calls (mid-sample)."""

    def __init__(
        self,
        pid: int,
        cmdline: Sequence[str] | None,
        *,
        name: str | None = None,
        ppid: int = 1,
        user: str = "ollama",
        rss: int = 100 * 1024**2,
        denied: Sequence[str] = (),
        gone: bool = False,
        gone_after_reads: int | None = None,
    ) -> None:
        self.pid = pid
        self._cmdline = list(cmdline) if cmdline is not None else []
        self._name = name if name is not None else (self._cmdline[0].rsplit("/", 1)[-1][:15] if self._cmdline else "?")
        self._ppid = ppid
        self._user = user
        self._rss = rss
        self._denied = set(denied)
        self._gone = gone
        self._gone_after_reads = gone_after_reads
        self._reads = 0

    def _get(self, attr: str, value: Any) -> Any:
        if self._gone or (self._gone_after_reads is not None and self._reads >= self._gone_after_reads):
            raise psutil.NoSuchProcess(self.pid)
        if attr in self._denied:
            raise psutil.AccessDenied(self.pid)
        return value

    def name(self) -> str:
        return self._get("name", self._name)  # type: ignore[no-any-return]

    def ppid(self) -> int:
        return self._get("ppid", self._ppid)  # type: ignore[no-any-return]

    def cmdline(self) -> list[str]:
        return self._get("cmdline", self._cmdline)  # type: ignore[no-any-return]

    def username(self) -> str:
        return self._get("username", self._user)  # type: ignore[no-any-return]

    def memory_info(self) -> MemInfo:
        return self._get("memory_info", MemInfo(self._rss))  # type: ignore[no-any-return]

    @contextlib.contextmanager
    def oneshot(self) -> Iterator[None]:
        yield

    def as_dict(self, attrs: Sequence[str], ad_value: Any = None) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for attr in attrs:
            try:
                out[attr] = getattr(self, attr)()
            except (psutil.AccessDenied, psutil.ZombieProcess):
                out[attr] = ad_value
        self._reads += 1
        return out


def blob(n: int) -> str:
    """A blob name, ``sha256-`` and 64 hex digits made of ``n``."""
    return "sha256-" + f"{n:x}".rjust(64, "0")
