"""The engine's state read as the app's attributes (``app.hosts``, ``app.states``, ``app.histories``,
``app.log_source``, …): :class:`EngineViews`, a plain base class of ``KvtopApp``.

The engine (``kvtop.engine.Engine``) keeps every server's state and the run's sources; the
screens, the app's parts (``host.py``'s Protocols) and the tests read them on the app.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kvtop.engine import Engine

__all__ = ["EngineViews"]


class EngineViews:
    """The engine's view of the servers and of the run's sources, as properties of the app."""

    engine: Engine
    """Polls, stages and applies (``kvtop.engine``); set by ``KvtopApp.__init__``."""

    # read by the screens, the app's parts and the tests
    sources = property(
        lambda self: self.engine.sources.servers, doc="Host URL → its poller (the engine's; empty in a replay)."
    )
    hosts = property(
        lambda self: self.engine.hosts, doc="Every server watched, in the order given; ``state`` is the one on screen."
    )
    local_host = property(
        lambda self: self.engine.local_host, doc="The server this machine's GPU sample and the server log belong to."
    )
    machine_hosts = property(
        lambda self: self.engine.machine_hosts,
        doc="The other servers on this machine: their runners and environment are read here too.",
    )
    states = property(lambda self: self.engine.states, doc="Each server's state (the engine's).")
    histories = property(
        lambda self: self.engine.histories,
        doc="Each server's capped history (plots on ``h``, the table's VRAM sparkline).",
    )
    apply_steps = property(lambda self: self.engine.apply_steps, doc="Apply steps the engine ran.")
    alert_evaluations = property(
        lambda self: self.engine.alert_evaluations,
        doc="Alert evaluations run by the apply steps (one per changed server and step).",
    )
    _pending = property(lambda self: self.engine.pending, doc="Staged messages not applied yet, by server.")
    log_source = property(
        lambda self: self.engine.sources.log,
        lambda self, v: setattr(self.engine.sources, "log", v),
        doc="The server log followed (the local server's), or None.",
    )
    gpu_source = property(
        lambda self: self.engine.sources.gpu,
        lambda self, v: setattr(self.engine.sources, "gpu", v),
        doc="This machine's GPU reader (the demo's simulated one), or None.",
    )
    proc_source = property(
        lambda self: self.engine.sources.procs,
        lambda self, v: setattr(self.engine.sources, "procs", v),
        doc="This machine's process reader, or None.",
    )

    def action_changes(self) -> None:
        """``c``: what changed on the server on screen (``screens/changes.py``): every change the
        engine keeps for it (``engine.timeline``: this run's and the state folder's)."""
        from kvtop.ui.screens.changes import ChangesScreen

        host = self.current_host  # type: ignore[attr-defined]  # the app's (ServerSwitcher)
        self.push_screen(ChangesScreen(host, self.engine.timeline.timeline(host)))  # type: ignore[attr-defined]

    slots_source = property(
        lambda self: self.engine.sources.slots,
        lambda self, v: setattr(self.engine.sources, "slots", v),
        doc="The local runners' ``/slots`` reader, or None.",
    )
