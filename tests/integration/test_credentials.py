"""Credentials (kept off command lines, masked on every output), against real components: the stand-in server behind basic auth, the
real CLI as a subprocess, the real exporter, real processes read by ``ProcSource`` and a real
recording.

* A password given with ``--password-file`` or ``--netrc`` works and is not in the process's
  ``/proc/<pid>/cmdline`` (what ``ps`` shows every local user); one given in ``--host`` is there,
  and kvtop says so on stderr.
* A file holding a secret that others can read is refused, naming ``chmod 600 FILE``.
* A password with ``/ ? # @`` is refused unencoded (no request leaves, nothing of it is printed)
  and works percent-encoded or from a file.
* A server that echoes credentials in model names (``user:pass@``, ``?token=``) and control
  characters: neither reaches ``--once`` (text, JSON), ``/metrics`` or a recording; no JSON string
  holds a control character, recursively.
* A GPU process's command line (``--api-key X``, ``--password=X``, ``HF_TOKEN=X``) is masked in
  the process source, so in JSON and recordings.
"""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil  # type: ignore[import-untyped]
import pytest

from kvtop.model.gpu import gpu_json
from kvtop.model.gpu_snapshots import GpuDevice, GpuProcess, GpuSnapshot
from kvtop.sources.ollama import OllamaClient
from kvtop.sources.procs import ProcSource
from kvtop.sources.recorder import Recorder
from kvtop.textsafe import safe_json
from tests.integration.test_export_prometheus import exporter
from tests.standin import BUNDLED, REPO, running
from tests.unit.test_redact import assert_no_control

pytestmark = pytest.mark.skipif(os.name != "posix", reason="POSIX: /proc, file modes")

USER = "alice"
PASSWORD = "pw/S3c?r#t@9"  # every character RFC 3986 wants encoded in a userinfo
ENCODED = "pw%2FS3c%3Fr%23t%409"
WAIT_S = 60.0


def _env(tmp: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("KVTOP_") and k not in ("OLLAMA_HOST", "OLLAMA_API_KEY", "NETRC")
    }
    env["XDG_CONFIG_HOME"] = str(tmp / "config")  # never the developer's config file
    env["HOME"] = str(tmp)
    env.update(extra or {})
    return env


def _kvtop(tmp: Path, *args: str, extra: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kvtop", *args],
        capture_output=True,
        text=True,
        timeout=90,
        cwd=str(REPO),
        env=_env(tmp, extra),
    )


def _userinfo(url: str, userinfo: str) -> str:
    scheme, rest = url.split("://", 1)
    return f"{scheme}://{userinfo}@{rest}"


def _private(path: Path, text: str, mode: int = 0o600) -> Path:
    path.write_text(text, encoding="utf-8")
    path.chmod(mode)
    return path


def _no_secret(*texts: str, secrets: tuple[str, ...] = (PASSWORD, ENCODED)) -> None:
    for text in texts:
        for secret in secrets:
            assert secret not in text, (secret, text[:400])
        assert "S3c" not in text  # nor a piece of it


@pytest.fixture(scope="module")
def basic_server() -> Iterator[object]:
    with running(["--manual", "--scenario", str(BUNDLED), "--require-basic", f"{USER}:{PASSWORD}"]) as server:
        server.goto(4)  # three models
        yield server


# --------------------------------------------------------------------------------------------
# off the command line


