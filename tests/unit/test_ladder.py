"""The source ladder (``kvtop.model.ladder``): every era's runner flags, the server environment as
Ollama reads it, the choice between rungs and the differences the detail view shows.

Command lines are real: the ``cmd=`` of spawn lines in posted logs (tests/fixtures/logs, each
file named after its corpus entry) and the command line the real llama-server ran with in
tests/fixtures/llama_server.
"""

from __future__ import annotations

import re
from pathlib import Path
from types import MappingProxyType

import pytest

from kvtop.model import kv
from kvtop.model.alerts import evaluate
from kvtop.model.gpu_snapshots import ProcSnapshot, RunnerProcess, ServerProcess, ServiceEnv
from kvtop.model.known import Known
from kvtop.model import ladder
from kvtop.model.slot_snapshots import DecodeRate, RunnerProps, RunnerSlots, SlotState, SlotsSnapshot
from kvtop.model.slots import decode_rates
from kvtop.model.fold_alerts import fold_gpu_with_alerts, fold_slots_with_alerts
from kvtop.model.gpu_snapshots import GpuSnapshot
from kvtop.sources.proc_cmdline import classify_cmdline, runner_process
from kvtop.ui.format import context_text
from tests.unit.test_alerts import TINY, blob, llama_server_run, ps_snapshot, row, state_of

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def corpus_cmd(stem: str) -> list[str]:
    """The argv of the first spawn line of a corpus log (``cmd="…"``)."""
    (path,) = (FIXTURES / "logs").glob(f"{stem}-*.log")
    m = re.search(r'cmd="([^"]*)"', path.read_text(encoding="utf-8"))
    assert m is not None
    return m.group(1).split()


def runner_of(argv: list[str], pid: int = 77) -> RunnerProcess:
    """What ``ProcSource`` makes of a runner's argv (the same ``classify_cmdline`` and ``runner_process``)."""
    c = classify_cmdline(argv)
    assert c is not None and c.kind == "runner" and c.runner_kind is not None
    return runner_process(pid, c, ppid=None, server_pid=1, user=None, rss_bytes=None, cmdline=tuple(argv))


# --------------------------------------------------------------------------------------------
# Requested: every era's flag spelling

ERA_TABLE = [
    # (source, argv, context per slot, slots, cache type, flash attention, -ngl, tensor split)
    ("004 era A ollama_llama_server", corpus_cmd("004"), 2048, 1, "f16", "disabled", 48, None),
    ("011 era A ollama_llama_server", corpus_cmd("011"), 2048, 1, "f16", "disabled", 81, None),
    ("001 B1 runner, bare --flash-attn, 4 GPUs", corpus_cmd("001"), 64000, 1, "f16", "enabled", 44, "11,11,11,11"),
    ("012 B1 ollama engine --parallel 2", corpus_cmd("012"), 4096, 2, "f16", "disabled", None, None),
    ("061 B1 runner with a projector", corpus_cmd("061"), 16384, 1, "f16", "disabled", None, None),
    (
        "028 B2 runner: settings go over /load",
        corpus_cmd("028")[:0]
        + [
            "/usr/local/bin/ollama",
            "runner",
            "--ollama-engine",
            "--model",
            "/usr/share/ollama/.ollama/models/blobs/sha256-" + "b1" * 32,
            "--port",
            "42059",
        ],
        None,
        None,
        None,
        None,
        None,
        None,
    ),
    ("053 B2 runner on Windows", corpus_cmd("053"), None, None, None, None, None, None),
    ("062 era C llama-server, fa auto", corpus_cmd("062"), 131072, 1, "f16", "auto", None, None),
    (
        "real llama-server q8_0 -np 2 fa on",
        (FIXTURES / "llama_server" / "q8_0-fa-on-np2.cmd").read_text().split(),
        4096,
        2,
        "q8_0",
        "enabled",
        0,
        None,
    ),
    (
        "C with K/V types that differ, = and short spellings",
        [
            "/usr/local/lib/ollama/llama-server",
            "--model",
            "/m/blobs/sha256-" + "ab" * 32,
            "--port",
            "1",
            "-c=8192",
            "-np",
            "4",
            "-ctk",
            "q8_0",
            "-ctv",
            "q4_0",
            "-fa",
            "off",
            "-ngl",
            "99",
            "-ts",
            "3,1",
        ],
        2048,
        4,
        "q8_0/q4_0",
        "disabled",
        99,
        "3,1",
    ),
    (
        "B1 --kv-cache-type and --flash-attn",
        [
            "/usr/bin/ollama",
            "runner",
            "--model",
            "/m/blobs/sha256-" + "cd" * 32,
            "--ctx-size",
            "16384",
            "--batch-size",
            "512",
            "--flash-attn",
            "--kv-cache-type",
            "q4_0",
            "--parallel",
            "2",
            "--port",
            "40000",
        ],
        8192,
        2,
        "q4_0",
        "enabled",
        None,
        None,
    ),
]


