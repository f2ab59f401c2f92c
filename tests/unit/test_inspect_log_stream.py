"""``kvtop inspect-log`` streams: the same report as the in-memory document,
memory that does not grow with the lines, bounded lists with their counts stated.

Real corpus lines (``tests/fixtures/logs``) written to real files; ``main_inspect_log`` run as the
CLI runs it. The in-memory path (``inspect_lines`` + ``safe_json`` / ``render_report``) is the
reference: it is the document the corpus oracles check, with each load's ``placement`` added
(``inspect_document``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest

from kvtop.inspect_log import (
    MAX_LINE_BYTES,
    MAX_SERVER_EVENTS,
    _inspect,
    _lines,
    inspect_document,
    main_inspect_log,
    render_report,
)
from kvtop.logparse.load_stream import MAX_FINDING_EVENTS, MAX_LOAD_REQUESTS
from kvtop.textsafe import safe_block, safe_json

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"
ALL_LOGS = sorted(LOGS.rglob("*.log"))


def _corpus_lines() -> list[bytes]:
    lines: list[bytes] = []
    for path in sorted(LOGS.glob("*.log")):
        lines.extend(path.read_bytes().rstrip(b"\n").split(b"\n"))
    return [line + b"\n" for line in lines]


def _log(path: Path, n_lines: int) -> Path:
    """The corpus' lines repeated up to ``n_lines``."""
    lines = _corpus_lines()
    with path.open("wb") as f:
        f.writelines(lines[i % len(lines)] for i in range(n_lines))
    return path


def _reference(path: Path) -> tuple[str, str]:
    """JSON and text of the in-memory document (the old path)."""
    with path.open("rb") as f:
        lines = list(_lines(f))
    doc = inspect_document(lines)
    return safe_json(doc) + "\n", safe_block(render_report(doc, source=str(path), lines=len(lines)))


