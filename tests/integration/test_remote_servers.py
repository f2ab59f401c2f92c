"""Servers behind auth and TLS, against real stand-in processes:
one that requires basic auth, one a bearer token, one on TLS with a CA made here by ``openssl``.
Each is watched with the right options (``--once --json`` and the dashboard) and fails with the
clear message without them; the password never reaches the screen, JSON, ``/metrics`` or a recording."""

from __future__ import annotations

import gzip
import json
import os
import ssl
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kvtop.config import Settings
from kvtop.config.server_access import server_accesses
from kvtop.ui.app import make_app
from kvtop.ui.widgets.header import ServerHeader
from tests.certs import TestCa
from tests.integration.test_app_live import rows, until
from tests.integration.test_export_prometheus import exporter
from tests.standin import BUNDLED, REPO, running
from tests.ui.screen_text import screen_text

USER, PASSWORD = "alice", "pw-S3cr@t-42"
ENCODED = "pw-S3cr%40t-42"
TOKEN = "tok-7f1e9a0b"
ARGS = ["--manual", "--scenario", str(BUNDLED)]


def _kvtop(*args: str, env_extra: dict[str, str] | None = None, tmp: Path) -> subprocess.CompletedProcess[str]:
    env = {
        k: v for k, v in os.environ.items() if not k.startswith("KVTOP_") and k not in ("OLLAMA_HOST", "OLLAMA_API_KEY")
    }
    env["XDG_CONFIG_HOME"] = str(tmp / "config")  # never the developer's config file
    env.update(env_extra or {})
    return subprocess.run(
        [sys.executable, "-m", "kvtop", *args], capture_output=True, text=True, timeout=60, cwd=str(REPO), env=env
    )