def _stream_cmdline(tmp: Path, *args: str) -> tuple[str, dict[str, object], str]:
    """Start ``kvtop --stream`` with ``args``, wait for its first object; return its
    ``/proc/<pid>/cmdline`` (as ``ps`` shows it), that object and its stderr."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "kvtop", "--stream", "--interval", "0.5", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        cwd=str(REPO),
        env=_env(tmp),
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # blocks until the first sample (or exit)
        cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        assert " ".join(psutil.Process(proc.pid).cmdline()) == cmdline.strip()  # ps reads the same
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert line, err
    return cmdline, json.loads(line), err


def test_password_file_keeps_the_password_out_of_ps(basic_server: object, tmp_path: Path) -> None:
    url = basic_server.url  # type: ignore[attr-defined]
    pw = _private(tmp_path / "gpu.pass", PASSWORD + "\n")
    cmdline, doc, err = _stream_cmdline(tmp_path, "--host", _userinfo(url, USER), "--password-file", str(pw))
    assert doc["reachable"] is True and len(doc["models"]) == 3, doc["error"]
    assert "--password-file" in cmdline and USER in cmdline
    _no_secret(cmdline, json.dumps(doc), err)
    assert "visible to every user" not in err
    # the measurement can fail: the same password in --host is in ps, and kvtop says so
    cmdline, doc, err = _stream_cmdline(tmp_path, "--host", _userinfo(url, f"{USER}:{ENCODED}"))
    assert doc["reachable"] is True and ENCODED in cmdline
    assert "kvtop: the password in --host is visible to every user of this machine (ps)" in err
    _no_secret(json.dumps(doc), err)


def test_password_file_from_a_pipe(basic_server: object, tmp_path: Path) -> None:
    """``--password-file <(pass show gpu-box)``: a shell's process substitution is a private pipe."""
    url = basic_server.url  # type: ignore[attr-defined]
    secret = tmp_path / "pw"
    _private(secret, PASSWORD + "\n")
    script = f'exec {sys.executable} -m kvtop --once --json --host "$1" --password-file <(cat "$2")'
    proc = subprocess.run(
        ["bash", "-c", script, "bash", _userinfo(url, USER), str(secret)],
        capture_output=True,
        text=True,
        timeout=90,
        cwd=str(REPO),
        env=_env(tmp_path),
    )
    assert proc.returncode == 0, proc.stderr
    assert len(json.loads(proc.stdout)["models"]) == 3
    _no_secret(proc.stdout, proc.stderr)


def test_netrc_gives_login_and_password(basic_server: object, tmp_path: Path) -> None:
    url = basic_server.url  # type: ignore[attr-defined]
    rc = _private(tmp_path / "netrc", f'machine 127.0.0.1 login {USER} password "{PASSWORD}"\n')
    by_env = _kvtop(tmp_path, "--once", "--json", "--host", url, "--netrc", extra={"NETRC": str(rc)})
    by_flag = _kvtop(tmp_path, "--once", "--host", url, "--netrc-file", str(rc))
    plan = _kvtop(tmp_path, "plan", "qwen3:1.7b-q8_0", "--ctx", "8192", "--host", url, "--netrc-file", str(rc))
    assert by_env.returncode == 0, by_env.stderr
    assert len(json.loads(by_env.stdout)["models"]) == 3
    assert by_flag.returncode == 0 and "gemma4:latest" in by_flag.stdout, by_flag.stderr
    for proc in (by_env, by_flag, plan):
        _no_secret(proc.stdout, proc.stderr)
    assert plan.returncode == 0, plan.stderr