@pytest.mark.parametrize(
    ("case", "argv", "ctx", "slots", "cache", "fa", "ngl", "split"), ERA_TABLE, ids=[c[0] for c in ERA_TABLE]
)
def test_requested_rung_for_every_era(
    case: str,
    argv: list[str],
    ctx: int | None,
    slots: int | None,
    cache: str | None,
    fa: str | None,
    ngl: int | None,
    split: str | None,
) -> None:
    r = runner_of(argv)
    assert ladder.requested_context(r).value == ctx
    assert ladder.requested_parallel(r).value == slots
    assert ladder.requested_kv_type(r).value == cache
    assert ladder.requested_flash(r).value == fa
    assert (r.n_gpu_layers, r.tensor_split) == (ngl, split)
    for k in (ladder.requested_context(r), ladder.requested_kv_type(r), ladder.requested_flash(r)):
        assert k.source == ("requested" if k.value is not None else None)


def test_the_flags_line_reads_back_as_given() -> None:
    r = runner_of((FIXTURES / "llama_server" / "q8_0-fa-on-np2.cmd").read_text().split())
    assert r.flags == "-c 8192 -np 2 --cache-type-k q8_0 --cache-type-v q8_0 --flash-attn on -ngl 0"
    assert ladder.requested_kv_type(r).note == f"runner PID 77 command line: {r.flags}"
    b1 = runner_of(corpus_cmd("001"))
    assert b1.flags == "--ctx-size 64000 --parallel 1 --flash-attn --n-gpu-layers 44 --tensor-split 11,11,11,11"


# --------------------------------------------------------------------------------------------
# Service: the environment as Ollama's envconfig reads it


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (None, None),
        ("", None),
        ("1", True),
        ("true", True),
        ("TRUE", True),
        ("t", True),
        ("0", False),
        ("false", False),
        ("F", False),
        ("auto", True),
        ("yes", True),
        ("off", True),  # any other word is true (§3)
    ],
)
def test_go_bool(text: str | None, expected: bool | None) -> None:
    assert ladder.go_bool(text) is expected


def env(**values: str) -> ServiceEnv:
    return ServiceEnv(values=MappingProxyType(values), source="/proc/10/environ")


def test_service_rungs() -> None:
    e = env(
        OLLAMA_KV_CACHE_TYPE=' "Q8_0" ',
        OLLAMA_NUM_PARALLEL="2",
        OLLAMA_FLASH_ATTENTION="auto",
        OLLAMA_CONTEXT_LENGTH="16384",
    )
    assert ladder.service_kv_type(e) == Known("q8_0", "service", "OLLAMA_KV_CACHE_TYPE=Q8_0 (/proc/10/environ)")
    assert ladder.service_parallel(e, "llama", False).value == 2
    assert ladder.service_flash(e).value == "enabled"  # "auto" is not a Go bool: it forces flash attention on
    assert ladder.service_context(e).value == 16384
    # forced to one slot: these architectures and embedding models (§3.3)
    forced = ladder.service_parallel(e, "qwen3vl", False)
    assert (forced.value, forced.source) == (1, "service") and "one slot" in forced.note
    assert ladder.service_parallel(e, "bert", True).value == 1
    # 0 was "auto" before v0.10; garbage falls back to Ollama's default
    assert ladder.service_parallel(env(OLLAMA_NUM_PARALLEL="0"), "llama", False).value is None
    assert ladder.service_parallel(env(OLLAMA_NUM_PARALLEL="two"), "llama", False).value is None
    # unreadable or unset: no rung
    assert ladder.service_kv_type(ServiceEnv(error="permission denied")).value is None
    assert ladder.service_flash(env()).value is None


