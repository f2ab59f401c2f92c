"""Servers behind auth and TLS: one place builds every client's
credentials, headers and TLS trust (``sources.auth``, ``config.server_accesses``), and no secret
ever reaches a message, ``--print-config`` or ``repr``."""

from __future__ import annotations

import base64
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from kvtop.config.files import ConfigError
from kvtop.config.server_access import parse_host_access, server_accesses
from kvtop.sources.auth import HeaderError, ServerAccess, parse_header, redact_url, split_userinfo
from kvtop.sources.ollama import OllamaClient
from kvtop.sources.ollama_errors import auth_message

REPO = Path(__file__).resolve().parents[2]
SECRET = "s3cr@t-Pw"


def test_userinfo_is_taken_out_percent_decoded_and_the_rest_read_as_ollama_host() -> None:
    assert split_userinfo("https://alice:s3cr%40t@gpu-box/ollama") == ("https://gpu-box/ollama", "alice", "s3cr@t")
    assert split_userinfo("https://alice:a@b@gpu-box:8443") == ("https://gpu-box:8443", "alice", "a@b")
    assert split_userinfo("bob@gpu-box:11434") == ("gpu-box:11434", "bob", None)
    assert split_userinfo("gpu-box:11434/a%40b") == ("gpu-box:11434/a%40b", None, None)  # an @ in the path: %40
    assert parse_host_access("https://alice:pw@gpu-box/") == ("https://gpu-box:443", "alice", "pw")
    assert parse_host_access("alice:pw@10.0.0.5:11434") == ("http://10.0.0.5:11434", "alice", "pw")
    assert parse_host_access(None) == ("http://127.0.0.1:11434", None, None)


def test_redact_url_drops_userinfo_anywhere_in_text() -> None:
    assert redact_url("cannot reach https://alice:pw@gpu-box:443/x now") == "cannot reach https://gpu-box:443/x now"
    assert redact_url("http://u@h and HTTPS://a:b@c") == "http://h and HTTPS://c"
    assert redact_url("no url here: a@b") == "no url here: a@b"


def test_header_errors_name_the_header_never_its_value() -> None:
    assert parse_header("Authorization:  Bearer abc ") == ("Authorization", "Bearer abc")
    for bad, words in [
        ("no colon " + SECRET, "expected 'Name: value', got no ':'"),
        ("Accept-Encoding: br", "set by kvtop itself"),
        ("X-Key: " + SECRET + "\r\nInjected: 1", "line break"),
        ("Bad Name: " + SECRET, "got no header name before ':'"),
    ]:
        with pytest.raises(HeaderError) as info:
            parse_header(bad)
        assert words in str(info.value) and SECRET not in str(info.value)


def test_request_headers_bearer_basic_and_precedence() -> None:
    plain = ServerAccess("https://gpu-box:443", api_key="tok-123", api_key_env="OLLAMA_API_KEY")
    assert plain.request_headers() == {
        "User-Agent": "kvtop",
        "Accept-Encoding": "gzip, deflate",
        "Authorization": "Bearer tok-123",
    }
    assert plain.auth is None and plain.sent_words() == "Authorization: Bearer from OLLAMA_API_KEY"
    # an Authorization header given wins over OLLAMA_API_KEY (as ollama-python's BaseClient)
    given = ServerAccess("https://gpu-box:443", api_key="tok-123", headers=(("authorization", "Token x"),))
    assert given.request_headers()["authorization"] == "Token x" and "Authorization" not in given.request_headers()
    # basic credentials in the URL: httpx's BasicAuth sets Authorization; no bearer besides
    basic = ServerAccess("https://gpu-box:443", username="alice", password=SECRET, api_key="tok-123")
    assert "Authorization" not in basic.request_headers() and not basic.sends_bearer
    request = httpx.Request("GET", "https://gpu-box/api/ps")
    sent = next(basic.auth.auth_flow(request))  # type: ignore[union-attr]
    assert sent.headers["Authorization"] == "Basic " + base64.b64encode(f"alice:{SECRET}".encode()).decode()
    # a later header of the same name replaces an earlier one, whatever its case
    twice = ServerAccess("http://h:1", headers=(("X-Team", "a"), ("x-team", "b")))
    assert twice.request_headers()["x-team"] == "b" and "X-Team" not in twice.request_headers()
    assert SECRET not in repr(basic) and "tok-123" not in repr(plain)


def test_scrub_replaces_every_form_of_the_secrets() -> None:
    access = ServerAccess(
        "https://gpu-box:443", username="alice", password=SECRET, headers=(("X-Key", "Bearer k-987654"),)
    )
    basic = base64.b64encode(f"alice:{SECRET}".encode()).decode()
    text = f"proxy said: Authorization: Basic {basic}; pass {SECRET}; key k-987654; via https://alice:{SECRET}@gpu-box/"
    out = access.scrub(text)
    assert SECRET not in out and basic not in out and "k-987654" not in out
    assert out == "proxy said: Authorization: Basic ***; pass ***; key ***; via https://gpu-box/"


def test_tls_settings_only_speak_for_https() -> None:
    insecure = ServerAccess("https://gpu-box:443", insecure=True)
    assert insecure.verify(trust_env=False) is False
    assert insecure.tls_flag == "TLS UNVERIFIED" and insecure.tls_json() == {"verify": False, "cacert": None}
    assert insecure.tls_note == "TLS certificate not verified (--insecure)"
    http = ServerAccess("http://10.0.0.5:11434", insecure=True)
    assert http.tls_flag is None and http.tls_note is None and http.tls_json() is None