def test_files_others_can_read_are_refused(basic_server: object, tmp_path: Path) -> None:
    server = basic_server
    url = server.url  # type: ignore[attr-defined]
    before = len(server.requests())  # type: ignore[attr-defined]
    pw = _private(tmp_path / "pw", PASSWORD + "\n", 0o644)
    rc = _private(tmp_path / "netrc", f"machine 127.0.0.1 login {USER} password {ENCODED}\n", 0o640)
    by_file = _kvtop(tmp_path, "--once", "--host", _userinfo(url, USER), "--password-file", str(pw))
    by_netrc = _kvtop(tmp_path, "--once", "--host", url, "--netrc-file", str(rc))
    exported = _kvtop(
        tmp_path,
        "export",
        "textfile",
        str(tmp_path / "k.prom"),
        "--once",
        "--host",
        _userinfo(url, USER),
        "--password-file",
        str(pw),
    )
    config = tmp_path / "config" / "kvtop" / "config.toml"
    config.parent.mkdir(parents=True)
    _private(config, f'[servers."{url}"]\nheaders = {{ Authorization = "Bearer cfg-token-{ENCODED}" }}\n', 0o644)
    by_config = _kvtop(tmp_path, "--once", "--host", url)
    for proc, path in ((by_file, pw), (by_netrc, rc), (by_config, config), (exported, pw)):
        assert proc.returncode == 2, proc.stderr
        assert f"chmod 600 {path}" in proc.stderr
        _no_secret(proc.stdout, proc.stderr)
    assert len(server.requests()) == before  # type: ignore[attr-defined]  # refused before any request
    config.unlink()
    pw.chmod(0o600)
    fixed = _kvtop(tmp_path, "--once", "--host", _userinfo(url, USER), "--password-file", str(pw))
    assert fixed.returncode == 0, fixed.stderr


def test_a_password_with_slash_question_hash_at(basic_server: object, tmp_path: Path) -> None:
    server = basic_server
    url = server.url  # type: ignore[attr-defined]
    before = len(server.requests())  # type: ignore[attr-defined]
    raw = _kvtop(tmp_path, "--once", "--json", "--host", _userinfo(url, f"{USER}:{PASSWORD}"))
    env = _kvtop(tmp_path, "--once", "--json", extra={"OLLAMA_HOST": _userinfo(url, f"{USER}:{PASSWORD}")})
    plan = _kvtop(tmp_path, "plan", "qwen3:1.7b-q8_0", "--host", _userinfo(url, f"{USER}:{PASSWORD}"))
    check = _kvtop(tmp_path, "--check", "--json", "--host", _userinfo(url, f"{USER}:{PASSWORD}"))
    shown = _kvtop(tmp_path, "--print-config", extra={"OLLAMA_HOST": _userinfo(url, f"{USER}:{PASSWORD}")})
    export = _kvtop(
        tmp_path,
        "export",
        "textfile",
        str(tmp_path / "k.prom"),
        "--once",
        "--host",
        _userinfo(url, f"{USER}:{PASSWORD}"),
    )
    record = _kvtop(tmp_path, "--record", str(tmp_path / "rec.jsonl"), "--host", _userinfo(url, f"{USER}:{PASSWORD}"))
    assert raw.returncode == 2 and "must be percent-encoded (%2F, %3F, %23)" in raw.stderr
    assert plan.returncode != 0 and "percent-encoded" in plan.stderr
    assert "percent-encoded" in env.stderr  # OLLAMA_HOST: warned, the default address is watched instead
    assert "percent-encoded" in shown.stdout
    for proc in (check, export, record):
        assert proc.returncode == 2 and "percent-encoded" in proc.stderr, proc.stderr
    assert not (tmp_path / "rec.jsonl").exists() and not (tmp_path / "k.prom").exists()
    for proc in (raw, env, plan, check, shown, export, record):
        _no_secret(proc.stdout, proc.stderr)
    assert len(server.requests()) == before  # type: ignore[attr-defined]  # nothing went to any host
    encoded = _kvtop(tmp_path, "--once", "--json", "--host", _userinfo(url, f"{USER}:{ENCODED}"))
    assert encoded.returncode == 0, encoded.stderr
    assert len(json.loads(encoded.stdout)["models"]) == 3
    _no_secret(encoded.stdout, encoded.stderr)


# --------------------------------------------------------------------------------------------
# a server that echoes credentials and control characters in model names


ECHO_SECRETS = ("TOKSECRET99", "PWSECRET77", "KEYSECRET55")
NAMES = (
    "evil:latest?token=TOKSECRET99",
    "mirror:https://bob:PWSECRET77@x.example/m",
    "esc\x1b[31m:\x07bell\x9b?api_key=KEYSECRET55",
)