def test_setting_in_force() -> None:
    e = env(OLLAMA_KV_CACHE_TYPE="Q8_0", OLLAMA_FLASH_ATTENTION="true")
    assert ladder.setting_in_force(e, "OLLAMA_KV_CACHE_TYPE", "q8_0")
    assert not ladder.setting_in_force(e, "OLLAMA_KV_CACHE_TYPE", "q4_0")
    assert ladder.setting_in_force(e, "OLLAMA_FLASH_ATTENTION", "1")
    assert not ladder.setting_in_force(e, "OLLAMA_NUM_PARALLEL", "1")
    assert not ladder.setting_in_force(None, "OLLAMA_KV_CACHE_TYPE", "q8_0")


# --------------------------------------------------------------------------------------------
# The whole row: the issue's shared-box case, without a log

ISSUE_ARGV = [
    "/usr/local/lib/ollama/llama-server",
    "--model",
    f"/usr/share/ollama/.ollama/models/blobs/{blob(TINY)}",
    "--port",
    "40123",
    "--host",
    "127.0.0.1",
    "--no-webui",
    "--offline",
    "-c",
    "16384",
    "-np",
    "2",
    "--log-verbosity",
    "4",
    "--no-log-prefix",
    "--no-log-timestamps",
    "--cache-type-k",
    "q8_0",
    "--cache-type-v",
    "q8_0",
    "--flash-attn",
    "on",
    "-b",
    "512",
    "-ub",
    "512",
]
SERVE_ENV = {"OLLAMA_KV_CACHE_TYPE": "q8_0", "OLLAMA_NUM_PARALLEL": "2", "OLLAMA_FLASH_ATTENTION": "1"}


def procs(argv: list[str] = ISSUE_ARGV, **environment: str) -> ProcSnapshot:
    server = ServerProcess(
        pid=1,
        user="ollama",
        cmdline=("/usr/local/bin/ollama", "serve"),
        env=ServiceEnv(values=MappingProxyType(environment or SERVE_ENV), source="systemctl show ollama.service"),
    )
    return ProcSnapshot(taken_at=1.0, servers=(server,), runners=(runner_of(argv),))


def with_procs(state, p: ProcSnapshot):  # type: ignore[no-untyped-def]
    return fold_gpu_with_alerts(state, GpuSnapshot(taken_at=1.0, status="GPU telemetry: none"), p)


def test_no_log_the_runner_command_line_and_the_environment_win_over_defaults() -> None:
    plain = state_of(ps_snapshot([row(TINY, 8192, 60_000_000)]))
    (before,) = plain.models
    assert context_text(before) == "8192×1*" and before.kv_type == Known(
        "f16", "default", "OLLAMA_KV_CACHE_TYPE unset means f16; nothing readable says otherwise"
    )
    (v,) = with_procs(plain, procs()).models
    assert (v.context.value, v.context.source) == (8192, "reported")
    assert (v.parallel.value, v.parallel.source) == (2, "requested")
    assert (v.kv_type.value, v.kv_type.source) == ("q8_0", "requested")
    assert (v.flash_attention.value, v.flash_attention.source) == ("enabled", "requested")
    assert context_text(v) == "8192×2^"
    lay = kv.layout_from_model_info(v and plain.last_ok.shows[next(iter(plain.last_ok.shows))].model_info)  # type: ignore[union-attr]
    assert isinstance(lay, kv.KVLayout)
    assert v.memory.kv.value == kv.kv_allocation(lay, 8192, 2, "q8_0", "q8_0").total_bytes == 16384 * 544
    assert v.local.process is not None and v.local.env is not None and v.differences == ()