def test_server_accesses_flags_config_tables_and_environment(tmp_path: Path) -> None:
    hosts = [("https://a:443", "alice", SECRET), ("https://b:443", None, None), ("http://127.0.0.1:11434", None, None)]
    servers = {
        "https://b/": {
            "headers": {"X-Team": "ml", "Authorization": "Bearer b-token"},
            "insecure": True,
            "api_key_env": "B_KEY",
        },
        "http://127.0.0.1:11434": {"api_key_env": "", "cacert": str(tmp_path / "missing.pem"), "colour": "red"},
        "https://nowhere": {"insecure": True},
    }
    env = {"OLLAMA_API_KEY": "env-token", "B_KEY": "b-env"}
    out, warnings = server_accesses(hosts, headers=["X-Run: 7"], servers=servers, env=env, file_origin="cfg.toml")
    a, b, local = out["https://a:443"], out["https://b:443"], out["http://127.0.0.1:11434"]
    assert (a.username, a.password, a.api_key, a.headers, a.insecure) == (
        "alice",
        SECRET,
        "env-token",
        (("X-Run", "7"),),
        False,
    )
    assert b.headers == (("X-Team", "ml"), ("Authorization", "Bearer b-token"), ("X-Run", "7")) and b.insecure
    assert b.api_key == "b-env" and not b.sends_bearer  # its own Authorization header wins
    assert local.api_key is None and local.cacert is None
    assert any("cacert" in w and "no such file" in w and "system's CAs are used" in w for w in warnings)
    assert any("unknown key 'colour'" in w for w in warnings)
    assert any('[servers."https://nowhere:443"] names no server watched' in w for w in warnings)
    assert not any(SECRET in w or "b-token" in w for w in warnings)
    # --insecure on the command line beats a table's cacert; --cacert beats a table's insecure
    out2, _ = server_accesses(
        [("https://b:443", None, None)], insecure=True, servers={"https://b": {"insecure": False}}, env={}
    )
    assert out2["https://b:443"].insecure is True
    with pytest.raises(ConfigError, match=r"--cacert .*missing.pem: no such file"):
        server_accesses(hosts, cacert=str(tmp_path / "missing.pem"), env={})
    (tmp_path / "junk.pem").write_text("not a certificate", encoding="utf-8")
    with pytest.raises(ConfigError, match="holds no PEM certificate"):
        server_accesses(hosts, cacert=str(tmp_path / "junk.pem"), env={})
    with pytest.raises(ConfigError) as info:
        server_accesses(hosts, headers=["X-Key " + SECRET], env={})
    assert SECRET not in str(info.value)


def test_a_password_over_plain_http_to_another_machine_is_warned_about() -> None:
    _, warnings = server_accesses(
        [("http://gpu-box:11434", "alice", SECRET), ("http://127.0.0.1:11434", "bob", "x")], env={}
    )
    assert warnings == [
        "the password for http://gpu-box:11434 goes over plain http (unencrypted): use https:// if its proxy offers it"
    ]


def test_auth_messages_name_the_flags_and_what_was_sent() -> None:
    none = ServerAccess("https://gpu-box:443")
    assert auth_message(401, none) == (
        "authentication required (401): set credentials with OLLAMA_API_KEY "
        "(Bearer), --password-file FILE or --netrc (basic auth), or the config"
        ' file\'s [servers."URL"] headers (sent: no credentials)'
    )
    basic = ServerAccess("https://gpu-box:443", username="alice", password=SECRET)
    refused = auth_message(403, basic)
    assert refused.startswith("authentication refused (403)") and "basic auth as alice" in refused
    assert SECRET not in refused


async def test_a_401_is_an_auth_error_and_a_proxy_echo_of_the_secret_is_scrubbed() -> None:
    basic = base64.b64encode(f"alice:{SECRET}".encode()).decode()

    def handler(request: httpx.Request) -> httpx.Response:
        assert request.headers["Authorization"] == f"Basic {basic}"
        return httpx.Response(403, json={"error": f"denied for {request.headers['Authorization']} ({SECRET})"})

    client = OllamaClient(
        "https://gpu-box:443",
        transport=httpx.MockTransport(handler),
        access=ServerAccess("https://gpu-box:443", username="alice", password=SECRET),
    )
    snap = await client.sample()
    await client.aclose()
    assert snap.reachable is False and snap.error_kind == "auth"
    assert snap.error is not None and snap.error.startswith("authentication refused (403)")
    assert SECRET not in snap.error and basic not in snap.error


def test_print_config_masks_every_secret(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text(
        'host = ["https://alice:' + SECRET + '@gpu-box/", "https://other/"]\n'
        '[servers."https://other"]\nheaders = { Authorization = "Bearer cfg-token-1" }\n',
        encoding="utf-8",
    )
    config.chmod(0o600)  # it holds secrets: kvtop refuses it readable by others
    proc = subprocess.run(
        [sys.executable, "-m", "kvtop", "--config", str(config), "--print-config", "--header", "X-Key: flag-secret-2"],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=str(REPO),
        env={"PATH": "/usr/bin:/bin", "OLLAMA_API_KEY": "env-secret-3", "HOME": str(tmp_path)},
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout + proc.stderr
    for secret in (SECRET, "cfg-token-1", "flag-secret-2", "env-secret-3"):
        assert secret not in out
    assert "server    https://gpu-box:443: basic auth as alice, header X-Key; TLS verified with the system's CAs" in out
    assert "server    https://other:443: Authorization: Bearer from OLLAMA_API_KEY" not in out  # its header wins
    assert "server    https://other:443: header Authorization, header X-Key;" in out