def _with_userinfo(url: str, userinfo: str) -> str:
    scheme, rest = url.split("://", 1)
    return f"{scheme}://{userinfo}@{rest}"


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A test CA and a server certificate it signed for 127.0.0.1 (``openssl``, PEM files)."""
    ca = TestCa(tmp_path_factory.mktemp("tls"))
    cert, key = ca.sign("server", "IP:127.0.0.1")
    return {"ca": ca.pem, "cert": cert, "key": key}


# --------------------------------------------------------------------------------------------
# --once / --check


def test_basic_auth_in_the_url_is_watched_and_never_printed(tmp_path: Path) -> None:
    with running([*ARGS, "--require-basic", f"{USER}:{PASSWORD}"]) as server:
        server.goto(4)  # three models
        ok = _kvtop("--once", "--json", "--host", _with_userinfo(server.url, f"{USER}:{ENCODED}"), tmp=tmp_path)
        text = _kvtop("--once", "--host", _with_userinfo(server.url, f"{USER}:{ENCODED}"), tmp=tmp_path)
        bare = _kvtop("--once", "--json", "--host", server.url, tmp=tmp_path)
        check = _kvtop("--check", "--host", server.url, tmp=tmp_path)
        wrong = _kvtop("--once", "--host", _with_userinfo(server.url, f"{USER}:nope"), tmp=tmp_path)
    assert ok.returncode == 0, ok.stderr
    doc = json.loads(ok.stdout)
    assert doc["reachable"] is True and doc["host"] == server.url and len(doc["models"]) == 3
    assert "tls" not in doc  # plain http: nothing about TLS to say
    assert text.returncode == 0 and f"— {server.url} —" in text.stdout and "gemma4:latest" in text.stdout
    for proc in (ok, text, bare, check, wrong):
        assert PASSWORD not in proc.stdout + proc.stderr and ENCODED not in proc.stdout + proc.stderr
    assert bare.returncode == 2
    failed = json.loads(bare.stdout)
    assert failed["reachable"] is False
    # the ways that keep the secret off the command line (ps) come first
    assert failed["error"] == (
        "authentication required (401): set credentials with OLLAMA_API_KEY (Bearer), "
        "--password-file FILE or --netrc (basic auth), or the config file's "
        '[servers."URL"] headers (sent: no credentials)'
    )
    assert failed["hints"][0].startswith(f"{server.url} asks for credentials: OLLAMA_API_KEY=…")
    assert "user:pass" not in ok.stdout + bare.stdout + check.stdout  # no form that puts a password in argv
    assert check.returncode == 2 and "authentication required (401)" in check.stdout
    assert wrong.returncode == 2 and "(sent: basic auth as alice)" in wrong.stderr


def test_bearer_token_from_ollama_api_key_or_a_header(tmp_path: Path) -> None:
    with running([*ARGS, "--require-bearer", TOKEN]) as server:
        server.goto(1)
        env_key = _kvtop("--once", "--json", "--host", server.url, env_extra={"OLLAMA_API_KEY": TOKEN}, tmp=tmp_path)
        header = _kvtop(
            "--once", "--json", "--host", server.url, "--header", f"Authorization: Bearer {TOKEN}", tmp=tmp_path
        )
        without = _kvtop("--once", "--json", "--host", server.url, tmp=tmp_path)
        config = tmp_path / "config" / "kvtop" / "config.toml"
        config.parent.mkdir(parents=True)
        config.write_text(f'[servers."{server.url}"]\napi_key_env = "GPU_BOX_KEY"\n', encoding="utf-8")
        per_host = _kvtop("--once", "--json", "--host", server.url, env_extra={"GPU_BOX_KEY": TOKEN}, tmp=tmp_path)
        writes = server.writes()
    for proc in (env_key, header, per_host):
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert [m["name"] for m in json.loads(proc.stdout)["models"]] == ["qwen3:1.7b-q8_0"]
    assert without.returncode == 2
    assert json.loads(without.stdout)["error"].startswith("authentication required (401)")
    for proc in (env_key, header, without, per_host):
        assert TOKEN not in proc.stdout + proc.stderr
    assert writes == []  # watching sends no write


def test_tls_with_a_private_ca(tmp_path: Path, tls_files: dict[str, str]) -> None:
    with running(
        [*ARGS, "--tls-cert", tls_files["cert"], "--tls-key", tls_files["key"]],
        verify=ssl.create_default_context(cafile=tls_files["ca"]),
    ) as server:
        assert server.url.startswith("https://127.0.0.1:")
        server.goto(4)
        cacert = _kvtop("--once", "--json", "--host", server.url, "--cacert", tls_files["ca"], tmp=tmp_path)
        insecure = _kvtop("--once", "--host", server.url, "--insecure", tmp=tmp_path)
        insecure_json = _kvtop("--once", "--json", "--host", server.url, "--insecure", tmp=tmp_path)
        untrusted = _kvtop("--once", "--json", "--host", server.url, tmp=tmp_path)
        plan = _kvtop(
            "plan",
            "qwen3:1.7b-q8_0",
            "--ctx",
            "8192",
            "--json",
            "--host",
            server.url,
            "--cacert",
            tls_files["ca"],
            tmp=tmp_path,
        )
        plan_bare = _kvtop("plan", "qwen3:1.7b-q8_0", "--host", server.url, tmp=tmp_path)
    assert cacert.returncode == 0, cacert.stderr
    doc = json.loads(cacert.stdout)
    assert len(doc["models"]) == 3 and doc["tls"] == {"verify": True, "cacert": tls_files["ca"]}
    assert insecure.returncode == 0, insecure.stderr
    assert insecure.stdout.splitlines()[0] == f"kvtop: {server.url}: TLS certificate not verified (--insecure)"
    assert json.loads(insecure_json.stdout)["tls"] == {"verify": False, "cacert": None}
    assert untrusted.returncode == 2
    failed = json.loads(untrusted.stdout)
    assert failed["error"].startswith(f"TLS certificate of {server.url} not verified (")
    assert failed["error"].endswith(
        "name the CA that signed it with --cacert FILE (PEM)"
    )  # not --insecure: the fix that keeps the check
    assert failed["hints"][0].startswith(f"The TLS certificate of {server.url} is not trusted here: --cacert FILE")
    assert plan.returncode == 0, plan.stderr
    assert json.loads(plan.stdout)["model"] == "qwen3:1.7b-q8_0"
    assert plan_bare.returncode != 0 and "--cacert FILE" in plan_bare.stderr


def test_a_bad_cacert_or_header_flag_is_refused_at_start(tmp_path: Path) -> None:
    missing = _kvtop("--once", "--host", "https://127.0.0.1:1", "--cacert", str(tmp_path / "nope.pem"), tmp=tmp_path)
    assert (
        missing.returncode == 2 and missing.stderr.strip() == f"kvtop: --cacert {tmp_path / 'nope.pem'}: no such file"
    )
    header = _kvtop("--once", "--host", "http://127.0.0.1:1", "--header", f"X-Key {PASSWORD}", tmp=tmp_path)
    assert header.returncode == 2 and "expected 'Name: value'" in header.stderr and PASSWORD not in header.stderr
    both = _kvtop("--once", "--insecure", "--cacert", "x.pem", tmp=tmp_path)
    assert both.returncode == 2 and "not allowed with argument" in both.stderr


# --------------------------------------------------------------------------------------------
# The dashboard, the exporter and a recording


def _access(url: str, **kw: Any) -> dict[str, Any]:
    accesses, _ = server_accesses([(url, kw.pop("user", None), kw.pop("password", None))], env={}, **kw)
    return accesses


async def test_dashboard_watches_a_basic_auth_server_and_records_no_secret(tmp_path: Path) -> None:
    from kvtop.cli.dashboard import _attach_recorder

    with running([*ARGS, "--require-basic", f"{USER}:{PASSWORD}"]) as server:
        server.goto(4)
        settings = Settings(
            host_url=server.url,
            interval_s=0.25,
            timeout_s=2.0,
            access=_access(server.url, user=USER, password=PASSWORD),
        )
        app = make_app(settings)
        assert _attach_recorder(app, str(tmp_path / "rec.jsonl")) is None
        async with app.run_test(size=(160, 48)) as pilot:
            await until(pilot, lambda: len(rows(app)) == 3)
            await pilot.pause(0.3)
            screen = screen_text(app)
        assert "gemma4:latest" in screen and server.url.removeprefix("http://") in screen
        assert PASSWORD not in screen and ENCODED not in screen
        recorded = (tmp_path / "rec.jsonl").read_bytes()
        if recorded[:2] == b"\x1f\x8b":
            recorded = gzip.decompress(recorded)
        assert b"gemma4:latest" in recorded and PASSWORD.encode() not in recorded
        # without credentials: the header says auth, the status line says which flag sets it
        app = make_app(Settings(host_url=server.url, interval_s=0.25, timeout_s=2.0))
        async with app.run_test(size=(100, 30)) as pilot:
            await until(pilot, lambda: app.state.ollama is not None and app.state.ollama.error_kind == "auth")
            await pilot.pause(0.3)
            screen = screen_text(app)
        assert "✖ auth" in screen and "authentication required (401)" in screen
        assert "Credentials: OLLAMA_API_KEY, --password-file FILE, --netrc" in screen


async def test_dashboard_header_says_insecure_tls(tls_files: dict[str, str]) -> None:
    with running(
        [*ARGS, "--tls-cert", tls_files["cert"], "--tls-key", tls_files["key"]],
        verify=ssl.create_default_context(cafile=tls_files["ca"]),
    ) as server:
        server.goto(1)
        app = make_app(
            Settings(host_url=server.url, interval_s=0.25, timeout_s=2.0, access=_access(server.url, insecure=True))
        )
        async with app.run_test(size=(80, 24)) as pilot:
            await until(pilot, lambda: len(rows(app)) == 1)
            await pilot.pause(0.3)
            header = app.query_one(ServerHeader).render().plain
        assert header.splitlines()[0].startswith("kvtop  ● up  TLS UNVERIFIED")  # a flag: never cut at 80 columns


def test_exporter_polls_with_credentials_and_labels_carry_none(tmp_path: Path) -> None:
    with running([*ARGS, "--require-basic", f"{USER}:{PASSWORD}"]) as server:
        server.goto(4)
        with exporter(tmp_path, "--host", _with_userinfo(server.url, f"{USER}:{ENCODED}"), "--interval", "0.25") as ex:
            fams = ex.until(lambda f: any(s.value == 1 for s in f["kvtop_server_up"].samples))
            import httpx

            body = httpx.get(ex.url, timeout=5.0, trust_env=False).text
            ex.stop()
    assert {s.labels["host"] for s in fams["kvtop_server_up"].samples} == {server.url}
    assert "kvtop_model_size_bytes{digest=" in body or "kvtop_model_size_bytes{" in body
    assert PASSWORD not in body and ENCODED not in body and USER + ":" not in body
    assert PASSWORD not in "".join(ex.stderr) and ENCODED not in "".join(ex.stderr)


# --------------------------------------------------------------------------------------------
# Writes (unload, keep-alive, what-if load) say the same auth/TLS words and carry no secret


async def test_write_errors_say_the_auth_message_and_hold_no_secret(tls_files: dict[str, str]) -> None:
    import httpx

    from kvtop.sources.auth import ServerAccess
    from kvtop.sources.ollama import OllamaClient
    from kvtop.sources.ollama_writes import send_load_request

    model = "qwen3:1.7b-q8_0"
    with running([*ARGS, "--require-basic", f"{USER}:{PASSWORD}"]) as server:
        server.goto(1)
        wrong = OllamaClient(server.url, access=ServerAccess(server.url, username=USER, password="not-" + PASSWORD))
        try:
            refused = await wrong.generate(model, keep_alive=0)
        finally:
            await wrong.aclose()
        bare = await send_load_request(server.url, model, 4096, None)
        right = OllamaClient(server.url, access=ServerAccess(server.url, username=USER, password=PASSWORD))
        try:
            sent = await right.generate(model, keep_alive="5m")
        finally:
            await right.aclose()
        writes = server.writes()
    assert refused == (
        "authentication required (401): set credentials with OLLAMA_API_KEY (Bearer), "
        '--password-file FILE or --netrc (basic auth), or the config file\'s [servers."URL"] headers'
        f" (sent: basic auth as {USER})"
    )
    assert bare is not None and bare.startswith("authentication required (401)") and "(sent: no credentials)" in bare
    assert "HTTP 401" not in refused + bare and PASSWORD not in refused
    assert sent is None and writes == [("POST", "/api/generate")] * 3  # the stand-in logs the two it refused too

    # a proxy that echoes what it got (the Authorization header, the URL) in its error page
    def echo(request: httpx.Request) -> httpx.Response:
        page = f"bad gateway for {request.headers['authorization']} at https://{USER}:{PASSWORD}@gpu-box/"
        return httpx.Response(502, text=page)

    access = ServerAccess("https://gpu-box", username=USER, password=PASSWORD)
    echoed = await send_load_request(
        "https://gpu-box", model, 4096, None, transport=httpx.MockTransport(echo), access=access
    )
    assert echoed is not None and echoed.startswith(
        "POST /api/generate: HTTP 502 Bad Gateway: bad gateway for Basic ***"
    )
    assert PASSWORD not in echoed and access.secrets()[1] not in echoed and f"{USER}:" not in echoed
    assert "https://gpu-box/" in echoed

    # TLS: the write says what the polls say (--cacert / --insecure), not "cannot connect"
    with running(
        [*ARGS, "--tls-cert", tls_files["cert"], "--tls-key", tls_files["key"]],
        verify=ssl.create_default_context(cafile=tls_files["ca"]),
    ) as tls_server:
        tls_server.goto(1)
        tls_error = await send_load_request(tls_server.url, model, 4096, None)
        trusted = await send_load_request(
            tls_server.url, model, 4096, None, access=ServerAccess(tls_server.url, cacert=tls_files["ca"])
        )
    assert tls_error is not None and tls_error.startswith(f"TLS certificate of {tls_server.url} not verified (")
    assert tls_error.endswith("name the CA that signed it with --cacert FILE (PEM)")
    assert trusted is None