def test_the_runner_endpoints_outrank_the_command_line_and_differences_are_kept() -> None:
    # OLLAMA_NUM_PARALLEL=2 in the environment, but this runner was started with -np 1 and says 1 slot
    argv = [a if a != "2" else "1" for a in ISSUE_ARGV]
    argv[argv.index("-c") + 1] = "8192"
    state = with_procs(state_of(ps_snapshot([row(TINY, 8192, 60_000_000)])), procs(argv))
    slots = SlotsSnapshot(
        2.0,
        (
            RunnerSlots(
                77, 40123, blob(TINY), 8192, (SlotState(0, 8192, False),), props=RunnerProps(8192, 1, None, "b10488")
            ),
        ),
    )
    (v,) = fold_slots_with_alerts(state, slots).models
    assert (v.parallel.value, v.parallel.source) == (1, "runner")
    assert v.parallel.note == "GET http://127.0.0.1:40123/props total_slots"
    assert v.differences == (
        "slots: 1 [runner], but 2 [service]: OLLAMA_NUM_PARALLEL=2 (systemctl show ollama.service)",
    )


def test_allocated_wins_and_a_requested_type_that_did_not_apply_is_a_difference() -> None:
    # the real llama-server run with f16 and flash attention off: the log says f16; the environment asked q8_0
    state = state_of(ps_snapshot([row(TINY, 1000, 60_000_000)]), llama_server_run("f16-fa-off-np1-ctx1000", blob(TINY)))
    (v,) = with_procs(
        state, procs(ISSUE_ARGV[:1] + ["--model", f"/m/blobs/{blob(TINY)}", "--port", "1"], OLLAMA_KV_CACHE_TYPE="q8_0")
    ).models
    assert (v.kv_type.value, v.kv_type.source) == ("f16", "allocated")
    assert any(d.startswith("KV cache type: f16 [allocated], but q8_0 [service]") for d in v.differences), v.differences


def test_a_spill_fix_never_asks_for_a_setting_in_force() -> None:
    rows = [row(TINY, 8192, 60_000_000, 55_000_000)]
    without = evaluate(state_of(ps_snapshot(rows)))  # no environment: the cache type fixes are offered
    (spill,) = [a for a in without if a.kind == "spill"]
    assert any(f.action.startswith("OLLAMA_KV_CACHE_TYPE=q8_0") for f in spill.fixes)
    state = with_procs(state_of(ps_snapshot(rows)), procs())
    (spill,) = [a for a in state.alerts if a.kind == "spill"]
    actions = [f.action for f in spill.fixes]
    assert "OLLAMA_KV_CACHE_TYPE=q8_0" not in actions and "OLLAMA_NUM_PARALLEL=2" not in actions
    q4 = [f for f in spill.fixes if f.action.startswith("OLLAMA_KV_CACHE_TYPE=q4_0")]
    assert (
        q4
        and "OLLAMA_FLASH_ATTENTION=1" not in q4[0].cost
        and "needs flash attention (on now, requested)" in q4[0].cost
    )


# --------------------------------------------------------------------------------------------
# Decode speed from /slots


def _round(t: float, n_decoded: int | None, *, task: int = 5, busy: bool = True) -> SlotsSnapshot:
    return SlotsSnapshot(
        t, (RunnerSlots(77, 40123, blob(TINY), 8192, (SlotState(0, 8192, busy, task, 900, n_decoded),)),)
    )


def test_decode_rate_counts_from_the_first_round_that_saw_the_task_decoding() -> None:
    r0 = decode_rates(None, _round(10.0, 0), {})  # prefill: nothing decoded yet
    assert r0 == {}
    r1 = decode_rates(None, _round(10.5, 40), r0)  # first sight: the anchor
    assert r1[77].tokens_per_s is None and r1[77].anchors == ((0, 5, 40, 10.5),)
    r2 = decode_rates(None, _round(11.0, 140), r1)
    assert r2[77].tokens_per_s == pytest.approx(200.0)
    r3 = decode_rates(None, _round(12.5, 440), r2)
    assert r3[77].tokens_per_s == pytest.approx(400 / 2.0)
    idle = decode_rates(None, _round(13.0, 500, busy=False), r3)  # done: the last speed stays, no anchor
    assert idle[77] == DecodeRate(pytest.approx(200.0), 12.5, 1, ())  # type: ignore[arg-type]
    new_task = decode_rates(None, _round(14.0, 3, task=6), idle)
    assert new_task[77].anchors == ((0, 6, 3, 14.0),) and new_task[77].tokens_per_s == pytest.approx(200.0)
    assert decode_rates(None, SlotsSnapshot(15.0, ()), new_task) == {}  # the runner is gone


