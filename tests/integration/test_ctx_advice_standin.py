"""What num_ctx the traffic needs (issue 27 §5), through the real engine and every face: the stand-in server
process with qwen3:1.7b-q8_0 loaded at num_ctx 4096 on a 5 GiB GPU, and a log with known prompt sizes.

The log: corpus 004's ``starting llama server`` line for the model's blob (``spawn_line``: --ctx-size 4096,
--parallel 1), then 40 requests written as the real llama-server run ``tests/fixtures/llama_server/q8_0-fa-on-np2``
logs one (its ``new prompt`` and ``print_timing`` lines, with the task id and token counts changed: lines built
from the real lines' format, docs/ollama-internals.md §4.10) of 100, 200 … 4,000 prompt tokens and 50 generated
each, and one refusal of a 6,000-token prompt (``reject-over-context-ctx256``'s ``send_error`` line, counts
changed). So the 41 sizes are 150 … 4,050 and 6,000: nearest-rank p50 the 21st (2,150), p95 the 39th (3,950),
p99 the 41st (6,000) → num_ctx 6144 (a multiple of 1024), f16, 1 slot, which holds the refused prompt.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from kvtop.model import kv
from kvtop.model.ctx_advice import CtxAdvice, advice_for, advice_line
from kvtop.demo.scenario_file import load_scenario
from kvtop.ui.screens.plan import PlanScreen
from tests.integration.test_app_live import until
from tests.integration.test_scenarios import Q8, VRAM, app_for, scenario
from tests.standin import REPO, running
from tests.unit.test_alerts import spawn_line
from tests.unit.test_ctx_advice import reject_line, request_lines

PROMPTS = [100 * (i + 1) for i in range(40)]
GENERATED = 50
EXPECTED_TOKENS = {"p50": 2150, "p95": 3950, "p99": 6000, "max": 6000}


def traffic(blob: str) -> list[str]:
    lines = [spawn_line(blob, 4096)]
    for i, prompt in enumerate(PROMPTS):
        lines.extend(request_lines(10 + i, prompt, GENERATED))
    lines.append(reject_line(6000, 4096))
    return lines


def kvtop(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kvtop", *args], capture_output=True, text=True, timeout=60, cwd=str(REPO)
    )


def check_advice(a: CtxAdvice, bpt: int) -> None:
    d = a.distribution
    assert d is not None
    assert {"p50": d.p50, "p95": d.p95, "p99": d.p99, "max": d.max} == EXPECTED_TOKENS and d.requests == 41
    r = a.recommendation
    assert r is not None
    assert (r.config.num_ctx, r.config.cache_type, r.config.parallel) == (6144, "f16", 1)
    assert (r.kv_bytes, r.kv_bytes_now) == (6144 * bpt, 4096 * bpt) == (704_643_072, 469_762_048)
    assert r.cuts_avoided == 1 and len(a.cuts) == 1


async def test_the_traffic_s_num_ctx_on_every_face(tmp_path: Path) -> None:
    path, blob = scenario(tmp_path)
    layout = kv.layout_from_model_info(load_scenario(path).models[Q8].model_info)
    assert isinstance(layout, kv.KVLayout)
    bpt = kv.bytes_per_token(layout, "f16", "f16")
    log = tmp_path / "server.log"
    log.write_text("".join(line + "\n" for line in traffic(blob)), encoding="utf-8")
    with running(["--manual", "--scenario", str(path), "--vram-bytes", str(VRAM)]) as server:
        app = app_for(server, log, blob)
        async with app.run_test(size=(160, 48)) as pilot:

            def advised() -> bool:
                if len(app.state.models) != 1 or app.state.gpu is None:
                    return False
                a = advice_for(app.state, app.state.models[0])
                return a is not None and a.recommendation is not None and a.recommendation.verdict is not None

            await until(pilot, advised)
            v = app.state.models[0]
            a = advice_for(app.state, v)
            assert a is not None and a.recommendation is not None
            check_advice(a, bpt)
            assert a.num_ctx_now == 4096 and a.recommendation.verdict == "fits"
            assert a.recommendation.vram_delta_bytes is not None and a.recommendation.vram_delta_bytes > 234_881_024 - 1
            screen = PlanScreen(v.name, v.digest)
            app.push_screen(screen)
            await until(pilot, lambda: screen.is_mounted and screen.advice is not None and screen.spec is not None)
            text = screen.body_text().plain
            assert f"The traffic needs (from the log): {advice_line(screen.advice)}" in text  # type: ignore[arg-type]
            assert "→ num_ctx 6144 (multiple of 1024) × f16 × 1 slot" in text
            assert server.writes() == []  # nothing applied

        once = kvtop("--once", "--json", "--host", server.url, "--log", f"file:{log}")
        assert once.returncode == 0, once.stderr
        (model,) = json.loads(once.stdout)["models"]
        doc = model["ctx_advice"]
        assert doc["request_tokens"] == EXPECTED_TOKENS and doc["requests"] == 41
        rec = doc["recommendation"]
        assert (rec["num_ctx"], rec["kv_type"], rec["parallel"], rec["kv_bytes"], rec["cuts_avoided"]) == (
            6144,
            "f16",
            1,
            704_643_072,
            1,
        )
        assert (rec["modelfile"], rec["env"], rec["applied"]) == (
            "PARAMETER num_ctx 6144",
            "OLLAMA_CONTEXT_LENGTH=6144",
            False,
        )
        text = kvtop("--once", "--host", server.url, "--log", f"file:{log}")
        assert text.returncode == 0, text.stderr
        (line,) = [x for x in text.stdout.splitlines() if x.startswith("NUM_CTX ")]
        assert line.startswith(
            f"NUM_CTX {Q8}: 41 requests, tokens p50 2,150 · p95 3,950 · p99 6,000 · max 6,000; "
            "1 cut or refused → num_ctx 6144 (multiple of 1024) × f16 × 1 slot: KV ~672 MiB, costs ~"
        )

        planned = kvtop("plan", Q8, "--host", server.url, "--log", str(log), "--json")
        assert planned.returncode == 0, planned.stderr
        pdoc = json.loads(planned.stdout)["ctx_advice"]
        assert pdoc["request_tokens"] == EXPECTED_TOKENS
        assert (pdoc["recommendation"]["num_ctx"], pdoc["recommendation"]["kv_bytes"]) == (6144, 704_643_072)
        plain = kvtop("plan", Q8, "--host", server.url, "--log", str(log))
        assert plain.returncode == 0, plain.stderr
        assert "What num_ctx the traffic needs (--log):" in plain.stdout
        assert "  Modelfile PARAMETER num_ctx 6144" in plain.stdout
        assert "  server    OLLAMA_CONTEXT_LENGTH=6144" in plain.stdout
        assert server.writes() == []
