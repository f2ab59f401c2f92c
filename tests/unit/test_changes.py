"""What changed (issue 27 §4): the pure diff of fingerprints, the story, ``--since``, the log scan
on real lines, and the timeline file (bounded, atomic, tolerant of a damaged file)."""

from __future__ import annotations

import json
from datetime import timezone
from pathlib import Path

import pytest

from kvtop.logparse.parser import iter_events
from kvtop.model.change_facts import LogChangeScan
from kvtop.model.changes import Change, Fact, Observation, changes_since, observe, parse_since, story
from kvtop.sources.timeline_store import MAX_CHANGES, TimelineStore

FIXTURE = Path(__file__).parents[1] / "fixtures" / "changes" / "restart-upgrade-0.1.41-to-0.6.6.log"


def obs(at: float, whole: tuple[str, ...] = (), **facts: str | None) -> Observation:
    keyed = {
        k.replace("__", ":"): Fact(v, at, "service" if k.startswith("env") else "reported") for k, v in facts.items()
    }
    return Observation(keyed, frozenset(whole), at)


def test_first_sight_is_no_change_then_a_new_version_is_a_restart() -> None:
    fp, changes = observe({}, obs(100.0, version="0.32.15"))
    assert changes == ()
    fp, changes = observe(fp, obs(200.0, version="0.33.0"))
    assert [(c.key, c.before, c.after, c.at) for c in changes] == [("version", "0.32.15", "0.33.0", 200.0)]
    assert changes[0].text() == "server restarted: 0.32.15 → 0.33.0"
    assert changes[0].restart


def test_same_value_again_is_no_change_and_older_news_is_left_out() -> None:
    fp, _ = observe({}, obs(100.0, version="0.33.0"))
    fp, changes = observe(fp, obs(150.0, version="0.33.0"))
    assert changes == ()
    # a backlog line from before the poll that showed 0.33.0 says 0.32.15: not news
    fp, changes = observe(fp, obs(90.0, version="0.32.15"))
    assert changes == () and fp["version"].value == "0.33.0"


def test_environment_unset_and_newly_set_in_a_whole_read() -> None:
    fp, _ = observe({}, obs(10.0, ("env:",), env__OLLAMA_FLASH_ATTENTION="1"))
    fp, changes = observe(fp, obs(20.0, ("env:",), env__OLLAMA_KV_CACHE_TYPE="q8_0"))
    texts = sorted(c.text() for c in changes)
    assert texts == ["OLLAMA_FLASH_ATTENTION 1 → unset", "OLLAMA_KV_CACHE_TYPE unset → q8_0"]
    assert {c.source for c in changes} == {"service"}
    # a read that is not whole (a cut config map) unsets nothing
    fp2, changes = observe(fp, obs(30.0, (), env__OTHER="x"))
    assert changes == () and fp2["env:OLLAMA_KV_CACHE_TYPE"].value == "q8_0"


def test_model_facts_outlive_the_unload_and_tell_the_story() -> None:
    fp, _ = observe({}, obs(0.0, version="0.40.2"))
    fp, _ = observe(fp, obs(1.0, fa__m="on", kv__m="q8_0", placement__m="gpu"))
    found: list[Change] = []
    fp, ch = observe(fp, obs(2.0, fa__m="off"))  # reloaded: flash attention off
    found += ch
    fp, ch = observe(fp, obs(3.0, kv__m="f16"))  # f16 without flash attention
    found += ch
    fp, ch = observe(fp, obs(4.0, placement__m="spill"))  # the larger KV no longer fits
    found += ch
    assert story(found, since="0.40.2") == "since 0.40.2: flash attention off → KV f16 → spill"
    assert found[0].text() == "m: flash attention on → off"


def test_since_a_version_or_a_time() -> None:
    up = Change(100.0, "version", "0.40.2", "0.41.0")
    fa = Change(200.0, "fa:m", "on", "off")
    kv = Change(300.0, "kv:m", "q8_0", "f16")
    assert changes_since([up, fa, kv], parse_since("0.41.0", 0.0)) == (fa, kv)
    assert changes_since([up, fa, kv], parse_since("0.40.2", 0.0)) == (up, fa, kv)  # from leaving it
    assert changes_since([up, fa, kv], parse_since("0.9.9", 0.0)) is None
    assert changes_since([up, fa, kv], parse_since("150s", 400.0)) == (kv,)
    assert parse_since("2026-12-01T09:00", 0.0) == ("time", 1796115600.0)
    with pytest.raises(ValueError, match="a version"):
        parse_since("yesterday-ish", 0.0)


