"""One vocabulary of marks and units: the same figure reads the same everywhere.

qwen3:1.7b-q8_0 at num_ctx 32768 in the bundled scenario has an estimated KV cache of
3,758,096,384 B (28 layers × 8 KV heads × 256 × 2 B × 32768, kvtop's arithmetic: no log). It is
``~3.5G`` in the dense table (the short form of the same binary unit) and ``~3.5 GiB`` in the
detail view (with its exact bytes), the what-if screen, ``kvtop plan`` and ``--once``; its source
is ``estimated`` in ``--once --json``. ``*`` means an Ollama default everywhere (``plan`` marks a
num_ctx lowered to the training context with ``↓``), and every legend explains ``?``.
"""

from __future__ import annotations

import json
import subprocess
import sys

from textual.widgets import Static

from kvtop.model.known import CLAMPED_MARK, SOURCE_LEGEND, SOURCE_MARK, Known, exact_bytes, ibytes, size_text
from kvtop.ui.format import legend
from kvtop.ui.screens.model_detail import ModelDetailScreen
from kvtop.ui.widgets.models_table import ModelsTable
from tests.standin import BUNDLED, REPO, running
from tests.ui.fakes import snapshot_at, step_index
from tests.ui.screen_text import screen_lines
from tests.ui.test_app import app_with, rows, wait_for
from tests.ui.test_plan_screen import app_at, body, open_plan

KV = 3_758_096_384
SHORT, LONG, EXACT = "~3.5G", "~3.5 GiB", "~3.5 GiB (3,758,096,384 B)"
STEP = "raised to 32768"


def kvtop(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kvtop", *args], capture_output=True, text=True, timeout=60, cwd=str(REPO)
    )


def test_the_vocabulary_is_defined_once() -> None:
    k = Known(KV, "estimated")
    assert (size_text(k, short=True), size_text(k), size_text(k, exact=True)) == (SHORT, LONG, EXACT)
    assert exact_bytes(KV) == "3.5 GiB (3,758,096,384 B)" and ibytes(None) == "?"
    # the short form is the long one without the space and "iB": the same binary unit
    for n in (512, 448 * 2**20, 85 * 2**20 + 2**19, KV, 12 * 2**30, 2**40):
        short, long = ibytes(n, short=True), ibytes(n)
        number, unit = long.split()
        assert abs(float(short[:-1]) - float(number)) < 1 and short[-1] == unit[0], (short, long)
    assert SOURCE_MARK["default"] == "*" and CLAMPED_MARK not in SOURCE_MARK.values()
    assert SOURCE_LEGEND.endswith("? not known")


async def test_table_and_detail() -> None:
    app = app_with(snapshot_at(step_index(STEP)))
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.query_one(ModelsTable).row_count == 1)
        assert f"KV {SHORT}" in rows(app)[0][2]  # MEMORY w|KV|c
        assert "4096" not in rows(app)[0][3] and rows(app)[0][3] == "32768×1*"  # * = Ollama default (slots)
        status = next(line for line in screen_lines(app) if line.lstrip().startswith("sort:"))
        assert "* default" in status and "? not known" in status and "…" not in status
        app.query_one(ModelsTable).focus()
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, ModelDetailScreen))
        detail = str(app.screen.query_one("#detail-body", Static).content)
    assert f"KV cache            {EXACT}  [estimated]" in detail
    app = app_with(snapshot_at(step_index(STEP)))
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_for(pilot, lambda: app.query_one(ModelsTable).row_count == 1)
        assert rows(app)[0][3].endswith(f"KV {SHORT} C ~141M")
        assert legend(app.state.models) == "~ estimated  * Ollama default  ? not known"


async def test_what_if() -> None:
    app = app_at(STEP)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_plan(pilot)
        text = body(screen)
    assert f"KV cache    {LONG}\n" in text and "exact" not in text
    assert "total       ~5.7 GiB" in text  # weights (reported) + KV (estimated) + compute (estimated)


def test_plan_and_once() -> None:
    with running(["--manual", "--scenario", str(BUNDLED)]) as server:
        server.goto(step_index(STEP))
        planned = kvtop("plan", "qwen3:1.7b-q8_0", "--ctx", "32768", "--ctx", "65536", "--host", server.url)
        once = kvtop("--once", "--host", server.url)
        as_json = kvtop("--once", "--json", "--host", server.url)
    assert planned.returncode == 0, planned.stderr
    (row,) = [line for line in planned.stdout.splitlines() if line.strip().startswith("32768 ")]
    assert f"  {LONG}  " in row and "3584" not in row
    (clamped,) = [line for line in planned.stdout.splitlines() if line.strip().startswith("40960")]
    assert clamped.strip().startswith(f"40960{CLAMPED_MARK}") and "40960*" not in planned.stdout
    assert f"  {CLAMPED_MARK}         num_ctx lowered to the training context" in planned.stdout
    assert (
        "sizes binary: G/GiB = 2^30 B" in planned.stdout and "MiB (1 MiB" not in planned.stdout
    )  # model.known.UNITS_NOTE
    assert once.returncode == 0, once.stderr
    (line,) = [x for x in once.stdout.splitlines() if x.startswith("qwen3:1.7b-q8_0")]
    assert f"  {LONG}  " in line and "32768×1*" in line and "f16*" in line
    assert SOURCE_LEGEND in once.stdout
    (model,) = json.loads(as_json.stdout)["models"]
    assert model["memory"]["kv"] == KV and model["sources"]["kv"] == "estimated"


def test_inspect_log_writes_sizes_the_same_way() -> None:
    done = kvtop(
        "inspect-log", str(REPO / "tests" / "fixtures" / "logs" / "002-kv-partial-offload-cuda-host-fa1-0.3.log")
    )
    assert done.returncode == 0, done.stderr
    assert "KV cache         CUDA_Host 384 MiB (402,653,184 B); CUDA0 6.6 GiB (7,113,539,584 B)" in done.stdout
    assert "KV total         7.0 GiB (7,516,192,768 B)" in done.stdout  # allocated: no mark