def test_decode_speed_reaches_the_row_as_runner_sourced() -> None:
    state = state_of(ps_snapshot([row(TINY, 8192, 60_000_000)]))
    for t, n in ((10.0, 10), (11.0, 160)):
        state = fold_slots_with_alerts(state, _round(t, n))
    (v,) = state.models
    assert (v.decode_tps.value, v.decode_tps.source) == (pytest.approx(150.0), "runner")
    assert v.slots is not None and v.slots.busy == 1


def test_a_busy_slot_that_has_generated_nothing_is_prefilling_runner_sourced() -> None:
    state = state_of(ps_snapshot([row(TINY, 8192, 60_000_000)]))
    state = fold_slots_with_alerts(state, _round(10.0, 0))  # busy, task 5, 900 tokens in its cache, nothing decoded
    (v,) = state.models
    assert v.slots is not None and v.slots.prefill is not None
    p = v.slots.prefill
    assert (p.slot, p.done_tokens, p.total_tokens, p.percent, p.source) == (0, 900, None, None, "runner")
    (v,) = fold_slots_with_alerts(state, _round(11.0, 12)).models  # decoding: the prefill is over
    assert v.slots is not None and v.slots.prefill is None


def test_two_runners_of_the_same_weights_are_told_apart_by_their_context() -> None:
    other = [a for a in ISSUE_ARGV]
    other[other.index("-c") + 1] = "4096"
    p = procs()
    p = ProcSnapshot(taken_at=1.0, servers=p.servers, runners=(runner_of(ISSUE_ARGV, pid=77), runner_of(other, pid=78)))
    (v,) = with_procs(state_of(ps_snapshot([row(TINY, 8192, 60_000_000)])), p).models
    assert v.local.process is not None and v.local.process.pid == 77 and v.parallel.source == "requested"
    (w,) = with_procs(state_of(ps_snapshot([row(TINY, 1024, 60_000_000)])), p).models  # neither: say so
    assert w.local.process is None and w.local.note == "2 runners of these weights: cannot tell which is this one"
    # the server that serves this host (it listens on 11434: OLLAMA_HOST unset) still gives its environment
    assert (w.parallel.value, w.parallel.source) == (2, "service") and w.kv_type.value == "q8_0"


def test_the_hosts_server_is_found_by_its_listen_port_and_only_its_runners_count() -> None:
    mine = ServerProcess(
        pid=1,
        cmdline=("ollama", "serve"),
        env=ServiceEnv(
            values=MappingProxyType({"OLLAMA_HOST": "0.0.0.0:11434", "OLLAMA_KV_CACHE_TYPE": "q8_0"}),
            source="/proc/1/environ",
        ),
    )
    other = ServerProcess(
        pid=2,
        cmdline=("ollama", "serve"),
        env=ServiceEnv(
            values=MappingProxyType({"OLLAMA_HOST": "http://127.0.0.1:18001", "OLLAMA_KV_CACHE_TYPE": "q4_0"}),
            source="/proc/2/environ",
        ),
    )
    theirs = runner_of(ISSUE_ARGV, pid=90)
    theirs = type(theirs)(**{**{f: getattr(theirs, f) for f in theirs.__slots__}, "server_pid": 2, "ppid": 2})
    p = ProcSnapshot(taken_at=1.0, servers=(mine, other), runners=(theirs,))
    (v,) = with_procs(state_of(ps_snapshot([row(TINY, 8192, 60_000_000)])), p).models  # host 127.0.0.1:11434
    assert v.local.process is None  # the runner of the same weights belongs to the server on 18001
    assert (v.kv_type.value, v.kv_type.source) == ("q8_0", "service")
    assert v.kv_type.note == "OLLAMA_KV_CACHE_TYPE=q8_0 (/proc/1/environ)"
    assert ladder.listen_port(other.env) == 18001 and ladder.listen_port(mine.env) == 11434  # type: ignore[arg-type]
    assert ladder.listen_port(env(OLLAMA_HOST="user:pw@[::1]:9000")) == 9000
    assert ladder.listen_port(env()) == 11434


