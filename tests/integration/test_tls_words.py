"""What kvtop says about TLS (a reason the user can act on), against stand-in servers on https with a CA and
certificates made here by ``openssl`` (one valid, one expired):

- an expired certificate is answered with "renew it", not with ``--cacert`` or ``--insecure``;
  an unknown CA with ``--cacert`` only;
- ``--cacert`` is said as a setting ("checked against"), never "verified" just before "not verified";
- ``--insecure`` is said by ``--check`` (text and JSON), ``/metrics`` and the textfile
  (``kvtop_server_tls_verified``);
- ``kvtop export textfile --once`` exits 2 with the error on stderr when the certificate fails.
"""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from kvtop.model.hints import unreachable_hint_line, unreachable_hints
from kvtop.sources.ollama_errors import tls_message
from tests.certs import TestCa
from tests.integration.test_export_prometheus import exporter
from tests.standin import BUNDLED, REPO, running

ARGS = ["--manual", "--scenario", str(BUNDLED)]


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A test CA; a server certificate it signed for 127.0.0.1, and an expired one (``-days -1``:
    its notAfter is a day before its notBefore, so it is expired from the start)."""
    ca = TestCa(tmp_path_factory.mktemp("tls-words"))
    cert, key = ca.sign("server", "IP:127.0.0.1")
    expired, expired_key = ca.sign("expired", "IP:127.0.0.1", days="-1")
    # signed by the same CA, valid, but for another name only (neither 127.0.0.1 nor localhost)
    other, other_key = ca.sign("other", "DNS:gpu-box.example", cn="gpu-box.example")
    return {
        "ca": ca.pem,
        "cert": cert,
        "key": key,
        "expired": expired,
        "expired_key": expired_key,
        "other": other,
        "other_key": other_key,
    }


def _kvtop(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        k: v for k, v in os.environ.items() if not k.startswith("KVTOP_") and k not in ("OLLAMA_HOST", "OLLAMA_API_KEY")
    }
    env["XDG_CONFIG_HOME"] = str(tmp / "config")  # never the developer's config file
    return subprocess.run(
        [sys.executable, "-m", "kvtop", *args], capture_output=True, text=True, timeout=120, cwd=str(REPO), env=env
    )


def _verify(certs: dict[str, str]) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=certs["ca"])


def _serving(certs: dict[str, str], *, expired: bool = False, other_name: bool = False) -> Any:
    cert, key = (certs["expired"], certs["expired_key"]) if expired else (certs["cert"], certs["key"])
    if other_name:
        cert, key = certs["other"], certs["other_key"]
    ctx = _verify(certs)
    if expired or other_name:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE  # the test's own control client only
    return running([*ARGS, "--tls-cert", cert, "--tls-key", key], verify=ctx)


def test_expired_certificate_is_told_to_be_renewed(tmp_path: Path, certs: dict[str, str]) -> None:
    with _serving(certs, expired=True) as server:
        server.goto(1)
        as_json = _kvtop(tmp_path, "--once", "--json", "--host", server.url, "--cacert", certs["ca"])
        text = _kvtop(tmp_path, "--once", "--host", server.url, "--cacert", certs["ca"])
        check = _kvtop(tmp_path, "--check", "--host", server.url, "--cacert", certs["ca"])
    assert as_json.returncode == 2, as_json.stderr
    doc = json.loads(as_json.stdout)
    assert doc["error"] == (
        f"TLS certificate of {server.url} not verified (certificate has expired): "
        "it has expired: renew the server's certificate"
    )
    assert doc["hints"] == [
        f"The TLS certificate of {server.url} is outside its validity dates: renew it on "
        "the server (or its proxy), or check this machine's clock; naming a CA does not "
        "change that."
    ]
    for proc in (as_json, text, check):
        out = proc.stdout + proc.stderr
        assert "--insecure" not in out, out  # not pushed as the fix
        assert "TLS verified" not in out  # the setting is said as a setting, not as an outcome
    assert text.returncode == 2
    assert (
        text.stderr.splitlines()[0]
        == f"kvtop: {server.url}: TLS certificate checked against the CA in {certs['ca']} (--cacert)"
    )
    assert "it has expired: renew the server's certificate" in text.stderr
    assert check.returncode == 2
    assert check.stdout.splitlines()[:2] == [
        f"kvtop: {server.url}: TLS certificate checked against the CA in {certs['ca']} (--cacert)",
        f"kvtop: {server.url}: unreachable: TLS certificate of {server.url} not verified (certificate has expired): "
        "it has expired: renew the server's certificate",
    ]


def test_certificate_for_another_name_is_answered_with_the_name(tmp_path: Path, certs: dict[str, str]) -> None:
    """A certificate the CA signed, but not for this address (OpenSSL code 64, IP address mismatch):
    the fix is the name (--host), never --cacert, which is already given and right."""
    with _serving(certs, other_name=True) as server:
        server.goto(1)
        as_json = _kvtop(tmp_path, "--once", "--json", "--host", server.url, "--cacert", certs["ca"])
        text = _kvtop(tmp_path, "--once", "--host", server.url, "--cacert", certs["ca"])
    assert as_json.returncode == 2, as_json.stderr
    doc = json.loads(as_json.stdout)
    assert doc["error"].startswith(f"TLS certificate of {server.url} not verified (")
    assert doc["error"].endswith(": it was issued for another name: reach the server by that name (--host)")
    assert doc["hints"] == [
        f"The TLS certificate of {server.url} names another host: reach the server by a name "
        "the certificate was issued for (--host)."
    ]
    assert text.returncode == 2
    for proc in (as_json, text):
        out = proc.stdout + proc.stderr
        assert "must be fixed" not in out and "--cacert FILE" not in out and "names the CA" not in out, out
        assert "--insecure" not in out, out


def test_unknown_ca_is_answered_with_cacert_only(tmp_path: Path, certs: dict[str, str]) -> None:
    with _serving(certs) as server:
        server.goto(1)
        untrusted = _kvtop(tmp_path, "--once", "--json", "--host", server.url)
    assert untrusted.returncode == 2
    doc = json.loads(untrusted.stdout)
    assert doc["error"].startswith(f"TLS certificate of {server.url} not verified (")
    assert doc["error"].endswith("): name the CA that signed it with --cacert FILE (PEM)")
    assert doc["hints"][0] == (
        f"The TLS certificate of {server.url} is not trusted here: --cacert FILE names the CA (PEM) that signed it."
    )
    assert "--insecure" not in untrusted.stdout + untrusted.stderr


def test_check_says_insecure_in_text_and_json(tmp_path: Path, certs: dict[str, str]) -> None:
    with _serving(certs) as server:
        server.goto(1)
        text = _kvtop(tmp_path, "--check", "--host", server.url, "--insecure")
        as_json = _kvtop(tmp_path, "--check", "--json", "--host", server.url, "--insecure")
        trusted = _kvtop(tmp_path, "--check", "--json", "--host", server.url, "--cacert", certs["ca"])
    assert text.returncode in (0, 1), text.stdout + text.stderr
    assert text.stdout.splitlines()[0] == f"kvtop: {server.url}: TLS certificate not verified (--insecure)"
    doc = json.loads(as_json.stdout)
    assert doc["reachable"] is True and doc["tls"] == {"verify": False, "cacert": None}
    assert json.loads(trusted.stdout)["tls"] == {"verify": True, "cacert": certs["ca"]}


def _families(text: str) -> dict[str, Any]:
    return {f.name: f for f in text_string_to_metric_families(text)}


def _tls_verified(fams: dict[str, Any], host: str) -> float | None:
    fam = fams.get("kvtop_server_tls_verified")
    if fam is None:
        return None
    values = [s.value for s in fam.samples if s.labels.get("host") == host]
    return values[0] if values else None


def test_metrics_say_insecure(tmp_path: Path, certs: dict[str, str]) -> None:
    with _serving(certs) as server:
        server.goto(1)
        with exporter(tmp_path, "--host", server.url, "--insecure", "--interval", "0.5") as exp:
            fams = exp.until(lambda f: _tls_verified(f, server.url) is not None)
            assert _tls_verified(fams, server.url) == 0.0
            assert any("TLS certificate not verified (--insecure)" in line for line in exp.stderr)
            assert exp.stop() == 0
        with exporter(tmp_path, "--host", server.url, "--cacert", certs["ca"], "--interval", "0.5") as exp:
            fams = exp.until(lambda f: _tls_verified(f, server.url) is not None)
            assert _tls_verified(fams, server.url) == 1.0
            assert exp.stop() == 0


def test_textfile_once_fails_loudly_on_a_bad_certificate(tmp_path: Path, certs: dict[str, str]) -> None:
    out = tmp_path / "kvtop.prom"
    with _serving(certs) as server:
        server.goto(1)
        bad = _kvtop(tmp_path, "export", "textfile", str(out), "--once", "--host", server.url)
        bad_body = out.read_text(encoding="utf-8") if out.exists() else ""
        insecure = _kvtop(tmp_path, "export", "textfile", str(out), "--once", "--host", server.url, "--insecure")
        insecure_body = out.read_text(encoding="utf-8")
        cacert = _kvtop(
            tmp_path, "export", "textfile", str(out), "--once", "--host", server.url, "--cacert", certs["ca"]
        )
        cacert_body = out.read_text(encoding="utf-8")
    assert bad.returncode == 2, bad.stderr
    assert (
        f"kvtop export: {server.url}: TLS certificate of {server.url} not verified (" in bad.stderr
        and "--cacert FILE" in bad.stderr
    ), bad.stderr
    fams = _families(bad_body)  # the file is written all the same: the server is down from here
    assert [s.value for s in fams["kvtop_server_up"].samples] == [0.0]
    assert _tls_verified(fams, server.url) == 1.0  # verification was on: that is why it failed
    assert insecure.returncode == 0, insecure.stderr
    assert f"kvtop export: {server.url}: TLS certificate not verified (--insecure)" in insecure.stderr
    fams = _families(insecure_body)
    assert [s.value for s in fams["kvtop_server_up"].samples] == [1.0]
    assert _tls_verified(fams, server.url) == 0.0
    assert cacert.returncode == 0, cacert.stderr
    assert _tls_verified(_families(cacert_body), server.url) == 1.0


def test_tls_message_by_reason() -> None:
    """The words for each OpenSSL verify code (the real errors above cover expired and unknown CA)."""

    def err(code: int, message: str) -> ssl.SSLCertVerificationError:
        e = ssl.SSLCertVerificationError(1, f"[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: {message}")
        e.verify_code, e.verify_message = code, message
        return e

    url = "https://gpu-box"
    assert tls_message(url, err(10, "certificate has expired")).endswith(
        ": it has expired: renew the server's certificate"
    )
    assert tls_message(url, err(9, "certificate is not yet valid")).endswith(
        ": it is not valid yet: check this machine's clock and the certificate's start date"
    )
    assert tls_message(url, err(62, "Hostname mismatch, certificate is not valid for 'gpu-box'.")).endswith(
        ": it was issued for another name: reach the server by that name (--host)"
    )
    for code, message in (
        (20, "unable to get local issuer certificate"),
        (18, "self-signed certificate"),
        (19, "self-signed certificate in certificate chain"),
    ):
        assert tls_message(url, err(code, message)).endswith(": name the CA that signed it with --cacert FILE (PEM)")
    for code, message in (
        (64, "IP address mismatch, certificate is not valid for '10.0.0.5'."),
        (63, "email address mismatch"),
    ):
        assert tls_message(url, err(code, message)).endswith(
            ": it was issued for another name: reach the server by that name (--host)"
        )
    revoked = tls_message(url, err(23, "certificate revoked"))
    assert revoked.endswith(": the server's certificate must be fixed")
    # the hints follow the reason: neither a certificate for another name nor a revoked one is given --cacert
    assert unreachable_hints(url, error_kind="tls", error=tls_message(url, err(64, "IP address mismatch"))) == (
        f"The TLS certificate of {url} names another host: reach the server by a name the certificate was issued"
        " for (--host).",
    )
    revoked_hints = unreachable_hints(url, error_kind="tls", error=revoked)
    assert revoked_hints[0].startswith(f"The TLS certificate of {url} is refused for a reason of its own")
    assert not any("--cacert" in h or "--insecure" in h for h in revoked_hints)
    # the dashboard's one line too, given the error: --cacert only for an unknown CA
    for width in (78, 118):
        lines = {
            code: unreachable_hint_line(width, error_kind="tls", error=tls_message(url, err(code, message)))
            for code, message in (
                (64, "IP address mismatch"),
                (10, "certificate has expired"),
                (23, "certificate revoked"),
                (20, "unable to get local issuer certificate"),
            )
        }
        assert all(len(line) <= width and "--insecure" not in line for line in lines.values()), lines
        assert "--host" in lines[64] and "renew" in lines[10] and "fix it on the server" in lines[23], lines
        assert [c for c, line in lines.items() if "--cacert" in line] == [20], lines
    # as httpx wraps it: the verify error is found behind the ConnectError
    wrapped = RuntimeError("[SSL: CERTIFICATE_VERIFY_FAILED]")
    wrapped.__cause__ = err(10, "certificate has expired")
    assert "renew the server's certificate" in tls_message(url, wrapped)
    for code in (9, 10, 18, 19, 20, 23, 62, 63, 64):
        assert "--insecure" not in tls_message(url, err(code, "x"))
