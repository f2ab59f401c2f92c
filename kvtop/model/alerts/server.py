"""Server rules: the server does not answer, or the server log that was being read stopped.

A log that was never found is not an alert: ``--log auto`` that finds no log keeps the source
``auto`` (``sources.tail.AutoTail``) and says on the log status line what to do (choose one with
``--log``). Once a log was found and read, losing it is the ``log_source_lost`` warning: the
log-based alerts are blind until it is back. A log named with ``--log`` that cannot be read is
an alert from the start: the user asked for it. The rule is the same in every mode (dashboard,
``--once``, ``--check``, the exporter), because they all evaluate the state with these rules.
"""

from __future__ import annotations

from typing import Final

from kvtop.model.alerts.context import Ctx
from kvtop.model.alerts.types import Alert

__all__ = ["AUTO_SOURCE", "log_never_found", "server_alerts"]

AUTO_SOURCE: Final = "auto"
"""``LogState.source`` while ``--log auto`` has found no log yet (``AutoTail.description``)."""


def log_never_found(source: str | None, ok: bool) -> bool:
    """True while ``--log auto`` is still looking for a log (none was ever found): a status to
    show with its fix, not an alert."""
    return not ok and source == AUTO_SOURCE


def server_alerts(ctx: Ctx) -> list[Alert]:
    """``server_unreachable`` (the latest ``/api/ps`` poll failed) and ``log_source_lost`` (the
    log named or found cannot be read)."""
    out: list[Alert] = []
    state = ctx.state
    snap = state.ollama
    if snap is not None and not snap.reachable:
        text = f"Ollama at {state.host_url} does not answer: {snap.error or 'no reason given'}"
        if state.last_ok is not None:
            text += f"; last good poll {max(0.0, snap.taken_at - state.last_ok.taken_at):.0f} s earlier"
        if state.failures > 1:
            text += f" ({state.failures} failed polls in a row)"
        out.append(Alert("server_unreachable", "critical", None, snap.taken_at, text, (), "server_unreachable"))
    log = state.log
    if not log.ok and not log_never_found(log.source, log.ok):
        text = f"server log {log.source or '(no source)'}: {log.status or 'cannot be read'}"
        text += "; log-based alerts (truncation, OOM, KV type) are blind until it is back"
        out.append(Alert("log_source_lost", "warning", None, ctx.now, text, (), "log_source_lost"))
    return out
