"""A 1,000,000-line burst of log noise appended to a real file as fast as a writer process can,
with an OOM line and a whole model load (real corpus lines) inside it, followed by the real app
(Pilot, stand-in server): the noise is shed, but the OOM alert is raised, the load is parsed, and
the status line shows how many lines were dropped. Every line is accounted for: lines delivered
plus lines dropped equals lines written.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from datetime import datetime, timezone
from pathlib import Path

from kvtop.config import Settings
from kvtop.ui.app import make_app
from tests.integration.test_app_live import until
from tests.standin import running, tiny_scenario

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"
LOAD_LOG = LOGS / "llama-server-runs" / "gemma3-iswa-q8_0-fa-on-np2.log"
LOAD_BLOB = "sha256-54e93e7aded92774254cafb64e3fb47db070ee62bee3fdb786ac7615dd7f4849"
OOM_LOG = LOGS / "031-oom-model-request-too-large-for-system-systemctl-truncated.log"

BURST_LINES = 1_000_000

WRITER = textwrap.dedent("""
    import sys
    path, oom_at, load_at, total = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    oom = sys.stdin.readline().encode()
    load = sys.stdin.read().encode()
    noise = (
        b'[GIN] 2026/11/29 - 12:00:00 | 200 |  1.234567ms |       127.0.0.1 | POST     "/api/chat"\\n',
        b'time=2026-11-29T12:00:00.000Z level=DEBUG source=sched.go:606 msg="context for request finished" runner.size="1.0 GiB"\\n',
        b'slot update_slots: id  0 | task 42 | kv cache rm [1, end)\\n',
        b'srv  log_server_r: request: POST /completion 127.0.0.1 200\\n',
    )
    with open(path, "ab", buffering=0) as f:
        written = 0
        chunk = []
        for i in range(total):
            if i == oom_at:
                chunk.append(oom)
            if i == load_at:
                chunk.append(load)
            chunk.append(noise[i & 3])
            if len(chunk) >= 5000:
                f.write(b"".join(chunk))
                chunk = []
        f.write(b"".join(chunk))
""")


def _oom_line() -> str:
    """Corpus 031's real OOM line (collector prefix dropped), stamped now so the alert is current."""
    raw = next(x for x in OOM_LOG.read_text(encoding="utf-8").splitlines() if "model request too large" in x)
    body = raw[raw.index("time=") :].rstrip(">")
    now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.000Z")
    return "time=" + now + body[body.index(" ") :]


async def test_oom_and_load_inside_a_million_line_burst_are_not_shed(tmp_path: Path) -> None:
    scenario, _ = tiny_scenario(tmp_path)
    log = tmp_path / "server.log"
    log.write_text(
        'time=2026-11-29T11:59:59.000Z level=INFO source=routes.go:1 msg="Listening on 127.0.0.1:11434 (version 0.30.1)"\n',
        encoding="utf-8",
    )
    load_lines = [x for x in LOAD_LOG.read_text(encoding="utf-8").splitlines() if not x.startswith("#")]
    oom = _oom_line()
    with running(["--manual", "--scenario", str(scenario)]) as server:
        app = make_app(Settings(host_url=server.url, interval_s=0.25, timeout_s=1.0, log_spec=f"file:{log}"))
        async with app.run_test(size=(200, 40)) as pilot:
            await until(pilot, lambda: app.state.log.lines == 1)
            writer = subprocess.run(
                [sys.executable, "-c", WRITER, str(log), "300000", "600000", str(BURST_LINES)],
                input=oom + "\n" + "\n".join(load_lines) + "\n",
                text=True,
                timeout=120,
                check=True,
            )
            assert writer.returncode == 0
            total = 1 + BURST_LINES + 1 + len(load_lines)
            await until(pilot, lambda: app.state.log.lines + app.state.log.dropped_lines == total, timeout_s=90)
            log_state = app.state.log
            assert log_state.dropped_lines > BURST_LINES // 2  # the burst did outrun the reader: most noise was shed
            # The OOM line inside the shed part was kept: it is an alert.
            await until(pilot, lambda: any(a.kind == "oom" for a in app.state.alerts))
            oom_alert = next(a for a in app.state.alerts if a.kind == "oom")
            assert "model request too large for system" in oom_alert.message
            # The whole load inside the shed part was kept: it is parsed with its figures.
            load = next(ld for ld in log_state.loads if ld.model_blob == LOAD_BLOB)
            assert (load.num_ctx_total, load.parallel, load.kv_type_k, load.flash_attention) == (
                8192,
                2,
                "q8_0",
                "enabled",
            )
            assert load.kv_bytes == 2160067
            # The status line says how many lines were dropped.
            await until(
                pilot,
                lambda: f"{app.state.log.dropped_lines:,} dropped" in str(app.dashboard.query_one("#logline").render()),
            )
            await pilot.press("q")
