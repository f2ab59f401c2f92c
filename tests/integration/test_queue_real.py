"""The queue on a real server: the stand-in Ollama server as a process on 127.0.0.1, another process
that holds three connections open to it (a client's keep-alive pool), and ``kvtop --once --json``:
the three are in flight, kvtop's own connections are counted apart, and nothing waits while no
model is loaded (a request for a model starts its load)."""

from __future__ import annotations

import json
import subprocess
import sys
from urllib.parse import urlsplit

from tests.standin import running

HOLD = """
import socket, sys, time
port = int(sys.argv[1])
held = [socket.create_connection(("127.0.0.1", port)) for _ in range(3)]
print("held", flush=True)
time.sleep(60)
"""


def test_connections_of_another_process_are_in_flight_and_kvtops_own_are_left_out() -> None:
    with running(["--manual"]) as server:
        port = urlsplit(server.url).port
        holder = subprocess.Popen([sys.executable, "-c", HOLD, str(port)], stdout=subprocess.PIPE, text=True)
        try:
            assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
            out = subprocess.run(
                [sys.executable, "-m", "kvtop", "--once", "--json", "--host", server.url, "--log", "none"],
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert out.returncode == 0, out.stderr
            queue = json.loads(out.stdout)["queue"]
            assert queue["port"] == port and queue["in_flight"] == 3
            assert queue["clients"] == [{"address": "127.0.0.1", "connections": 3}]
            # --once's own requests are left out (by socket inode, tests/unit/test_queue.py); to a server on
            # this machine kvtop keeps no idle connection, so by the time it reads the table they are closed
            assert queue["waiting"] == 0 and queue["source"] == "estimated" and queue["error"] is None
        finally:
            holder.kill()
            holder.wait(timeout=10)


def test_another_kvtop_polling_the_server_leaves_no_connection_in_flight() -> None:
    """A second kvtop (``--stream``, polling every second) keeps no idle keep-alive connection to a
    server on this machine, so the queue that another kvtop reads is not raised by its polls: of three
    reads at least one sees nothing in flight (a read during one of its ~10 ms polls would see one).
    Before, its pooled connection stayed established and every read counted it."""
    with running(["--manual"]) as server:
        stream = subprocess.Popen(
            [sys.executable, "-m", "kvtop", "--stream", "--host", server.url, "--log", "none", "--interval", "1"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        try:
            assert stream.stdout is not None
            for _ in range(2):  # it has polled twice: its connection would be pooled by now
                assert stream.stdout.readline()
            seen = []
            for _ in range(3):
                out = subprocess.run(
                    [sys.executable, "-m", "kvtop", "--once", "--json", "--host", server.url, "--log", "none"],
                    capture_output=True,
                    text=True,
                    timeout=60,
                )
                assert out.returncode == 0, out.stderr
                seen.append(json.loads(out.stdout)["queue"]["in_flight"])
            assert min(seen) == 0, seen
        finally:
            stream.kill()
            stream.wait(timeout=10)
