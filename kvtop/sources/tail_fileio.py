"""Opening and reading a log file by offset the same way on POSIX and on Windows.

Two things differ on Windows (where the Ollama app writes ``%LOCALAPPDATA%\\Ollama\\server.log``
and rotates it at each start by renaming it to ``server-1.log`` … ``server-5.log``:
``app/server/server_windows.go``, ``app/logrotate/logrotate.go``; docs/ollama-internals.md §6):

- ``os.open`` opens a file without ``FILE_SHARE_DELETE``, and while a file is open so, Windows
  refuses to rename or delete it: kvtop following ``server.log`` would make the app's rotation fail
  ("Failed to rotate log") and the file grow without end. :func:`open_log` opens it with
  ``CreateFileW(…, FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE, …)`` instead, so the
  app renames it under kvtop, and kvtop's rename-rotation logic (``tail_file_reader``) follows
  the new ``server.log`` as on Linux. Binary mode (``O_BINARY``) keeps offsets in bytes.
- ``os.pread`` does not exist on Windows: :func:`pread` seeks and reads instead (every caller holds
  the reader's lock, so the shared file position is safe).
"""

from __future__ import annotations

import os
import sys
from typing import Any

HAVE_PREAD = hasattr(os, "pread")
"""False on Windows: :func:`pread` then seeks and reads."""

GENERIC_READ = 0x80000000
FILE_SHARE_READ, FILE_SHARE_WRITE, FILE_SHARE_DELETE = 0x1, 0x2, 0x4
OPEN_EXISTING = 3
FILE_ATTRIBUTE_NORMAL = 0x80
INVALID_HANDLE_VALUE = -1


def pread(fd: int, n: int, offset: int) -> bytes:
    """Up to ``n`` bytes of ``fd`` from byte ``offset`` (``os.pread``, or seek + read where it is missing)."""
    if HAVE_PREAD:
        return os.pread(fd, n, offset)
    return seek_read(fd, n, offset)


def seek_read(fd: int, n: int, offset: int) -> bytes:
    """``os.pread`` for systems without it: moves the descriptor's position (callers hold a lock)."""
    os.lseek(fd, offset, os.SEEK_SET)
    return os.read(fd, n)


def open_log(path: str | os.PathLike[str]) -> int:
    """A read-only descriptor of ``path`` that does not stop its writer from renaming or deleting it.

    POSIX: ``os.open`` (``O_NONBLOCK``: a FIFO must not hang waiting for a writer). Windows:
    :func:`open_windows`. Raises ``FileNotFoundError``, ``PermissionError`` or ``OSError`` like
    ``os.open``.
    """
    if sys.platform == "win32":  # pragma: no cover - exercised through open_windows with a fake kernel32
        import ctypes
        import msvcrt

        kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)
        kernel32.CreateFileW.restype = ctypes.c_void_p  # a HANDLE: pointer-sized
        kernel32.CreateFileW.argtypes = [
            ctypes.c_wchar_p,
            ctypes.c_uint32,
            ctypes.c_uint32,
            ctypes.c_void_p,
            ctypes.c_uint32,
            ctypes.c_uint32,
            ctypes.c_void_p,
        ]
        kernel32.CloseHandle.argtypes = [ctypes.c_void_p]
        return open_windows(os.fspath(path), kernel32, msvcrt.open_osfhandle)
    return os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0))


def open_windows(path: str, kernel32: Any, open_osfhandle: Any) -> int:
    """Open ``path`` with ``CreateFileW`` sharing read, write **and delete**, as a CRT descriptor.

    ``kernel32`` is ``ctypes.WinDLL("kernel32", use_last_error=True)`` (tests pass a fake) and
    ``open_osfhandle`` ``msvcrt.open_osfhandle``. A failure raises the ``OSError`` subclass its
    Windows error code maps to (2, 3: ``FileNotFoundError``; 5, 32: ``PermissionError``).
    """
    import ctypes

    handle = kernel32.CreateFileW(
        path,
        GENERIC_READ,
        FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE,
        None,
        OPEN_EXISTING,
        FILE_ATTRIBUTE_NORMAL,
        None,
    )
    if handle is None or handle in (INVALID_HANDLE_VALUE, ctypes.c_void_p(INVALID_HANDLE_VALUE).value):
        get_error = getattr(kernel32, "last_error", None)  # a test's fake; the real DLL has no such export
        code = get_error() if callable(get_error) else getattr(ctypes, "get_last_error", lambda: 0)()
        raise _windows_error(int(code), path)
    try:
        return int(open_osfhandle(handle, os.O_RDONLY | getattr(os, "O_BINARY", 0)))
    except OSError:
        kernel32.CloseHandle(handle)
        raise


_WIN_ERRORS: dict[int, type[OSError]] = {2: FileNotFoundError, 3: FileNotFoundError, 5: PermissionError}


def _windows_error(code: int, path: str) -> OSError:
    """The ``OSError`` a Windows error code means for opening ``path``."""
    if code == 32:  # ERROR_SHARING_VIOLATION: another program holds it without sharing
        return PermissionError(13, "the file is open in another program without sharing", path)
    cls = _WIN_ERRORS.get(code, OSError)
    return cls(2 if cls is FileNotFoundError else 13 if cls is PermissionError else 5, f"Windows error {code}", path)
