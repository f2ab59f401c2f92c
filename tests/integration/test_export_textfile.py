"""``kvtop export textfile PATH``: node_exporter's textfile collector, written atomically.

The exporter runs as a real process against the stand-in Ollama server; the file it writes is
parsed with prometheus-client's text parser and compared with the stand-in's scenario and with
the HTTP exporter's own scrape.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

from kvtop.demo.scenario_file import load_scenario
from kvtop.export.textfile import write_atomically
from tests.integration.test_export_prometheus import _env, exporter
from tests.standin import BUNDLED, REPO, running
from tests.unit.test_prometheus import samples, value


def _families(path: Path) -> dict[str, object]:
    return {f.name: f for f in text_string_to_metric_families(path.read_text(encoding="utf-8"))}


def _textfile(tmp_path: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kvtop", "export", "textfile", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=str(REPO),
        env=_env(tmp_path),
        stdin=subprocess.DEVNULL,
    )


def test_once_writes_the_same_metrics_as_the_http_exporter(tmp_path: Path) -> None:
    scenario = load_scenario(BUNDLED)
    out = tmp_path / "prom" / "kvtop.prom"
    out.parent.mkdir()
    with running(["--manual"]) as server:
        server.goto(4)
        proc = _textfile(tmp_path, str(out), "--once", "--host", server.url)
        written = set(_families(out)) if out.exists() else set()
        with exporter(tmp_path, "--host", server.url, "--interval", "0.25") as ex:
            # the exporter's GPU, process and connections loops start after its first poll: wait for them
            scraped = ex.until(
                lambda f: len(samples(f, "kvtop_model_memory_bytes", part="kv")) == 3 and written <= set(f)
            )
    assert proc.returncode == 0, proc.stderr
    assert f"writing Prometheus metrics to {out} once" in proc.stderr
    assert sorted(os.listdir(out.parent)) == ["kvtop.prom"]  # no temporary file left behind
    assert oct(out.stat().st_mode & 0o777) == oct(0o666 & ~_umask())
    fams = _families(out)
    host = server.url
    assert value(fams, "kvtop_server_up", host=host) == 1
    for row in scenario.steps[4].loaded:
        ids = {"host": host, "model": row.model, "digest": scenario.models[row.model].digest}
        assert value(fams, "kvtop_model_size_bytes", **ids) == row.size
        assert value(fams, "kvtop_model_vram_bytes", **ids) == row.size_vram
        assert value(fams, "kvtop_model_memory_bytes", part="kv", **ids) == value(
            scraped, "kvtop_model_memory_bytes", part="kv", **ids
        )
    # the same families as a scrape, less the scrape counter (nothing scrapes a textfile)
    assert set(fams) == set(scraped) - {"kvtop_exporter_scrapes"}


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def test_the_file_is_rewritten_every_interval_and_no_port_is_opened(tmp_path: Path) -> None:
    out = tmp_path / "kvtop.prom"
    with running(["--manual"]) as server:
        server.goto(4)
        proc = subprocess.Popen(
            [sys.executable, "-m", "kvtop", "export", "textfile", str(out), "--host", server.url, "--interval", "0.25"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=str(REPO),
            env=_env(tmp_path),
        )
        try:
            polls: list[float] = []
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and len(set(polls)) < 3:
                if out.exists():
                    polls.append(value(_families(out), "kvtop_server_polls_total", host=server.url))
                time.sleep(0.1)
            assert len(set(polls)) >= 3 and polls == sorted(polls), polls
            conns = psutil.Process(proc.pid).net_connections(kind="inet")
            assert [c for c in conns if c.status == psutil.CONN_LISTEN] == []
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=15)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")) == []


def test_a_dead_server_is_written_as_down(tmp_path: Path) -> None:
    out = tmp_path / "kvtop.prom"
    proc = _textfile(tmp_path, str(out), "--once", "--host", "127.0.0.1:9", "--timeout", "0.5")
    assert proc.returncode == 0, proc.stderr
    fams = _families(out)
    assert value(fams, "kvtop_server_up", host="http://127.0.0.1:9") == 0
    assert (
        value(fams, "kvtop_alerts", host="http://127.0.0.1:9", kind="server_unreachable", severity="critical", model="")
        == 1
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "textfile needs the PATH to write"),
        (("{tmp}/missing/kvtop.prom",), "the directory {tmp}/missing does not exist"),
        (("{tmp}",), "is a directory: name a file in it"),
        (("{tmp}/kvtop.prom", "--listen", ":9999"), "textfile opens no port"),
    ],
)
def test_bad_paths_and_flags_exit_2_saying_why(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    proc = _textfile(tmp_path, *(a.format(tmp=tmp_path) for a in args), "--once", "--host", "127.0.0.1:9")
    assert proc.returncode == 2
    assert message.format(tmp=tmp_path) in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_reader_never_sees_a_partial_file(tmp_path: Path) -> None:
    """1,000 rewrites of different sizes while a reader reads as fast as it can: every read is one
    whole version (its line count matches the count its first line announces)."""
    path = tmp_path / "kvtop.prom"

    def body(i: int) -> bytes:
        n = 1 + (i * 37) % 400  # 1 to 400 lines: some versions are far longer than others
        head = f"# version {i} lines {n}\n"
        return (head + "".join(f'kvtop_test{{version="{i}",line="{k}"}} {k}\n' for k in range(n))).encode()

    write_atomically(path, body(0))
    done = threading.Event()
    reads: list[int] = []
    bad: list[str] = []

    def reader() -> None:
        while not done.is_set():
            text = path.read_text(encoding="utf-8")
            lines = text.splitlines()
            head = lines[0].split()
            version, n = int(head[2]), int(head[4])
            if (
                len(lines) != n + 1
                or not text.endswith("\n")
                or any(f'version="{version}"' not in ln for ln in lines[1:])
            ):
                bad.append(text[:200])
            reads.append(version)

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for i in range(1, 1001):
            write_atomically(path, body(i))
    finally:
        done.set()
        thread.join(10)
    assert bad == []
    assert len(reads) > 100 and len(set(reads)) > 10  # the reader did overlap the writes
    assert path.read_bytes() == body(1000)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kvtop.prom"]


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "kvtop.prom"
    write_atomically(path, b"old 1\n")

    class Boom(Exception):
        pass

    real_replace = os.replace

    def failing_replace(src: str, dst: str) -> None:
        raise Boom()

    os.replace = failing_replace  # type: ignore[assignment]
    try:
        with pytest.raises(Boom):
            write_atomically(path, b"new 2\n")
    finally:
        os.replace = real_replace
    assert path.read_bytes() == b"old 1\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kvtop.prom"]