def test_log_scan_finds_the_restart_and_upgrade_in_real_lines() -> None:
    scan = LogChangeScan(timezone.utc)
    for event in iter_events(iter(FIXTURE.read_text(encoding="utf-8").splitlines())):
        scan.feed(event)
    assert scan.starts == 2
    by_key = {c.key: c for c in scan.changes}
    assert by_key["version"].before == "0.1.41" and by_key["version"].after == "0.6.6"
    assert by_key["start"].kind == "start"
    fa = by_key["config:OLLAMA_FLASH_ATTENTION"]
    assert (fa.before, fa.after) == ("false", "true")
    kv = by_key["config:OLLAMA_KV_CACHE_TYPE"]  # the 0.1.41 map has no such key: newly set
    assert (kv.before, kv.after) == (None, "q8_0")
    assert kv.text() == "OLLAMA_KV_CACHE_TYPE unset → q8_0 (server config)"
    queue = by_key["config:OLLAMA_MAX_QUEUE"]  # 25 in the compose file then, the default 512 later
    assert (queue.before, queue.after) == ("25", "512")
    assert all(c.at >= 1745866931.0 for c in scan.changes)  # 2025-04-28T19:02:11Z: the second start


def test_timeline_file_round_trip_bounded_and_without_credentials(tmp_path: Path) -> None:
    store = TimelineStore(tmp_path, "http://alice:s3cret@gpu-box:11434")
    changes = [Change(float(i), "version", f"0.{i}", f"0.{i + 1}") for i in range(MAX_CHANGES + 20)]
    facts = {"version": Fact("0.520", 519.0, "reported"), "env:OLLAMA_X": Fact(None, 3.0, "service")}
    assert store.write(changes, facts) is None
    text = store.path.read_text(encoding="utf-8")
    assert "s3cret" not in text and "alice" not in text
    back = store.read()
    assert back.warning is None
    assert len(back.changes) == MAX_CHANGES and back.changes[-1] == changes[-1]
    assert back.facts == facts
    assert not list(tmp_path.glob(".*.tmp"))


def test_a_damaged_timeline_is_read_as_far_as_it_goes(tmp_path: Path) -> None:
    store = TimelineStore(tmp_path, "http://127.0.0.1:11434")
    good = Change(5.0, "pid", "10", "11")
    store.write([good], {"pid": Fact("11", 5.0, "service")})
    text = store.path.read_text(encoding="utf-8")
    store.path.write_text(text[:-40] + '\n{"type": "change", "at_unix": "x"}\n\x00\x01garbage', encoding="utf-8")
    back = store.read()
    assert back.changes == (good,)
    assert back.facts == {}  # the fingerprint line was the truncated one
    assert back.warning is not None and "3 unreadable line(s) skipped" in back.warning
    assert json.loads(store.path.read_text(encoding="utf-8").splitlines()[0])["type"] == "server"


