"""Property-based fuzzing of every parser of outside input, kept in the project as proof.

Each parser gets arbitrary input (any JSON value, any text with control characters, mutations of
real corpus lines) and must either return its result or raise its one documented error; no other
exception escapes. Whatever kvtop would print from the result (``safe()`` text, event
descriptions) carries no control character. ``FUZZ_EXAMPLES`` cases per target here: 2,000 by
default, because hypothesis costs about 5 ms a case on 2 cores and 10⁴ per target would add about
4 minutes to every test run (``KVTOP_FUZZ_EXAMPLES=10000`` runs the issue's 10⁴);
``benchmarks/fuzz.py`` runs as many as asked (10⁶ by default) and prints the count.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

hypothesis = pytest.importorskip("hypothesis", reason="the fuzz tests need hypothesis (pip install '.[test]')")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from kvtop.logparse.parser import LogParser  # noqa: E402
from kvtop.model.eventtext import describe  # noqa: E402
from kvtop.sources.ollama_decode import parse_ps, parse_show, parse_tags  # noqa: E402
from kvtop.sources.slots import parse_metrics, parse_props, parse_slots  # noqa: E402
from kvtop.ui.format import safe  # noqa: E402

FUZZ_EXAMPLES = int(os.environ.get("KVTOP_FUZZ_EXAMPLES", "2000"))
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")

FUZZ = settings(
    max_examples=FUZZ_EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

pytestmark = pytest.mark.timeout(900)  # KVTOP_FUZZ_EXAMPLES=10000 takes longer than the suite's 120 s per test

NASTY = st.sampled_from(
    [
        "\x1b]52;c;aGk=\x07",
        "\x1b[2J",
        "\x1b[31m",
        "[bold red]x[/]",
        "\x00",
        "\u202e",
        "\x9b1m",
        "\r",
        "-1",
        "9223372036854775808",
        "1e400",
        "NaN",
        "sha256-",
        "",
        " ",
    ]
)
TEXT = st.one_of(st.text(max_size=24), NASTY, st.lists(st.one_of(st.text(max_size=6), NASTY), max_size=4).map("".join))
SCALAR = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0.5, -1.0, float("nan"), float("inf"), 1e300]),
    TEXT,
)
JSON = st.recursive(
    SCALAR, lambda kids: st.one_of(st.lists(kids, max_size=4), st.dictionaries(TEXT, kids, max_size=4)), max_leaves=12
)

SMALL_JSON = st.recursive(
    SCALAR, lambda kids: st.one_of(st.lists(kids, max_size=3), st.dictionaries(TEXT, kids, max_size=3)), max_leaves=6
)

PS_KEYS = ["name", "model", "size", "size_vram", "digest", "expires_at", "context_length", "details"]
PS_ROW = st.fixed_dictionaries({}, optional={k: SMALL_JSON for k in PS_KEYS})
PS_BODY = st.one_of(JSON, st.fixed_dictionaries({"models": st.lists(st.one_of(PS_ROW, SMALL_JSON), max_size=3)}))


def _corpus_lines() -> list[str]:
    lines: list[str] = []
    for path in sorted((FIXTURES / "logs").glob("*.log")):
        lines.extend(path.read_text(encoding="utf-8", errors="replace").splitlines()[:40])
    return [ln for ln in lines if ln.strip()]


CORPUS = _corpus_lines()


@st.composite
def log_lines(draw: Any) -> str:
    """A real corpus line, cut, spliced with nasty text or numbers changed; or any text."""
    if draw(st.booleans()):
        return draw(TEXT)
    line = draw(st.sampled_from(CORPUS))
    i = draw(st.integers(0, len(line)))
    how = draw(st.sampled_from(["cut", "insert", "number"]))
    if how == "cut":
        return line[:i]
    if how == "insert":
        return line[:i] + draw(TEXT) + line[i:]
    return re.sub(r"\d+", lambda m: draw(st.sampled_from(["-1", "0", "99999999999999999999999", m.group(0)])), line)


def _clean(text: str) -> None:
    assert not CONTROL.search(text), repr(text)


@FUZZ
@given(PS_BODY)
def test_parse_ps_never_escapes(body: Any) -> None:
    try:
        rows = parse_ps(body)
    except ValueError:
        return
    for m in rows:
        assert m.size_bytes is None or 0 <= m.size_bytes < 2**63
        _clean(safe(m.name, 200))


@FUZZ
@given(JSON)
def test_parse_show_and_tags_never_escape(body: Any) -> None:
    try:
        show = parse_show(body, digest="d" * 64, name="m")
    except ValueError:
        pass
    else:
        _clean(safe(show.parameters, 400))
    try:
        parse_tags(body)
    except ValueError:
        pass


@FUZZ
@given(
    st.one_of(
        SMALL_JSON,
        st.lists(
            st.dictionaries(
                st.sampled_from(["id", "n_ctx", "is_processing", "state", "id_task", "n_prompt_tokens", "next_token"]),
                SMALL_JSON,
            ),
            max_size=3,
        ),
    )
)
def test_runner_endpoints_never_escape(body: Any) -> None:
    for parse in (parse_slots, parse_props):
        try:
            parse(body)
        except ValueError:
            pass
    parse_metrics(body if isinstance(body, str) else json.dumps(body, default=str))


@FUZZ
@given(st.lists(log_lines(), min_size=1, max_size=8))
def test_log_parser_never_escapes_and_describes_safely(lines: list[str]) -> None:
    parser = LogParser(default_year=2026)
    events = []
    for line in lines:
        events.extend(parser.feed(line))
    events.extend(parser.end_batch())
    for e in events:
        _clean(safe(describe(e), 500))


# --------------------------------------------------------------------------------------------
# Files: the config reader and the recording reader


SCRATCH = Path(__import__("tempfile").mkdtemp(prefix="kvtop-fuzz-"))
"""One folder for the files the file readers are fuzzed with (rewritten per case; left in the temp dir)."""

TOML_PIECES = st.sampled_from(
    [
        "a = 1\n",
        "[alerts]\n",
        "interval = ",
        "host = [",
        "]",
        "{",
        "}",
        "x = {y = ",
        '"',
        "'''",
        "\n",
        "= =",
        "[[t]]\n",
        "1e999",
        "\x00",
        "\x1b[2J",
        'theme = "',
        "alerts = 5\n",
    ]
)
TOML_TEXT = st.one_of(
    st.text(max_size=200), st.lists(st.one_of(TOML_PIECES, st.text(max_size=6)), max_size=40).map("".join)
)


@FUZZ
@given(TOML_TEXT)
def test_config_reader_never_escapes(text: str) -> None:
    from kvtop.config.files import read_config_file

    path = SCRATCH / "config.toml"
    path.write_text(text, encoding="utf-8", errors="replace")
    values, warnings = read_config_file(path)
    assert isinstance(values, dict)
    for w in warnings:
        _clean(safe(w, 400))


def _valid_header() -> bytes:
    from datetime import timezone

    from kvtop.model.alerts import Thresholds
    from kvtop.sources.recorder import recording_header

    header = recording_header(
        hosts=("http://127.0.0.1:11434",),
        log_spec="none",
        gpu=False,
        demo=False,
        naive_tz=timezone.utc,
        thresholds=Thresholds(),
        started_at=1_795_963_473.0,
    )
    return json.dumps(header).encode() + b"\n"


HEADER = _valid_header()
RECORD_LINE = st.one_of(
    JSON.map(lambda v: json.dumps(v, default=str).encode()),
    st.fixed_dictionaries(
        {"t": SCALAR, "kind": st.sampled_from(["ollama", "gpu", "log", "slots", "x"])},
        optional={
            "snapshot": SMALL_JSON,
            "gpu": SMALL_JSON,
            "procs": SMALL_JSON,
            "slots": SMALL_JSON,
            "raw_lines": SMALL_JSON,
        },
    ).map(lambda v: json.dumps(v, default=str).encode()),
    st.binary(max_size=60),
)


@FUZZ
@given(st.booleans(), st.lists(RECORD_LINE, max_size=5))
def test_recording_reader_never_escapes(header_ok: bool, lines: list[bytes]) -> None:
    from kvtop.sources.recording import RecordingError, read_recording

    body = (HEADER if header_ok else b"") + b"\n".join(lines)
    path = SCRATCH / "rec.jsonl"
    path.write_bytes(body)
    try:
        rec = read_recording(path)
    except RecordingError as exc:
        _clean(safe(str(exc), 400))
        return
    if rec.damage is not None:
        assert rec.damage.startswith("recording ends at line ")
        _clean(safe(rec.damage, 400))
