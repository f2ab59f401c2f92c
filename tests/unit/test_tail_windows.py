"""The Windows app's server log (issue 25, Platforms): where ``--log auto`` looks, reading it without
``os.pread`` and with CRLF line ends, following the app's rotation (``server.log`` renamed to
``server-1.log`` … at each start: ``app/logrotate/logrotate.go``, docs/ollama-internals.md §6),
opening it so the app may still rename it, and parsing real Windows lines (corpus logs 030, 035,
049, 053 in tests/fixtures/logs, their facts in tests/fixtures/logs/expected).
"""

from __future__ import annotations

import os
from pathlib import Path, PureWindowsPath
from typing import Any

import pytest

from kvtop.logparse import inspect_lines
from kvtop.sources import tail_fileio
from kvtop.sources.tail import auto_file_candidates
from kvtop.sources.tail_file import FileTail
from kvtop.sources.tail_fileio import FILE_SHARE_DELETE, FILE_SHARE_READ, FILE_SHARE_WRITE, OPEN_EXISTING
from tests.tail_collect import Collector

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"


def _lines(stem: str) -> list[str]:
    (path,) = LOGS.glob(f"{stem}-*.log")
    return path.read_text(encoding="utf-8").splitlines()


def _rotate_like_the_ollama_app(log: Path) -> None:
    """``logrotate.Rotate(filename)``: server-4 → server-5 … server.log → server-1.log (MaxLogFiles 5)."""
    for i in range(5, 0, -1):
        older = log.with_name(f"{log.stem}-{i}{log.suffix}")
        newer = log if i == 1 else log.with_name(f"{log.stem}-{i - 1}{log.suffix}")
        if newer.exists():
            if older.exists():
                older.unlink()
            os.rename(newer, older)


def test_auto_looks_in_localappdata() -> None:
    env = {"LOCALAPPDATA": r"C:\Users\user\AppData\Local", "USERPROFILE": r"C:\Users\user"}
    ((path, why),) = auto_file_candidates(env, "win32")
    assert str(path) == r"C:\Users\user\AppData\Local\Ollama\server.log"
    assert "Windows app" in why and "server-1.log" in why


def test_auto_falls_back_to_the_profile_without_localappdata() -> None:
    ((path, _),) = auto_file_candidates({"USERPROFILE": r"C:\Users\user"}, "win32")
    assert PureWindowsPath(str(path)) == PureWindowsPath(r"C:\Users\user\AppData\Local\Ollama\server.log")
    assert auto_file_candidates({}, "win32") == []


async def test_windows_lines_with_crlf_across_the_apps_rotation_without_pread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tail_fileio, "HAVE_PREAD", False)  # as on Windows: seek + read
    log = tmp_path / "server.log"
    first, second = _lines("035"), _lines("053")
    log.write_bytes("".join(line + "\r\n" for line in first).encode())
    col = Collector(FileTail(log))
    await col.until(lambda: col.lines == first)
    _rotate_like_the_ollama_app(log)  # the app starts again: server.log -> server-1.log, a new server.log
    log.write_bytes("".join(line + "\r\n" for line in second).encode())
    await col.until(lambda: col.lines == first + second, timeout=20.0)
    await col.close()
    assert log.with_name("server-1.log").exists()
    assert "file rotated (rename) — following the new file" in col.statuses
    assert not any("\r" in line for line in col.lines)
    doc = inspect_lines(col.lines)
    load_035, load_053 = doc["loads"]
    # 035 (Windows, CPU only): KV 4096.00 MiB on CPU; the blob from model=C:\Users\user\.ollama\models\blobs\…
    assert load_035["memory"]["kv"] == {"CPU": 4096 * 2**20}
    assert load_035["model_blob"] == "sha256-667b0c1932bc6ffc593ed1d03f895bf2dc8dc6df21db3042284a6f4416b06a29"
    # 053: `starting runner` cmd="C:\\Users\\…\\ollama.exe runner --ollama-engine --model C:\\Users\\…\\blobs\\sha256-…"
    assert load_053["model_blob"] == "sha256-b709d81508a078a686961de6ca07a953b895d9b286c46e17f00fb267f4f2d297"
    assert load_053["flash_attention"] == "enabled"


@pytest.mark.parametrize("stem", ["030", "049"])
def test_windows_model_paths_name_the_blob(stem: str) -> None:
    doc = inspect_lines(line + "\r" for line in _lines(stem))  # CR kept, as a pasted CRLF log gives it
    if stem == "030":  # sched.go: model=C:\Users\<username>\.ollama\models\blobs\sha256-ff1d…
        (load,) = doc["loads"]
        assert load["model_blob"] == "sha256-ff1d1fc78170d787ee1201778e2dd65ea211654ca5fb7d69b5a2e7b123a50373"
    else:  # "gpu VRAM usage didn't recover within timeout" model=C:\Users\user\…: one unload
        assert [e["kind"] for e in doc["events"]] == ["unload"]


def test_seek_read_is_pread(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"0123456789")
    fd = os.open(path, os.O_RDONLY)
    try:
        assert tail_fileio.seek_read(fd, 4, 3) == os.pread(fd, 4, 3) == b"3456"
        assert tail_fileio.seek_read(fd, 4, 8) == b"89"
    finally:
        os.close(fd)


class _FakeKernel32:
    """``CreateFileW`` that records its arguments and opens nothing; a last error when told to fail."""

    def __init__(self, fail_with: int | None = None) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.closed: list[object] = []
        self.fail_with = fail_with

    def CreateFileW(self, *args: Any) -> object:  # noqa: N802 - the Win32 name
        self.calls.append(args)
        return -1 if self.fail_with is not None else "HANDLE"

    def CloseHandle(self, handle: object) -> int:  # noqa: N802
        self.closed.append(handle)
        return 1

    def last_error(self) -> int:
        return self.fail_with or 0


def test_windows_open_shares_delete_so_the_app_can_rotate(tmp_path: Path) -> None:
    path = tmp_path / "server.log"
    path.write_bytes(b"line\r\n")
    k = _FakeKernel32()
    fd = tail_fileio.open_windows(str(path), k, lambda handle, flags: os.open(path, os.O_RDONLY))
    try:
        assert os.read(fd, 10) == b"line\r\n"
    finally:
        os.close(fd)
    ((name, access, share, _, disposition, _, _),) = k.calls
    assert name == str(path) and access == 0x80000000 and disposition == OPEN_EXISTING
    assert share == FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE


@pytest.mark.parametrize(
    ("code", "exc"), [(2, FileNotFoundError), (3, FileNotFoundError), (5, PermissionError), (32, PermissionError)]
)
def test_windows_open_errors_are_the_usual_exceptions(code: int, exc: type[OSError]) -> None:
    with pytest.raises(exc):
        tail_fileio.open_windows(r"C:\Users\user\AppData\Local\Ollama\server.log", _FakeKernel32(code), None)
