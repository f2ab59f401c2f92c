"""The dashboard with a server log: the stand-in's /api/ps row is matched to the runner's load
in a real file being appended, and the log's allocated numbers replace kvtop's estimates.

The log lines are real llama-server stderr (tests/fixtures/llama_server, captured by
test_llama_server.py with Ollama's v0.30+ flags) behind Ollama's own "starting llama-server" line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kvtop.config import Settings
from kvtop.ui.app import make_app
from kvtop.ui.widgets.events_pane import EventsPane
from tests.integration.test_app_live import rows, until
from tests.llama_fixture import ollama_spawn_line
from tests.standin import running, tiny_scenario

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "llama_server"


def _runner(name: str, blob: str) -> tuple[list[str], str]:
    """A captured llama-server run as if Ollama had started it for the model file ``blob``:
    its command line and its stderr, with the captured blob path replaced everywhere."""
    argv = (FIXTURES / f"{name}.cmd").read_text(encoding="utf-8").split()
    old = next(a for a in argv if "blobs/sha256-" in a)
    new = f"/usr/share/ollama/.ollama/models/blobs/{blob}"
    stderr = (FIXTURES / f"{name}.log").read_text(encoding="utf-8").replace(old, new)
    return [new if a == old else a for a in argv], stderr


async def test_log_allocations_replace_estimates(tmp_path: Path) -> None:
    scenario, blob = tiny_scenario(tmp_path)
    log = tmp_path / "server.log"
    log.write_text(
        'time=2026-11-29T11:59:59.000Z level=INFO source=routes.go:1 msg="Listening on 127.0.0.1:11434 (version 0.30.1)"\n',
        encoding="utf-8",
    )
    argv, stderr = _runner("f16-fa-on-np1", blob)

    with running(["--manual", "--scenario", str(scenario)]) as server:
        app = make_app(Settings(host_url=server.url, interval_s=0.25, timeout_s=1.0, log_spec=f"file:{log}"))
        async with app.run_test(size=(160, 40)) as pilot:
            await until(pilot, lambda: len(rows(app)) == 1 and "KV ~" in rows(app)[0][3])
            before = rows(app)[0]
            assert before[4] == "2048×1*" and before[7] == "f16*" and before[6] == "?"
            assert app.state.models[0].memory.kv.source == "estimated"

            with log.open("a", encoding="utf-8") as f:  # the runner starts: Ollama logs it, then llama-server's stderr
                f.write(ollama_spawn_line(argv) + "\n")
                f.write(stderr)
            await until(pilot, lambda: app.state.models[0].memory.kv.source == "allocated")
            v = app.state.models[0]
            assert v.memory.kv.value == 2 * 1048576  # llama_kv_cache: size = 2.00 MiB
            assert v.kv_estimate is not None and v.kv_estimate.total_bytes == v.memory.kv.value  # formula agrees
            assert v.flash_attention.value == "enabled" and v.flash_attention.source == "allocated"
            assert v.kv_type.value == "f16" and v.kv_type.source == "allocated"
            assert v.parallel.value == 1 and v.parallel.source == "allocated"
            assert v.memory.weights.source == "allocated" and v.memory.compute.source == "allocated"
            assert set(v.devices["kv"]) == {"CPU"}
            await until(
                pilot,
                lambda: app.state.models[0].throughput is not None and app.state.models[0].throughput.requests == 2,
            )
            t = app.state.models[0].throughput
            assert t.last_decode_tps and t.last_decode_tps > 0 and t.avg_decode_tps and t.last_prefill_tps
            await until(pilot, lambda: rows(app)[0][8] == f"{t.last_decode_tps:,.1f}")  # TOK/S column
            await until(pilot, lambda: rows(app)[0][4] == "2048×1" and rows(app)[0][7] == "f16")
            assert " KV 2.0M " in rows(app)[0][3]  # no "~": allocated, not estimated
            assert "Server log: file:" in str(app.dashboard.query_one("#logline").render())

            pane = app.dashboard.query_one(EventsPane)  # at 160x40 it takes the rows the table leaves, unasked
            await until(pilot, lambda: pane.has_class("-visible") and pane.row_count > 3)
            kinds = [str(pane.get_row_at(i)[1]) for i in range(pane.row_count)]
            assert "request_timing" in kinds and "allocation" in kinds and "runner_started" in kinds
            await pilot.press("r")
            await until(
                pilot, lambda: any("llama_kv_cache" in str(pane.get_row_at(i)[2]) for i in range(pane.row_count))
            )
            await pilot.press("q")


async def test_a_load_with_another_context_is_not_used(tmp_path: Any) -> None:
    scenario, blob = tiny_scenario(tmp_path)
    log = tmp_path / "server.log"
    argv, stderr = _runner("q4_0-fa-auto-np1", blob)  # -c 8192
    log.write_text(ollama_spawn_line(argv) + "\n" + stderr, encoding="utf-8")
    with running(["--manual", "--scenario", str(scenario)]) as server:
        app = make_app(Settings(host_url=server.url, interval_s=0.25, timeout_s=1.0, log_spec=f"file:{log}"))
        async with app.run_test(size=(160, 40)) as pilot:
            await until(
                pilot, lambda: len(app.state.log.loads) == 1 and len(rows(app)) == 1 and "KV ~" in rows(app)[0][3]
            )
            v = app.state.models[0]
            assert v.load is None and "num_ctx 8192, /api/ps says 2048" in v.load_note
            assert v.memory.kv.source == "estimated"
