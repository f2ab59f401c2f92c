"""``--once``, ``--check`` and ``--stream``: one engine (:func:`sample_engine`), its states printed as
text or JSON (docs/json.md) on stdout, what must be said on stderr."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence
from typing import Any

from kvtop.cli.demo import _machine_sources
from kvtop.cli.exits import EXIT_OK, EXIT_UNREACHABLE
from kvtop.config import Settings
from kvtop.core.glyphs import to_ascii
from kvtop.textsafe import emit, safe_block, safe_json


def sample_engine(settings: Settings) -> Any:
    """The engine of ``--once``/``--check``/``--stream`` (``kvtop.engine``): every server, this
    machine (the demo's simulated one with ``--demo``), its runners' ``/slots``, the local server's
    health and pulled models. What it must say (a source that failed, what was read of the log)
    goes to stderr, as do the ``[alerts]`` threshold warnings; stdout stays the report.

    The GPU sample and the server log join the state of ``sources.hosts.local_host(settings.host_urls)``
    only: they describe the machine kvtop runs on. Each :meth:`~kvtop.engine.Engine.step` is one
    sample of everything with one apply step (one alert evaluation per server), so the log's
    event alerts (truncation, OOM, KV type not applied, …) count too; the states carry over
    between steps (``--stream``: history, rates and the decode speed from ``/slots`` are real).
    """
    from kvtop.engine import Engine, build_sources

    demo = _machine_sources(settings)
    sources = build_sources(
        settings, gpu=demo[0] if demo else None, procs=demo[1] if demo else None, read_slots=True, server_info=True
    )
    engine = Engine(settings, sources)
    engine.on_notice(lambda notice: emit(f"kvtop: {notice.text}"))
    for warning in engine.warnings:
        emit(f"kvtop: {warning}")  # the warning starts with "[alerts]"
    return engine


async def _sample_states(settings: Settings) -> list[Any]:
    """One sample of every server and of this machine's GPUs, as ``AppState``s: one engine step
    that also reads the log's newest lines once (the dashboard's start bound, ``sources.tail_backlog``)."""
    engine = sample_engine(settings)
    try:
        return await engine.step(backlog=True)
    finally:
        await engine.aclose()


async def _sample_once(settings: Settings) -> int:
    """``--once`` / ``--check``: print one sample of every server; returns the exit code.

    With one server the output is unchanged from a single-host kvtop; with several, ``--json``
    wraps one object per server in ``{"hosts": [...]}`` and the text blocks follow each other.
    ``--once`` exits 2 when any server is unreachable; ``--check`` exits with the worst code.
    """
    from kvtop.report import state_text

    states = await _sample_states(settings)
    several = len(states) > 1
    if settings.extra.get("check") == "1":
        from kvtop.model.alerts import alert_json, exit_code
        from kvtop.report import alert_lines

        # alerts about a model since unloaded still count: --check reports the events of its window
        codes = [exit_code(st.alerts + st.past_alerts, bool(st.reachable)) for st in states]
        if settings.extra.get("json") == "1":
            objs = [
                {
                    "host": st.host_url,
                    "reachable": bool(st.reachable),
                    "error": st.ollama.error if st.ollama else "no poll made",
                    "hints": list(_hints(st, settings)),
                    "alerts": [alert_json(a) for a in st.alerts],
                    "past_alerts": [alert_json(a) for a in st.past_alerts],
                    **({"tls": tls} if (tls := settings.access_for(st.host_url).tls_json()) is not None else {}),
                    "log": (
                        {"source": st.log.source, "lines": st.log.lines, "ok": st.log.ok, "status": st.log.status}
                        if st.log.source is not None
                        else None
                    ),
                }
                for st in states
            ]
            out: Any = (
                {"hosts": objs, "exit_code": max(codes)}
                if several
                else {k: v for k, v in objs[0].items() if k != "host"}
            )
            sys.stdout.write(safe_json(out) + "\n")
        else:
            lines: list[str] = []
            for st in states:
                block = alert_lines(st) or ["kvtop: no alerts"]
                if not st.reachable:
                    block[:0] = [
                        f"kvtop: {st.host_url}: unreachable: {st.ollama.error if st.ollama else ''}",
                        *(f"  {hint}" for hint in _hints(st, settings)),
                    ]
                tls_note = settings.access_for(st.host_url).tls_note  # --insecure / --cacert, said whenever in use
                if tls_note:
                    block.insert(0, f"kvtop: {st.host_url}: {tls_note}")
                if several:
                    block = [f"== {st.host_url}"] + [f"  {line}" for line in block]
                lines.extend(block)
            sys.stdout.write(plain_text(safe_block("\n".join(lines) + "\n"), settings))
        return max(codes)
    reachable = all(st.reachable for st in states)
    if settings.extra.get("json") == "1":
        sys.stdout.write(safe_json(once_json(states, settings)) + "\n")
    else:
        for i, st in enumerate(states):
            if i:
                sys.stdout.write("\n")
            out_stream = sys.stdout if st.reachable else sys.stderr
            tls = settings.access_for(st.host_url).tls_note  # --insecure / --cacert, said whenever in use
            if tls:
                out_stream.write(plain_text(safe_block(f"kvtop: {st.host_url}: {tls}\n"), settings))
            out_stream.write(plain_text(safe_block(state_text(st, hints=_hints(st, settings))), settings))
    return EXIT_OK if reachable else EXIT_UNREACHABLE


def plain_text(text: str, settings: Settings) -> str:
    """``text`` as printed: in ASCII (``kvtop.core.glyphs.to_ascii``, the plain-text stand-ins)
    when ``settings.extra["ascii"]`` is ``"1"`` (``--ascii``, or no UTF-8 locale), else unchanged.
    JSON is never changed (its strings are escaped)."""
    return to_ascii(text, keep_cells=False) if settings.extra.get("ascii") == "1" else text


def once_json(states: Sequence[Any], settings: Settings) -> dict[str, Any]:
    """The ``--once --json`` object of one sample (docs/json.md): one server's object
    (``report.state_json`` and its ``hints``), or ``{"hosts": [...]}`` with several."""
    from kvtop.report import state_json

    docs = [{**state_json(st), "hints": list(_hints(st, settings))} for st in states]
    for doc, st in zip(docs, states):
        tls = settings.access_for(st.host_url).tls_json()  # {"verify": false} with --insecure, the CA file
        if tls is not None:
            doc["tls"] = tls
    return {"hosts": docs} if len(docs) > 1 else docs[0]


async def _stream(settings: Settings, count: int | None) -> int:
    """``--stream [--count N]``: one ``--once --json`` object per line (NDJSON) per interval.

    Each line is the whole ``--once --json`` object (:func:`once_json`, same schema) of one
    sample, written and flushed at once, so a reader sees whole lines as they come. Samples start
    every ``settings.interval_s`` seconds (a slow sample delays the next one, never doubles up);
    the states carry over (one engine, :func:`sample_engine`, one step per line), so rates and histories are real. A server that does
    not answer gives its object with ``reachable: false`` and the error, and the stream goes on.
    Stops after ``count`` objects, or on SIGINT/SIGTERM/SIGHUP (exit 0); a reader that goes away
    (``| head -3``) raises ``BrokenPipeError``, which ``main`` turns into exit 0.
    """
    import signal

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError, ValueError):  # pragma: no cover - Windows
            pass
    engine = sample_engine(settings)
    engine.follow_log()  # each step applies the lines read since the previous one
    written = 0
    next_at = loop.time()
    try:
        while not stop.is_set() and (count is None or written < count):
            sample = asyncio.ensure_future(engine.step())
            stopper = asyncio.ensure_future(stop.wait())
            await asyncio.wait((sample, stopper), return_when=asyncio.FIRST_COMPLETED)
            stopper.cancel()
            if not sample.done():
                sample.cancel()
                await asyncio.gather(sample, return_exceptions=True)
                break
            states = sample.result()
            sys.stdout.write(safe_json(once_json(states, settings), indent=None) + "\n")
            sys.stdout.flush()
            written += 1
            if count is not None and written >= count:
                break
            next_at = max(next_at + settings.interval_s, loop.time())
            try:
                await asyncio.wait_for(stop.wait(), timeout=max(0.0, next_at - loop.time()))
            except asyncio.TimeoutError:
                pass
    finally:
        await engine.aclose()
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            try:
                loop.remove_signal_handler(sig)
            except (NotImplementedError, RuntimeError, ValueError):  # pragma: no cover
                pass
    return EXIT_OK


def _hints(state: Any, settings: Settings) -> tuple[str, ...]:
    """The way forward for an unreachable server (``model.hints``); empty when it answered."""
    from kvtop.model.hints import unreachable_hints

    if state.reachable:
        return ()
    snap = state.ollama
    return unreachable_hints(
        state.host_url,
        settings.extra.get("host_origin"),
        snap.error_kind if snap is not None else None,
        demo=settings.demo,
        error=snap.error if snap is not None else None,
    )
