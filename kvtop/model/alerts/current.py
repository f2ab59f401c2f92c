"""Which alerts are true now: an alert about a model that is no longer loaded leaves the banner.

Many alerts come from the server log and stay raised for ``Thresholds.event_window_s`` (15 min)
after their line: a prompt truncated, a KV cache type not applied, num_ctx clamped. When the model
they are about has since been unloaded, the condition is gone although the event is recent; such
an alert is *past*: the faces keep it (events pane, ``--once``, JSON, ``--check``) with its age,
and the banner and the alerts panel show only what is true now.

Alerts about a load itself (it failed, ran out of memory, crashed, was evicted) stay current while
in their window whether or not the model is loaded: a model that failed to load is by definition
not loaded, and that is the news. A reload churn (the same model loaded again and again) is about
a model that is loaded: once it is unloaded the churn has stopped, and the alert is past like the
others (issue 26, "Calm"). Alerts about no model (the
server, a GPU) are always current. While the server does not answer, nothing is known to be
unloaded, so every alert stays current.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from kvtop.model.alerts.types import Alert

__all__ = ["LOAD_EVENT_KINDS", "split_current"]

LOAD_EVENT_KINDS: frozenset[str] = frozenset({"oom", "load_failed", "runner_crash", "quantized_v_refused", "eviction"})
"""Alert kinds about a load as an event: current for their whole window, loaded or not."""


def split_current(
    alerts: Sequence[Alert], loaded: Collection[str] | None
) -> tuple[tuple[Alert, ...], tuple[Alert, ...]]:
    """``alerts`` as (current, past), each in the order given.

    Args:
        alerts: One evaluation's alerts (``model.alerts.evaluate``).
        loaded: The names of the models loaded now (``/api/ps``), or None when not known (the
            server does not answer): then every alert is current.

    Returns:
        The alerts true now, and the alerts about a model no longer loaded (see the module).
    """
    if loaded is None:
        return tuple(alerts), ()
    current: list[Alert] = []
    past: list[Alert] = []
    for alert in alerts:
        if alert.model is None or alert.kind in LOAD_EVENT_KINDS or alert.model in loaded:
            current.append(alert)
        else:
            past.append(alert)
    return tuple(current), tuple(past)