def test_another_server_on_this_machine_takes_the_process_sample_without_the_gpu() -> None:
    from kvtop.model.fold_alerts import fold_procs_with_alerts

    state = state_of(ps_snapshot([row(TINY, 8192, 60_000_000)]))
    new = fold_procs_with_alerts(state, procs())
    (v,) = new.models
    assert new.gpu is None and (v.kv_type.value, v.kv_type.source) == ("q8_0", "requested")
    assert fold_procs_with_alerts(new, procs()) is new  # the same sample again changes nothing


def test_flash_attention_auto_is_not_called_on_in_a_fix() -> None:
    argv = [a if a != "on" else "auto" for a in ISSUE_ARGV]
    state = with_procs(
        state_of(ps_snapshot([row(TINY, 8192, 60_000_000, 55_000_000)])), procs(argv, OLLAMA_NUM_PARALLEL="2")
    )
    (v,) = state.models
    assert (v.flash_attention.value, v.flash_attention.source) == ("auto", "requested")
    (spill,) = [a for a in state.alerts if a.kind == "spill"]
    q4 = [f for f in spill.fixes if f.action.startswith("OLLAMA_KV_CACHE_TYPE=q4_0")]
    assert q4 and "needs flash attention (auto now: llama.cpp decides at load" in q4[0].cost
    assert "on now" not in q4[0].cost


def test_the_detail_views_slot_fill_follows_every_round() -> None:
    state = with_procs(state_of(ps_snapshot([row(TINY, 8192, 60_000_000)])), procs())

    def rnd(t: float, tokens: int) -> SlotsSnapshot:
        return SlotsSnapshot(
            t,
            (
                RunnerSlots(
                    77,
                    40123,
                    blob(TINY),
                    16384,
                    (SlotState(0, 8192, True, 5, tokens, 0), SlotState(1, 8192, False)),
                    props=RunnerProps(8192, 2, None, "b1"),
                ),
            ),
        )

    state = fold_slots_with_alerts(state, rnd(1.0, 512))
    state = fold_slots_with_alerts(state, rnd(2.0, 2048))  # a prefill: nothing decoded, only the fill moves
    (v,) = state.models
    assert v.local.endpoints is not None and v.local.endpoints.slots[0].n_tokens == 2048
    assert v.slots is not None and v.slots.prefill is not None and v.slots.prefill.done_tokens == 2048


@pytest.mark.parametrize(("run", "ctx"), [("default-fa-auto-np1", 2048), ("q4_0-fa-auto-np1", 8192)])
def test_a_requested_auto_agrees_with_what_the_runner_resolved(run: str, ctx: int) -> None:
    # --flash-attn auto on the command line and in the log's spawn line; the runner's log says what it chose
    lines = llama_server_run(run, blob(TINY))
    argv = (Path(__file__).parent.parent / "fixtures" / "llama_server" / f"{run}.cmd").read_text().split()
    argv = [f"/m/blobs/{blob(TINY)}" if "blobs/sha256-" in a else a for a in argv]
    state = with_procs(state_of(ps_snapshot([row(TINY, ctx, 60_000_000)]), lines), procs(argv, OLLAMA_NUM_PARALLEL="1"))
    (v,) = state.models
    assert (v.flash_attention.value, v.flash_attention.source) == ("enabled", "allocated")
    assert not [d for d in v.differences if d.startswith("flash attention")], v.differences
    assert "the log does not say what the runner resolved" not in " ".join(v.differences)
