"""The queue under real traffic (issue 27 §1): the stand-in Ollama server as a process with
qwen3:1.7b-q8_0 loaded (one slot, as its runner is started) and writing its server log, and three
clients that send slow ``POST /api/generate`` requests at once. The stand-in serves one at a time in
the runner's slot and keeps the other two waiting with their connections open (``kvtop.demo.standin_serve``,
writing llama-server's slot lines to the log), as Ollama's scheduler keeps a request pending until a
slot is free. Every face then says the same: 3 in flight, the slot busy 1/1, 2 waiting (estimated),
and, past the threshold, the ``queue_wait`` alert with its fixes (3 slots at the KV they cost).

The dashboard (the real engine, its connections source reading this machine's ``/proc/net/tcp``),
``kvtop --once --json`` and ``kvtop export textfile --once`` (the metrics) each read the same server.
Nothing here waits for a duration: each check waits for the state it needs.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from kvtop.config import Settings
from kvtop.ui.app import make_app
from kvtop.ui.widgets.header import ServerHeader
from tests.integration.test_app_live import until
from tests.standin import BUNDLED, REPO, running

MODEL = "qwen3:1.7b-q8_0"
KV_BYTES = 448 * 2**20  # its KV cache at num_ctx 4096, f16 (the stand-in's log: 448.00 MiB)
HOLD_TOKENS = 92_400  # ~1,000 s at the model's 92.4 tok/s: held until the test ends (the stand-in caps at 600 s)


def _scenario(tmp_path: Path) -> Path:
    data = json.loads(BUNDLED.read_text(encoding="utf-8"))
    row = next(r for step in data["steps"] for r in step["loaded"] if r["model"] == MODEL)
    data["steps"] = [
        {
            "at_s": 0,
            "label": "q8 at 4096, no scripted requests",
            "loaded": [dict(row, context_length=4096, size_vram=row["size"], expires_in_s=3600)],
            "log": {"requests": False},
        }
    ]
    path = tmp_path / "scenario.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


CLIENTS = """
import json, sys, threading, urllib.request
url, model, tokens = sys.argv[1], sys.argv[2], int(sys.argv[3])
body = json.dumps({"model": model, "prompt": "Why is the sky blue? " * 8, "stream": False,
                   "options": {"num_predict": tokens}}).encode()
def send():
    request = urllib.request.Request(url + "/api/generate", data=body, headers={"Content-Type": "application/json"})
    try:
        urllib.request.urlopen(request, timeout=900).read()
        print("answered", flush=True)
    except OSError as exc:
        print("failed", exc, flush=True)
threads = [threading.Thread(target=send) for _ in range(3)]
for t in threads:
    t.start()
print("sent", flush=True)
for t in threads:
    t.join()
"""
"""Three clients in another process (kvtop leaves its own process's connections out of the queue)."""


@contextmanager
def _slow_clients(url: str) -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen(
        [sys.executable, "-c", CLIENTS, url, MODEL, str(HOLD_TOKENS)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "sent"
        yield proc
    finally:
        proc.kill()
        proc.wait(timeout=10)


def _kvtop(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kvtop", *args], capture_output=True, text=True, timeout=60, cwd=str(REPO)
    )


async def test_three_slow_requests_on_one_slot_two_wait_on_every_face(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    with running(["--manual", "--scenario", str(_scenario(tmp_path)), "--log-file", str(log)]) as server:
        settings = Settings(
            host_url=server.url, interval_s=0.25, timeout_s=2.0, log_spec=f"file:{log}", alerts={"queue_wait": "1s"}
        )
        app = make_app(settings)  # this machine's sources, the connections to the API port among them
        with _slow_clients(server.url) as clients:
            async with app.run_test(size=(160, 48)) as pilot:

                def waiting() -> bool:
                    q = app.state.queue
                    alerts = [a for a in app.state.alerts if a.kind == "queue_wait"]
                    return q is not None and q.waiting == 2 and q.in_flight == 3 and bool(alerts)

                try:
                    await until(pilot, waiting, timeout_s=60)
                except AssertionError as exc:
                    alerts = [a.kind for a in app.state.alerts]
                    raise AssertionError(f"{exc}: queue {app.state.queue}, alerts {alerts}") from None
                q = app.state.queue
                assert q is not None
                assert (q.in_flight, q.busy_slots, q.total_slots, q.waiting) == (3, 1, 1, 2)
                assert q.full_models == (MODEL,) and q.clients == (("127.0.0.1", 3),) and q.source == "estimated"
                assert q.oldest_wait_s is not None and q.oldest_wait_s >= 1.0
                view = app.state.models[0]
                assert view.slots is not None and (view.slots.busy, view.slots.total) == (1, 1)
                alert = next(a for a in app.state.alerts if a.kind == "queue_wait")
                assert alert.model == MODEL
                assert alert.message.startswith("2 requests waiting for a slot, the oldest ")
                assert f"every slot of {MODEL} is busy (1/1 slots busy)" in alert.message
                assert "(estimated: 3 connections to port" in alert.message
                parallel, max_queue = alert.fixes
                # 3 slots: each holds num_ctx cells of KV, so the KV triples (+896 MiB)
                assert parallel.action == "OLLAMA_NUM_PARALLEL=3"
                assert parallel.detail.startswith("KV ~1.3 GiB (~+896 MiB)")
                assert max_queue.action == "OLLAMA_MAX_QUEUE=2"
                header = app.query_one(ServerHeader).render().plain
                assert "queue 2~ waiting (oldest" in header

            # the text and JSON faces, and the metrics, read the same server while the two still wait
            out = _kvtop("--once", "--json", "--host", server.url, "--log", f"file:{log}")
            assert out.returncode == 0, out.stderr
            queue = json.loads(out.stdout)["queue"]
            assert {k: queue[k] for k in ("in_flight", "busy_slots", "total_slots", "waiting")} == {
                "in_flight": 3,
                "busy_slots": 1,
                "total_slots": 1,
                "waiting": 2,
            }
            assert queue["full_models"] == [MODEL] and queue["oldest_wait_s"] is None  # one read: no age
            text = _kvtop("--once", "--host", server.url, "--log", f"file:{log}")
            line = next(ln for ln in text.stdout.splitlines() if ln.startswith("QUEUE "))
            assert line == f"QUEUE in flight 3~ · waiting 2~ · slots busy 1/1 · full: {MODEL} · clients 127.0.0.1 ×3"
            prom = tmp_path / "kvtop.prom"
            exported = _kvtop("export", "textfile", str(prom), "--once", "--host", server.url, "--log", f"file:{log}")
            assert exported.returncode == 0, exported.stderr
            metrics = prom.read_text(encoding="utf-8").splitlines()
            assert f'kvtop_requests_in_flight{{host="{server.url}"}} 3.0' in metrics
            assert f'kvtop_requests_waiting{{host="{server.url}"}} 2.0' in metrics
            busy = next(m for m in metrics if m.startswith("kvtop_model_slots_busy{"))
            assert f'model="{MODEL}"' in busy and 'source="estimated"' in busy and busy.endswith("} 1.0")
            assert clients.poll() is None  # all three still open: the first in the slot, two waiting
