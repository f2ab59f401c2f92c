"""``kvtop export prometheus`` as a real process, scraped over HTTP.

The stand-in Ollama server (``python -m kvtop.demo.server --manual``) and the exporter
(``python -m kvtop export prometheus --listen 127.0.0.1:0``) run as subprocesses on
127.0.0.1; ``/metrics`` is fetched with httpx and parsed with prometheus-client's text parser.
Expected values come from the scenario file and kvtop's KV arithmetic, not from the exporter.
The stand-in runs with ``--verbose`` where polls are counted: it logs every request it serves.
"""

from __future__ import annotations

import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from kvtop.demo.scenario_file import load_scenario
from kvtop.logparse.events import RequestTiming
from kvtop.logparse.parser import LogParser
from tests.llama_fixture import ollama_spawn_line
from tests.standin import BUNDLED, START_TIMEOUT_S, _read_line, _spawn, running, tiny_scenario
from tests.unit.test_prometheus import TRUNCATION, expected_kv, samples, value

REPO = Path(__file__).resolve().parents[2]
LISTENING = re.compile(r"serving Prometheus metrics on (http://\S+/metrics)")


@dataclass
class ExporterProc:
    """A running ``kvtop export prometheus`` and what it printed to stderr."""

    proc: subprocess.Popen[str]
    url: str
    stderr: list[str] = field(default_factory=list)

    def scrape(self) -> dict[str, Any]:
        response = httpx.get(self.url, timeout=5.0, trust_env=False)
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/plain")
        return {f.name: f for f in text_string_to_metric_families(response.text)}

    def until(self, check: Callable[[dict[str, Any]], bool], timeout: float = 15.0) -> dict[str, Any]:
        """Scrape until ``check`` holds; fail with the last scrape otherwise."""
        deadline = time.monotonic() + timeout
        while True:
            fams = self.scrape()
            if check(fams):
                return fams
            if time.monotonic() > deadline:
                pytest.fail(f"condition not met in {timeout} s; last scrape families: {sorted(fams)}")
            time.sleep(0.1)

    def stop(self, sig: int = signal.SIGTERM) -> int:
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            pytest.fail("the exporter did not exit within 10 s of the signal")


def _drain(stream: Any, sink: list[str], lines: queue.Queue[str] | None = None) -> None:
    for line in stream:
        sink.append(line)
        if lines is not None:
            lines.put(line)


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KVTOP_") and k != "OLLAMA_HOST"}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env["XDG_CONFIG_HOME"] = str(tmp_path / "config")  # never the developer's config file
    return env


