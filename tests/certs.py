"""A test CA and the server certificates it signs, made by the real ``openssl`` for the TLS stand-ins.

``TestCa(folder)`` makes ``ca.pem``/``ca.key`` (valid 2 days); ``sign(name, san, days)`` writes
``NAME.pem``/``NAME.key`` for ``san`` (an ``subjectAltName`` value such as ``IP:127.0.0.1``), with
``days`` that may be negative (``-1``: notAfter before notBefore, expired from the start). Skips the
calling test when ``openssl`` is not installed.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest


class TestCa:
    """A certificate authority in ``folder`` (created there at once)."""

    __test__ = False  # not a test class for pytest

    def __init__(self, folder: Path) -> None:
        openssl = shutil.which("openssl")
        if openssl is None:
            pytest.skip("openssl is not installed: the TLS stand-in needs a certificate made by it")
        self.openssl, self.folder = openssl, folder
        self.run(
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-days",
            "2",
            "-subj",
            "/CN=kvtop test CA",
        )
        self.pem = str(folder / "ca.pem")

    def run(self, *args: str) -> None:
        subprocess.run([self.openssl, *args], check=True, capture_output=True, cwd=self.folder, timeout=60)

    def sign(self, name: str, san: str, *, days: str = "2", cn: str = "127.0.0.1") -> tuple[str, str]:
        """A server certificate signed by this CA: its ``(cert path, key path)``."""
        (self.folder / f"{name}.cnf").write_text(f"subjectAltName={san}\nbasicConstraints=CA:FALSE\n", encoding="utf-8")
        self.run(
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            f"{name}.key",
            "-out",
            f"{name}.csr",
            "-subj",
            f"/CN={cn}",
        )
        self.run(
            "x509",
            "-req",
            "-in",
            f"{name}.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            f"{name}.pem",
            "-days",
            days,
            "-extfile",
            f"{name}.cnf",
        )
        return str(self.folder / f"{name}.pem"), str(self.folder / f"{name}.key")
