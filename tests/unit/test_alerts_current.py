"""An alert about a model that is no longer loaded leaves the banner (``model.alerts.current``):
the split, and the evaluated state on the demo's real log, where ``gemma4`` truncated prompts and
was then unloaded."""

from __future__ import annotations

from kvtop.model.alerts.current import LOAD_EVENT_KINDS, split_current
from kvtop.model.alerts.types import Alert


def _alert(kind: str, model: str | None) -> Alert:
    return Alert(
        kind=kind, severity="warning", model=model, since=1.0, message=f"{kind} {model}", key=f"{kind}:{model}"
    )


def test_a_log_alert_of_an_unloaded_model_is_past_and_a_load_event_stays_current() -> None:
    truncated = _alert("prompt_truncated", "gemma4:latest")
    truncated_loaded = _alert("prompt_truncated", "qwen3:1.7b")
    failed = _alert("load_failed", "gemma4:latest")
    gpu = _alert("gpu_nearly_full", None)
    current, past = split_current([truncated, truncated_loaded, failed, gpu], {"qwen3:1.7b"})
    assert current == (truncated_loaded, failed, gpu)
    assert past == (truncated,)


def test_while_the_server_does_not_answer_every_alert_stays_current() -> None:
    alerts = [_alert("prompt_truncated", "gemma4:latest"), _alert("kv_type_not_applied", "x")]
    assert split_current(alerts, None) == (tuple(alerts), ())


def test_the_load_event_kinds_are_alert_kinds() -> None:
    from kvtop.model.alerts.types import KINDS

    assert set(KINDS) >= LOAD_EVENT_KINDS
    assert "prompt_truncated" not in LOAD_EVENT_KINDS and "spill" not in LOAD_EVENT_KINDS


def test_a_reload_churn_of_a_model_no_longer_loaded_is_past() -> None:
    # tester N: "0 models loaded" under "▲ reload churn gemma4:latest" in the demo's empty phase
    churn = _alert("reload_churn", "gemma4:latest")
    churn_loaded = _alert("reload_churn", "qwen3:1.7b")
    churn_unnamed = _alert("reload_churn", None)  # a blob no model name is known for: kept in the banner
    current, past = split_current([churn, churn_loaded, churn_unnamed], {"qwen3:1.7b"})
    assert current == (churn_loaded, churn_unnamed) and past == (churn,)
    assert split_current([churn], set()) == ((), (churn,))