def _cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert main_inspect_log(args) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("path", ALL_LOGS, ids=lambda p: p.stem[:20])
def test_every_corpus_log_streams_to_the_same_report(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    json_ref, text_ref = _reference(path)
    assert _cli([str(path), "--json"], capsys) == json_ref
    assert _cli([str(path)], capsys) == text_ref


def test_a_multi_mib_log_gives_the_same_document_and_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _log(tmp_path / "big.log", 40_000)  # the corpus about 95 times: ~1,300 loads, 4.5 MiB
    assert path.stat().st_size > 4 * 2**20
    json_ref, text_ref = _reference(path)
    out = _cli([str(path), "--json"], capsys)
    assert out == json_ref
    doc = json.loads(out)
    assert len(doc["loads"]) > 1000 and [load["index"] for load in doc["loads"]] == list(range(len(doc["loads"])))
    text = _cli([str(path)], capsys)
    assert text == text_ref
    assert f"40,000 lines, {len(doc['loads'])} model load(s), {len(doc['events'])} event(s)" in text
    unattached = [e for e in doc["events"] if e["load"] is None]
    assert len(unattached) > MAX_SERVER_EVENTS
    from kvtop.inspect_log import ALWAYS_SHOWN_KINDS

    cut: dict[str, int] = {}
    for e in unattached[MAX_SERVER_EVENTS:]:
        if e["kind"] not in ALWAYS_SHOWN_KINDS:
            cut[e["kind"]] = cut.get(e["kind"], 0) + 1
    kinds = ", ".join(f"{k} {n:,}" for k, n in sorted(cut.items(), key=lambda kv: -kv[1]))
    assert f"  … {sum(cut.values()):,} more: {kinds} (--json lists all)\n" in text


def _peak_bytes(path: Path) -> int:
    tracemalloc.start()
    try:
        with path.open("rb") as f, _inspect(f) as result:
            result.write_report(lambda text: None, source="x")
            result.write_json(lambda text: None)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_memory_does_not_grow_with_the_lines(tmp_path: Path) -> None:
    """10k and 100k lines (about 130 and 1,300 loads): the peak is the same within 256 KiB."""
    small = _peak_bytes(_log(tmp_path / "10k.log", 10_000))
    large = _peak_bytes(_log(tmp_path / "100k.log", 100_000))
    assert large < small + 256 * 1024, f"peak {small / 2**20:.2f} MiB for 10k lines, {large / 2**20:.2f} MiB for 100k"
    assert large < 2 * 2**20


def test_an_endless_line_is_read_up_to_the_limit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "endless.log"
    lines = _corpus_lines()
    with path.open("wb") as f:
        f.writelines(lines[:50])
        f.write(b"x" * (32 * 2**20) + b"\n")  # 32 MiB without a newline before its end
        f.writelines(lines[50:120])
    tracemalloc.start()
    try:
        with path.open("rb") as f, _inspect(f) as result:
            lines_read = result.lines
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert lines_read == 121  # the long line counts once
    assert peak < 6 * MAX_LINE_BYTES, f"peak {peak / 2**20:.1f} MiB"  # a few copies of its first MiB
    out = _cli([str(path)], capsys)
    assert out.startswith(f"kvtop inspect-log: {path}\n  121 lines, ")


def test_a_load_with_thousands_of_incidents_keeps_the_first_and_counts_the_rest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A real load (corpus 001), then OOM lines each after a truncation (so each is an incident of its own)."""
    load = (LOGS / "001-multigpu-4x-partial-offload-fa-kvtype-unsupported-0.5.log").read_bytes()
    trunc = (LOGS / "014-truncating-input-prompt-embeddings-0.6.log").read_bytes().splitlines(keepends=True)[2]
    assert b"truncating input prompt" in trunc
    path = tmp_path / "many.log"
    with path.open("wb") as f:
        f.write(load)
        for _ in range(MAX_FINDING_EVENTS + 30):
            f.write(b"CUDA error: out of memory\n")
            f.write(trunc)
    doc = json.loads(_cli([str(path), "--json"], capsys))
    (only,) = doc["loads"]
    ooms = [e for e in doc["events"] if e["kind"] == "oom"]
    assert len(ooms) == MAX_FINDING_EVENTS + 30 and all(e["load"] == 0 for e in ooms)  # --json lists all
    listed = [f for f in only["findings"] if f.startswith("out of memory: CUDA error: out of memory")]
    assert len(listed) == MAX_FINDING_EVENTS
    assert "… 30 more incident(s) like the ones above (--json's events lists all)" in only["findings"]
    truncations = sum(1 for e in doc["events"] if e["kind"] == "truncation")
    assert f"{truncations} prompt truncation(s)" in only["findings"]
    text = _cli([str(path)], capsys)
    assert f"    … {truncations - MAX_LOAD_REQUESTS} more (--json lists all)\n" in text
    assert text.count("    line ") == MAX_LOAD_REQUESTS


def test_an_oom_after_hundreds_of_routine_events_is_still_listed(tmp_path: Path) -> None:
    """Found by a fresh tester: 500 truncations then one load failure showed only "… 301 more"."""
    repo = Path(__file__).resolve().parents[2]

    trunc = (
        'time=2025-05-01T10:00:00.000Z level=WARN source=runner.go:130 msg="truncating input prompt" '
        "limit=2048 prompt=5065 keep=5 new=2048"
    )
    oom = (
        'time=2025-05-01T10:00:09.000Z level=ERROR source=sched.go:478 msg="error loading llama server" '
        'error="llama runner process has terminated: cudaMalloc failed: out of memory"'
    )
    path = tmp_path / "few.log"
    path.write_text("\n".join([trunc] * 500 + [oom]) + "\n", encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "kvtop", "inspect-log", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=repo,
        env={**os.environ, "PYTHONPATH": str(repo)},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert any("out of memory" in ln for ln in lines), done.stdout[-2000:]
    more = [ln for ln in lines if ln.strip().startswith("…") and "more:" in ln]
    assert more == [f"  … {500 - MAX_SERVER_EVENTS:,} more: truncation {500 - MAX_SERVER_EVENTS:,} (--json lists all)"]