def _echo_scenario(tmp_path: Path) -> Path:
    data = json.loads(BUNDLED.read_text(encoding="utf-8"))
    template = data["models"]["qwen3:1.7b-q8_0"]
    data["models"] = {name: dict(template) for name in NAMES}
    data["steps"] = [
        {
            "at_s": 0,
            "label": "echo",
            "loaded": [
                {"model": name, "context_length": 2048, "size": 5_000_000, "size_vram": 0, "expires_in_s": 300}
                for name in NAMES
            ],
        }
    ]
    path = tmp_path / "echo.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


async def test_credentials_a_server_echoes_reach_no_output(tmp_path: Path) -> None:
    with running(["--manual", "--scenario", str(_echo_scenario(tmp_path))]) as server:
        server.goto(0)
        once_json = _kvtop(tmp_path, "--once", "--json", "--host", server.url)
        once_text = _kvtop(tmp_path, "--once", "--host", server.url)
        stream = _kvtop(tmp_path, "--stream", "--count", "1", "--host", server.url)
        plan_all = _kvtop(tmp_path, "plan", "--all", "--json", "--gpu-free", "16GiB", "--host", server.url)
        with exporter(tmp_path, "--host", server.url, "--interval", "0.25") as ex:
            ex.until(lambda f: "kvtop_model_size_bytes" in f and len(f["kvtop_model_size_bytes"].samples) == 3)
            metrics = httpx.get(ex.url, timeout=5.0, trust_env=False).text
            ex.stop()
        client = OllamaClient(server.url, timeout_s=5.0)
        snap = await client.sample()
        await client.aclose()
    assert len(snap.models) == 3 and any("PWSECRET77" in m.name for m in snap.models)  # the server did echo them
    rec = Recorder.create(tmp_path / "rec.jsonl.gz", {"kvtop_recording": 1})
    rec.ollama(snap)
    rec.close()
    recorded = gzip.decompress((tmp_path / "rec.jsonl.gz").read_bytes()).decode()
    for proc in (once_json, once_text, stream):
        assert proc.returncode == 0, proc.stderr
    doc = json.loads(once_json.stdout)
    assert_no_control(doc)
    assert_no_control(json.loads(stream.stdout))
    assert plan_all.stdout, plan_all.stderr  # its exit code says fit / incomplete: any, with its JSON
    plan_doc = json.loads(plan_all.stdout)
    assert_no_control(plan_doc)
    assert "?api_key=***" in json.dumps(plan_doc, ensure_ascii=False)
    assert sorted(m["name"] for m in doc["models"]) == sorted(
        ["evil:latest?token=***", "mirror:https://x.example/m", "esc\ufffd[31m:\ufffdbell\ufffd?api_key=***"]
    )
    assert "kvtop_model_size_bytes{" in metrics and "evil:latest?token=***" in metrics
    for text in (
        once_json.stdout,
        once_text.stdout,
        stream.stdout,
        plan_all.stdout,
        plan_all.stderr,
        metrics,
        recorded,
        once_json.stderr,
        once_text.stderr,
        "".join(ex.stderr),
    ):
        for secret in ECHO_SECRETS:
            assert secret not in text, (secret, text[:300])
    assert "\x1b" not in once_text.stdout + metrics


# --------------------------------------------------------------------------------------------
# GPU processes' command lines


RUNNER = "import time\ntime.sleep(120)\n"