def test_inspect_log_changes_lists_the_restart_of_a_pasted_log(capsys: pytest.CaptureFixture[str]) -> None:
    from kvtop.inspect_log import main_inspect_log

    assert main_inspect_log([str(FIXTURE), "--changes"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1:4] == ["server changes", "  2 start(s), 1 restart(s) in the log; what changed at each:", out[3]]
    assert out[3].endswith("server restarted: 0.1.41 → 0.6.6")
    assert any(line.endswith("OLLAMA_FLASH_ATTENTION false → true (server config)") for line in out)
    assert main_inspect_log([str(FIXTURE), "--changes", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["starts"] == 2
    assert {(c["kind"], c["before"], c["after"]) for c in doc["changes"]} >= {("version", "0.1.41", "0.6.6")}
    one = FIXTURE.parents[1] / "logs" / "018-server-config-docker-compose-prefix-0.1.41.log"
    assert main_inspect_log([str(one), "--changes"]) == 0
    assert "one server start in the log: nothing to compare it with" in capsys.readouterr().out


def test_the_process_sample_gives_the_service_environment_and_a_new_pid_is_a_restart() -> None:
    from types import MappingProxyType

    from kvtop.engine.timeline import ChangeKeeper
    from kvtop.model.gpu_snapshots import ProcSnapshot, ServerProcess, ServiceEnv
    from kvtop.model.state import fold_procs, initial_state

    def sample(at: float, pid: int, **env: str) -> ProcSnapshot:
        read = ServiceEnv(MappingProxyType(env), source=f"/proc/{pid}/environ")
        return ProcSnapshot(taken_at=at, servers=(ServerProcess(pid, "ollama", ("ollama", "serve"), read),))

    state, _ = initial_state("http://127.0.0.1:11434", {}, timezone.utc)
    keeper = ChangeKeeper(None)
    state = keeper.observe("h", fold_procs(state, sample(100.0, 4242, OLLAMA_FLASH_ATTENTION="1")))
    assert state.changes == ()
    state = keeper.observe("h", fold_procs(state, sample(200.0, 5151, OLLAMA_KV_CACHE_TYPE="q8_0")))
    assert [(c.text(), c.source, c.at) for c in state.changes] == [
        ("server restarted: PID 4242 → 5151", "service", 200.0),
        ("OLLAMA_FLASH_ATTENTION 1 → unset", "service", 200.0),
        ("OLLAMA_KV_CACHE_TYPE unset → q8_0", "service", 200.0),
    ]
    assert story(state.changes) == "restart → OLLAMA_FLASH_ATTENTION unset → OLLAMA_KV_CACHE_TYPE=q8_0"


def test_a_reload_at_other_settings_names_only_the_flags_that_differ() -> None:
    """The demo's reloads: ``RunnerProcess.flags`` before and after (llama-server and Ollama runner forms)."""
    c = Change(
        5.0, "runner:gemma4:latest", "--ctx-size 4096 --parallel 1", "--ctx-size 32768 --parallel 1", "requested"
    )
    assert c.text() == "gemma4:latest runner: --ctx-size 4096 → 32768"
    assert c.short() == "runner --ctx-size 32768"
    c = Change(5.0, "runner:m", "-c 4096 -np 1 -ngl -1", "-c 4096 -np 2 -ngl -1 --flash-attn on", "requested")
    assert c.text() == "m runner: -np 1 → 2, --flash-attn on added"
    c = Change(5.0, "runner:m", "-c 4096 --kv-cache-type q8_0", "-c 4096", "requested")
    assert c.text() == "m runner: --kv-cache-type q8_0 removed"


def test_the_events_pane_rows_stay_calm_over_the_demo_loop() -> None:
    """Three loops of the demo's story (each model reloaded at another num_ctx, and back): one row per
    model, the newest first, its earlier reloads counted; a reload's facts that changed with it in
    that one row; a repeated server change folded; at most ``limit`` rows."""
    from kvtop.model.changes import change_rows

    found: list[Change] = []
    t = 1000.0
    for _ in range(3):
        for model in ("qwen3:1.7b-q8_0", "gemma4:latest"):
            found.append(Change(t, f"runner:{model}", "-c 4096 -np 1", "-c 32768 -np 1", "requested"))
            found.append(Change(t, f"placement:{model}", "gpu", "spill", "reported"))
            found.append(Change(t + 30, f"runner:{model}", "-c 32768 -np 1", "-c 4096 -np 1", "requested"))
            found.append(Change(t + 30, f"placement:{model}", "spill", "gpu", "reported"))
            t += 1
        found.append(Change(t + 40, "env:OLLAMA_DEBUG", "1", None, "service"))
        found.append(Change(t + 41, "env:OLLAMA_DEBUG", None, "1", "service"))
        t += 70
    rows, cut = change_rows(found, 10)
    assert cut == 0 and len(rows) == 4
    texts = [r.text for r in rows]
    assert texts == [
        "OLLAMA_DEBUG unset → 1",
        "OLLAMA_DEBUG 1 → unset",
        "gemma4:latest runner: -c 32768 → 4096; placement spill → gpu",
        "qwen3:1.7b-q8_0 runner: -c 32768 → 4096; placement spill → gpu",
    ]
    assert [r.earlier for r in rows] == [2, 2, 5, 5]
    assert rows[2].marks == (("requested", "runner argv"), ("reported", "model load"))
    assert (rows[2].since, rows[2].at) == (1001.0, 1175.0)  # the first reload, the newest
    rows, cut = change_rows(found, 3)
    assert len(rows) == 3 and cut == 1