@contextmanager
def exporter(tmp_path: Path, *args: str) -> Iterator[ExporterProc]:
    """Start the exporter on a free port; yield it once it says where it listens; always stop it."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "kvtop", "export", "prometheus", "--listen", "127.0.0.1:0", *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=str(REPO),
        env=_env(tmp_path),
    )
    got: queue.Queue[str] = queue.Queue()
    sink: list[str] = []
    threading.Thread(target=_drain, args=(proc.stderr, sink, got), daemon=True).start()
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        url = None
        while url is None and time.monotonic() < deadline:
            try:
                m = LISTENING.search(got.get(timeout=max(0.01, deadline - time.monotonic())))
            except queue.Empty:
                break
            url = m.group(1) if m else None
        if url is None:
            proc.kill()
            proc.wait()
            pytest.fail(f"the exporter did not start: {''.join(sink)!r}")
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+/metrics", url), url
        yield ExporterProc(proc, url, sink)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@dataclass
class LoggedStandin:
    """A stand-in run with ``--verbose``: every request it serves, with the time it was logged."""

    url: str
    requests: list[tuple[float, str]]
    client: httpx.Client

    def goto(self, index: int) -> None:
        assert self.client.post("/_standin/advance", json={"to": index}).status_code == 200

    def ps_polls(self, since: float = 0.0, until: float = float("inf")) -> int:
        return sum(1 for t, line in self.requests if since <= t <= until and '"GET /api/ps ' in line)


@contextmanager
def logged_standin(*args: str) -> Iterator[LoggedStandin]:
    proc = _spawn(["--manual", "--verbose", *args])
    requests: list[tuple[float, str]] = []

    def drain() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            requests.append((time.monotonic(), line))

    try:
        line = _read_line(proc.stdout, START_TIMEOUT_S)
        assert line.startswith("LISTENING "), line
        threading.Thread(target=drain, daemon=True).start()
        url = line.split(" ", 1)[1].strip()
        with httpx.Client(base_url=url, timeout=5.0, trust_env=False) as client:
            yield LoggedStandin(url, requests, client)
    finally:
        if proc.poll() is None:
            proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


FIXTURES = REPO / "tests" / "fixtures" / "llama_server"


def _runner(name: str, blob: str) -> tuple[list[str], str]:
    """A captured llama-server run as if Ollama had started it for ``blob``: argv and stderr."""
    argv = (FIXTURES / f"{name}.cmd").read_text(encoding="utf-8").split()
    old = next(a for a in argv if "blobs/sha256-" in a)
    new = f"/usr/share/ollama/.ollama/models/blobs/{blob}"
    stderr = (FIXTURES / f"{name}.log").read_text(encoding="utf-8").replace(old, new)
    return [new if a == old else a for a in argv], stderr


def _model_ids(fams: dict[str, Any]) -> set[str]:
    return {s.labels["model"] for s in samples(fams, "kvtop_model_size_bytes")}


# --------------------------------------------------------------------------------------------


def test_a_scrape_returns_the_standins_kv_and_spill_figures(tmp_path: Path) -> None:
    scenario = load_scenario(BUNDLED)
    with running(["--manual"]) as server:
        server.goto(4)
        with exporter(tmp_path, "--host", server.url, "--interval", "0.25") as ex:
            assert ex.stderr[0].startswith("kvtop export: serving Prometheus metrics on http://127.0.0.1:")
            fams = ex.until(lambda f: len(samples(f, "kvtop_model_memory_bytes", part="kv")) == 3)
            host = server.url
            assert value(fams, "kvtop_server_up", host=host) == 1
            assert value(fams, "kvtop_server_info", host=host, version=scenario.version) == 1
            assert _model_ids(fams) == {r.model for r in scenario.steps[4].loaded}
            for row in scenario.steps[4].loaded:
                model = scenario.models[row.model]
                ids = {"host": host, "model": row.model, "digest": model.digest}
                assert value(fams, "kvtop_model_size_bytes", **ids) == row.size
                assert value(fams, "kvtop_model_vram_bytes", **ids) == row.size_vram
                assert value(fams, "kvtop_model_spilled", **ids) == (row.size_vram < row.size)
                assert value(fams, "kvtop_model_cpu_ratio", **ids) == pytest.approx(
                    (row.size - row.size_vram) / row.size
                )
                assert value(fams, "kvtop_model_context_tokens", **ids, source="reported") == row.context_length
                assert value(fams, "kvtop_model_memory_bytes", **ids, part="kv", source="estimated") == (
                    expected_kv(model, row.context_length)
                )
            gemma = {"host": host, "model": "gemma4:latest", "digest": scenario.models["gemma4:latest"].digest}
            assert value(fams, "kvtop_model_spilled", **gemma) == 1
            assert value(fams, "kvtop_model_size_bytes", **gemma) - value(fams, "kvtop_model_vram_bytes", **gemma) == (
                6591830464 - 5333539264
            )
            assert value(fams, "kvtop_alerts", host=host, kind="spill", severity="critical", model="gemma4:latest") == 1
            q4 = {"host": host, "model": "qwen3:1.7b-q4_K_M", "digest": scenario.models["qwen3:1.7b-q4_K_M"].digest}
            assert value(fams, "kvtop_model_memory_bytes", **q4, part="kv", source="estimated") == 469762048

            server.goto(2)  # one model left, at num_ctx 32768
            q8 = scenario.models["qwen3:1.7b-q8_0"]
            fams = ex.until(lambda f: _model_ids(f) == {"qwen3:1.7b-q8_0"})
            ids = {"host": host, "model": "qwen3:1.7b-q8_0", "digest": q8.digest}
            assert value(fams, "kvtop_model_context_tokens", **ids, source="reported") == 32768
            assert (
                value(fams, "kvtop_model_memory_bytes", **ids, part="kv", source="estimated")
                == (expected_kv(q8, 32768))
                == 3758096384
            )
            assert value(fams, "kvtop_model_spilled", **ids) == 0
            assert samples(fams, "kvtop_alerts", kind="spill") == []
            assert ex.stop(signal.SIGTERM) == 0
    assert not any("Traceback" in line for line in ex.stderr), ex.stderr


def test_a_dead_host_never_delays_the_live_one(tmp_path: Path) -> None:
    """The first --host accepts connections and never answers: each of its polls waits for the
    whole --timeout. The second host is still polled every interval."""
    blackhole = socket.socket()
    blackhole.bind(("127.0.0.1", 0))
    blackhole.listen(64)
    dead = f"http://127.0.0.1:{blackhole.getsockname()[1]}"
    try:
        with running(["--manual"]) as server:
            server.goto(3)
            with exporter(tmp_path, "--host", dead, "--host", server.url, "--interval", "0.5", "--timeout", "3") as ex:
                t0 = time.monotonic()
                fams = ex.until(lambda f: len(samples(f, "kvtop_model_size_bytes", host=server.url)) == 2)
                assert time.monotonic() - t0 < 2.5  # well before the dead host's first deadline
                first = value(fams, "kvtop_server_polls_total", host=server.url)
                time.sleep(2.0)
                fams = ex.scrape()
                assert value(fams, "kvtop_server_polls_total", host=server.url) - first >= 3
                assert value(fams, "kvtop_server_up", host=server.url) == 1
                fams = ex.until(lambda f: value(f, "kvtop_server_poll_failures_total", host=dead) >= 1, timeout=6)
                assert value(fams, "kvtop_server_up", host=dead) == 0
                assert samples(fams, "kvtop_model_size_bytes", host=dead) == []
                assert (
                    value(fams, "kvtop_alerts", host=dead, kind="server_unreachable", severity="critical", model="")
                    == 1
                )
                assert len(samples(fams, "kvtop_model_size_bytes", host=server.url)) == 2
                assert ex.stop(signal.SIGINT) == 0
    finally:
        blackhole.close()


def test_five_concurrent_scrapers_cost_no_extra_polls(tmp_path: Path) -> None:
    with logged_standin() as server:
        server.goto(4)
        with exporter(tmp_path, "--host", server.url, "--interval", "1") as ex:
            ex.until(lambda f: value(f, "kvtop_server_up", host=server.url) == 1)
            counts = [0] * 5
            failures: list[str] = []
            stop_at = time.monotonic() + 3.0

            def scraper(i: int) -> None:
                with httpx.Client(timeout=5.0, trust_env=False) as client:
                    while time.monotonic() < stop_at:
                        r = client.get(ex.url)
                        if r.status_code != 200 or "kvtop_model_size_bytes" not in r.text:
                            failures.append(f"{r.status_code}: {r.text[:200]}")
                        counts[i] += 1

            t0 = time.monotonic()
            threads = [threading.Thread(target=scraper, args=(i,)) for i in range(5)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            t1 = time.monotonic()
            assert not failures, failures[:3]
            assert min(counts) >= 10, counts  # each scraper got many answers ...
            polls = server.ps_polls(t0, t1)
            assert 2 <= polls <= 4, polls  # ... and the stand-in saw one /api/ps per second
            final = value(ex.scrape(), "kvtop_server_polls_total", host=server.url)
            assert ex.stop() == 0
        time.sleep(0.2)  # the stand-in logs a request after answering it
        assert server.ps_polls() - final in (0, 1)  # the exporter's own count agrees with the server's


def test_the_log_gives_allocated_kv_tokens_per_second_and_counters(tmp_path: Path) -> None:
    scenario, blob = tiny_scenario(tmp_path)
    name = "tiny:latest"
    digest = load_scenario(scenario).models[name].digest
    log = tmp_path / "server.log"
    log.write_text(
        'time=2026-11-29T11:59:59.000Z level=INFO source=routes.go:1 msg="Listening on 127.0.0.1:11434 '
        '(version 0.30.1)"\n',
        encoding="utf-8",
    )
    argv, stderr = _runner("f16-fa-on-np1", blob)
    runner = ollama_spawn_line(argv) + "\n" + stderr
    parser = LogParser()
    timings = [e for line in runner.splitlines() for e in parser.feed(line)] + parser.flush()
    last = [e for e in timings if isinstance(e, RequestTiming)][-1]
    with running(["--manual", "--scenario", str(scenario)]) as server:
        host = server.url
        ids = {"host": host, "model": name, "digest": digest}
        with exporter(tmp_path, "--host", host, "--interval", "0.25", "--log", f"file:{log}") as ex:
            # the engine starts following the log after the first poll: wait for both states
            fams = ex.until(
                lambda f: (
                    bool(samples(f, "kvtop_model_memory_bytes", **ids, part="kv"))
                    and bool(samples(f, "kvtop_log_up", host=host, source=f"file:{log}"))
                )
            )
            assert value(fams, "kvtop_model_memory_bytes", **ids, part="kv", source="estimated") > 0
            assert value(fams, "kvtop_log_up", host=host, source=f"file:{log}") == 1
            assert samples(fams, "kvtop_model_reloads_total") == []

            with log.open("a", encoding="utf-8") as f:  # the runner starts
                f.write(runner)
            fams = ex.until(
                lambda f: (
                    bool(samples(f, "kvtop_model_memory_bytes", **ids, part="kv", source="allocated"))
                    and bool(samples(f, "kvtop_model_decode_tokens_per_second", **ids))
                )
            )
            assert value(fams, "kvtop_model_memory_bytes", **ids, part="kv", source="allocated") == 2 * 1048576
            assert value(fams, "kvtop_model_decode_tokens_per_second", **ids) == pytest.approx(last.eval_tps)
            assert value(fams, "kvtop_model_prefill_tokens_per_second", **ids) == pytest.approx(last.prompt_tps)
            info = samples(fams, "kvtop_model_info", **ids)[0].labels
            assert (info["flash_attention"], info["flash_attention_source"]) == ("enabled", "allocated")
            assert (info["kv_type"], info["kv_type_source"], info["blob"]) == ("f16", "allocated", blob)
            assert value(fams, "kvtop_model_reloads_total", host=host, blob=blob) == 0
            assert value(fams, "kvtop_prompt_truncations_total", host=host, blob=blob) == 0  # from the first load

            with log.open("a", encoding="utf-8") as f:  # a prompt is cut, then the same weights load again
                f.write(TRUNCATION + "\n" + runner)
            fams = ex.until(
                lambda f: (
                    bool(samples(f, "kvtop_model_reloads_total", host=host, blob=blob))
                    and value(f, "kvtop_model_reloads_total", host=host, blob=blob) == 1
                )
            )
            assert value(fams, "kvtop_prompt_truncations_total", host=host, blob=blob) == 1
            assert value(fams, "kvtop_log_lines_total", host=host) == len(log.read_text(encoding="utf-8").splitlines())
            assert ex.stop() == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--listen", "9877"], "--listen '9877': expected HOST:PORT"),
        (["--listen", "127.0.0.1:99999"], "the port must be a number 0–65535"),
        (["--host", "http://127.0.0.1:99999"], "--host:"),
        (["--log", "/var/log/ollama.log"], "for a file, write file:/var/log/ollama.log"),
        (["--interval", "0"], "must be a positive number of seconds"),
        (["--listen", "no-such-host.invalid:9877"], "cannot listen on no-such-host.invalid:9877"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    proc = subprocess.run(
        check=False,
        args=[sys.executable, "-m", "kvtop", "export", "prometheus", "--host", "127.0.0.1:1", *args],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=str(REPO),
        env=_env(tmp_path),
    )
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_port_in_use_exits_2(tmp_path: Path) -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    port = taken.getsockname()[1]
    try:
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "kvtop",
                "export",
                "prometheus",
                "--listen",
                f"127.0.0.1:{port}",
                "--host",
                "127.0.0.1:1",
            ],
            check=False,
            capture_output=True,
            text=True,
            timeout=30,
            cwd=str(REPO),
            env=_env(tmp_path),
        )
    finally:
        taken.close()
    assert proc.returncode == 2
    assert f"kvtop export: cannot listen on 127.0.0.1:{port}: Address already in use" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_ipv6_listen_in_brackets(tmp_path: Path) -> None:
    try:
        probe = socket.socket(socket.AF_INET6)
        probe.bind(("::1", 0))
        probe.close()
    except OSError:
        pytest.skip("no IPv6 loopback here")
    proc = subprocess.Popen(
        [sys.executable, "-m", "kvtop", "export", "prometheus", "--listen", "[::1]:0", "--host", "127.0.0.1:1"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=str(REPO),
        env=_env(tmp_path),
    )
    try:
        line = _read_line(proc.stderr, START_TIMEOUT_S)
        m = re.search(r"on (http://\[::1\]:\d+/metrics)", line)
        assert m, line
        body = httpx.get(m.group(1), timeout=5, trust_env=False).text
        fams = {f.name: f for f in text_string_to_metric_families(body)}
        assert value(fams, "kvtop_server_up", host="http://127.0.0.1:1") == 0  # nothing listens on port 1
    finally:
        proc.send_signal(signal.SIGHUP)  # a closed terminal stops it cleanly too
        _, err = proc.communicate(timeout=10)
    assert proc.returncode == 0, err