async def test_gpu_process_command_lines_are_masked(tmp_path: Path) -> None:
    bindir, work = tmp_path / "bin", tmp_path / "work"
    bindir.mkdir()
    work.mkdir()
    exe = bindir / "ollama"
    exe.symlink_to(Path(sys.executable).resolve())
    (work / "runner").write_text(RUNNER)
    blob = tmp_path / "blobs" / ("sha256-" + "cd" * 32)
    blob.parent.mkdir()
    blob.write_bytes(b"GGUF")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    runner = subprocess.Popen(
        [
            str(exe),
            "runner",
            "--model",
            str(blob),
            "--port",
            "45690",
            "--api-key",
            "RUNSECRET1",
            "--password=RUNSECRET2",
        ],
        cwd=work,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    foreign = subprocess.Popen(
        [
            sys.executable,
            "-c",
            RUNNER,
            "--hf-token",
            "FOREIGNSECRET3",
            "OPENAI_API_KEY=FS4",
            "https://u:FOREIGNSECRET5@x.example/?token=FOREIGNSECRET6",
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:  # both started, their argv readable
            try:
                if (
                    "RUNSECRET1" in psutil.Process(runner.pid).cmdline()
                    and "FOREIGNSECRET3" in psutil.Process(foreign.pid).cmdline()
                ):
                    break
            except psutil.Error:
                pass
            time.sleep(0.05)
        else:
            raise AssertionError("the processes did not start")
        snap = await ProcSource().sample([runner.pid, foreign.pid])
    finally:
        for p in (runner, foreign):
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(timeout=10)
    assert snap.ok, snap.error
    assert snap.processes[foreign.pid].cmdline == (
        sys.executable,
        "-c",
        RUNNER,
        "--hf-token",
        "***",
        "OPENAI_API_KEY=***",
        "https://x.example/?token=***",
    )
    (found,) = [r for r in snap.runners if r.pid == runner.pid]  # classified from the real argv
    assert (found.port, found.blob) == (45690, blob.name)
    assert found.cmdline[-4:] == ("45690", "--api-key", "***", "--password=***")
    assert snap.processes[runner.pid].cmdline[-3:] == ("--api-key", "***", "--password=***")
    gpu = GpuSnapshot(
        taken_at=0,
        status="test",
        ok=True,
        devices=(
            GpuDevice(
                index=0,
                memory_total_bytes=8 << 30,
                memory_free_bytes=4 << 30,
                processes=(GpuProcess(runner.pid, 3 << 30), GpuProcess(foreign.pid, 1 << 30)),
            ),
        ),
    )
    text = safe_json(gpu_json(gpu, snap, []))
    assert "--api-key ***" in text and "--hf-token ***" in text
    rec = Recorder.create(tmp_path / "rec.jsonl", {"kvtop_recording": 1})
    rec.gpu(gpu, snap)
    rec.close()
    recorded = (tmp_path / "rec.jsonl").read_text(encoding="utf-8")
    for secret in ("RUNSECRET1", "RUNSECRET2", "FOREIGNSECRET3", "FS4", "FOREIGNSECRET5", "FOREIGNSECRET6"):
        assert secret not in text and secret not in recorded


# --------------------------------------------------------------------------------------------
# the dashboard says it too


async def test_dashboard_warns_about_a_password_on_the_command_line(basic_server: object) -> None:
    from kvtop.config import Settings
    from kvtop.config.server_access import server_accesses
    from kvtop.ui.app import make_app
    from tests.integration.test_app_live import rows, until
    from tests.ui.screen_text import screen_text

    url = basic_server.url  # type: ignore[attr-defined]
    access, warnings = server_accesses([(url, USER, PASSWORD)], env={}, host_origin="flag")  # as --host gives it
    assert any("visible to every user of this machine (ps)" in w for w in warnings)
    app = make_app(
        Settings(host_url=url, interval_s=0.25, timeout_s=5.0, access=access, extra={"warnings": "\n".join(warnings)})
    )  # as cli.main hands them over
    async with app.run_test(size=(160, 48)) as pilot:
        await until(pilot, lambda: any("visible to every user" in n.message for n in app._notifications), 20.0)
        await until(pilot, lambda: len(rows(app)) == 3, 20.0)  # it authenticates all the same
        notes = [n.message for n in app._notifications]
        screen = screen_text(app)
    assert any(n.startswith("the password in --host is visible to every user of this machine (ps)") for n in notes)
    _no_secret(screen, *notes)
