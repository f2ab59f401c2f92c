"""Why a load landed where it did (``kvtop.model.placement_reason``), on real logs of tests/fixtures/logs:

- 001 (ollama/ollama#9181, 0.5.x, 4 × CUDA 22.0 GiB free, 44/81 layers split 11,11,11,11): not enough free
  memory on the four GPUs together;
- 054 (ollama/ollama PR build 0.10, 2 GPUs, 40/41 layers, the output layer on the CPU) alone and beside a GPU
  sample with a third GPU left out;
- 045 (ollama/ollama#9808, 3 × CUDA, 30.6 GiB of KV cache in host buffers);
- 047 (PR #6279 build, the ``server config`` line of a 4 × 4090 server: OLLAMA_SCHED_SPREAD false,
  OLLAMA_GPU_OVERHEAD 0) as the settings;
- Era C: ollama/ollama#16416's real fit pass with the overflow line docs/ollama-internals.md §4.5 quotes (as
  tests/unit/test_logparse_posted.py inserts it), beside GPU samples of two GPUs.

Ollama's rules these follow are in docs/placement.md.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kvtop.logparse import group_loads
from kvtop.logparse.load_build import Load
from kvtop.logparse.parser import iter_events
from kvtop.logparse.values import GIB, MIB
from kvtop.model.gpu_snapshots import GpuDevice, GpuSnapshot, ServiceEnv
from kvtop.model.known import Known
from kvtop.model.placement_reason import placement_report, placement_settings
from kvtop.model.placement_text import placement_rows

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"

FIT_LINE = "common_params_fit_impl:   - ROCm0 (AMD …): 25 layers ( 5 overflowing),  11065 MiB used,   1036 MiB free"
"""docs/ollama-internals.md §4.5's quote of the Era C overflow line (no posted log has one)."""


def _lines(prefix: str) -> list[str]:
    (path,) = LOGS.glob(f"{prefix}*.log")
    lines = path.read_text(encoding="utf-8").splitlines()
    return [x for x in lines if not x.startswith("#")]


def _posted(prefix: str) -> list[str]:
    (path,) = (LOGS / "posted").glob(f"{prefix}*.log")
    return [x for x in path.read_text(encoding="utf-8").splitlines() if not x.startswith("#")]


def _load(lines: list[str]) -> Load:
    (load,) = group_loads(list(iter_events(lines)))
    return load


def _config_047() -> dict[str, str]:
    (config,) = [e.env for e in iter_events(_lines("047")) if e.kind == "server_config"]
    return dict(config)


def _sample(*free_gib: float) -> GpuSnapshot:
    devices = tuple(
        GpuDevice(index=i, name="NVIDIA GeForce RTX 4090", memory_total_bytes=24 * GIB, memory_free_bytes=int(f * GIB))
        for i, f in enumerate(free_gib)
    )
    return GpuSnapshot(taken_at=0.0, status="ok", ok=True, devices=devices)


GIB_22 = 23622320128  # "22.0 GiB" as Ollama prints memory.available (corpus 001)


def test_001_four_gpus_full_not_enough_with_sized_fixes() -> None:
    load = _load(_lines("001"))
    r = placement_report(load, settings=placement_settings(None, _config_047()))
    assert r is not None
    assert [(d.name, d.free_bytes.value, d.free_bytes.source, d.layers) for d in r.devices] == [
        (f"CUDA{i}", GIB_22, "reported", 11) for i in range(4)
    ]
    assert {d.placed_bytes.value for d in r.devices} == {23407571763}  # "21.8 GiB" memory.required.allocations
    assert {d.placed_bytes.source for d in r.devices} == {"estimated"}
    assert (r.layers_gpu, r.layers_total, r.cpu_layers) == (44, 81, 37)
    # memory.required.full 127.4 GiB − partial 87.1 GiB
    assert (r.cpu_bytes.value, r.cpu_bytes.source) == (136794708378 - 93522912870, "estimated")
    assert r.reason == "not_enough"
    assert "had 88.0 GiB free together — already spread over every GPU" in r.reason_text
    assert "~127.4 GiB it needs fully offloaded" in r.reason_text
    # the settings of the log's server config line, marked as the server's
    assert r.settings["OLLAMA_SCHED_SPREAD"] == Known("false", "service", "the log's server config line")
    assert r.settings["OLLAMA_GPU_OVERHEAD"].value == "0"
    actions = [(f.action, f.enough) for f in r.fixes]
    assert actions == [
        ("num_ctx 2048", False),  # the whole KV (19.5 GiB at 64000 cells) is smaller than the 40.3 GiB
        ("OLLAMA_KV_CACHE_TYPE=q8_0", False),
        ("a smaller quantization or more GPU memory", None),
    ]
    per_cell = 20937965568 / 64000  # memory.required.kv 19.5 GiB over --ctx-size 64000
    assert r.fixes[0].bytes == int((64000 - 2048) * per_cell)
    assert r.fixes[1].bytes == 20937965568 // 2
    # never asks for what is set: the spread is not proposed (every GPU is used), nor a lower overhead (0)
    assert not any("SCHED_SPREAD" in f.action or "GPU_OVERHEAD" in f.action for f in r.fixes)


def test_001_kv_cache_type_fix_left_out_when_already_quantized() -> None:
    load = _load(_lines("001"))
    env = ServiceEnv(values={"OLLAMA_KV_CACHE_TYPE": "q8_0"}, source="/proc/1/environ")
    r = placement_report(load, settings=placement_settings(env))
    assert r is not None
    assert "OLLAMA_KV_CACHE_TYPE=q8_0" not in [f.action for f in r.fixes]
    assert r.settings["OLLAMA_KV_CACHE_TYPE"] == Known("q8_0", "service", "the server's environment (/proc/1/environ)")
    assert r.settings["OLLAMA_SCHED_SPREAD"].source == "default"  # read, unset


def test_001_gpu_overhead_is_the_reason_when_its_reserve_holds_the_overflow() -> None:
    # corpus 001's offload line with memory.gpu_overhead="12.0 GiB" in place of "0 B" (the field Ollama prints
    # OLLAMA_GPU_OVERHEAD in, llm/memory.go MemoryEstimate.log; no posted log has a non-zero one)
    lines = [x.replace('memory.gpu_overhead="0 B"', 'memory.gpu_overhead="12.0 GiB"') for x in _lines("001")]
    r = placement_report(_load(lines))
    assert r is not None and r.reason == "gpu_overhead"
    assert "reserves 12.0 GiB on each of 4 GPU(s), 48.0 GiB in all" in r.reason_text
    (fix,) = r.fixes
    # 40.3 GiB over 4 GPUs: each keeps 12 GiB − 10.08 GiB, rounded down to MiB
    keep = (12 * GIB - -(-(136794708378 - 93522912870) // 4)) // MIB * MIB
    assert fix.action == f"OLLAMA_GPU_OVERHEAD={keep}" and fix.enough is True


def test_054_two_gpus_output_layer_on_cpu() -> None:
    r = placement_report(_load(_lines("054")))
    assert r is not None
    assert [(d.name, d.placed_bytes.value, d.placed_bytes.source, d.free_bytes.value) for d in r.devices] == [
        ("CUDA1", 11811160064, "allocated", None),
        ("CUDA0", 11811160064, "allocated", None),
    ]
    assert (r.cpu_layers, r.cpu_bytes.value, r.cpu_bytes.source) == (1, 2254857830, "allocated")  # "2.1 GiB"
    assert r.reason == "not_enough" and "CUDA1, CUDA0 were full" in r.reason_text
    assert r.fixes == ()  # no free memory, no context in the excerpt: nothing to size


def test_054_beside_a_sample_with_a_third_gpu_left_out() -> None:
    sample = _sample(1.0, 1.5, 20.0)
    own = {0: 12 * GIB, 1: 12 * GIB}
    r = placement_report(_load(_lines("054")), gpus=sample, own_bytes=own, others=[("qwen3:8b", 6 * GIB)])
    assert r is not None and r.reason == "gpu_skipped"
    by_name = {d.name: d for d in r.devices}
    assert by_name["CUDA0"].free_bytes == Known(
        13 * GIB, "estimated", "the GPU sample's free memory + this model's bytes on it"
    )
    assert by_name["GPU 2"].used is False and by_name["GPU 2"].free_bytes.value == 20 * GIB
    assert "GPU 2 had 20.0 GiB free" in r.reason_text
    assert [(f.action, f.bytes, f.enough) for f in r.fixes] == [("unload qwen3:8b", 6 * GIB, True)]


def test_045_kv_cache_in_host_buffers() -> None:
    r = placement_report(_load(_lines("045")))
    assert r is not None
    assert [d.name for d in r.devices] == ["CUDA0", "CUDA1", "CUDA2"]
    assert (r.cpu_bytes.value, r.cpu_bytes.note) == (31360 * MIB, "the runner's host buffers: KV cache")
    assert r.reason == "not_enough"


def test_051_the_schedulers_single_gpu_choice() -> None:
    # "new model will fit in available VRAM in single GPU, loading … gpu=GPU-… available=15813967872
    # required="11.3 GiB"" (server/sched.go pickBestFullFitByLibrary, spread off)
    load = _load(_lines("051"))
    r = placement_report(load)
    assert r is not None and r.reason == "fits" and r.fixes == ()
    (gpu,) = r.devices
    assert gpu.name == "GPU-00000000-0000-0000-0000-000000000000"
    assert (gpu.free_bytes.value, gpu.free_bytes.source) == (15813967872, "reported")
    assert (gpu.placed_bytes.value, gpu.placed_bytes.source) == (round(11.3 * GIB), "estimated")
    assert "the scheduler gave it one GPU because it fits there (~11.3 GiB of 14.7 GiB free)" in r.reason_text


def _era_c(*extra: str) -> Load:
    lines = _posted("ollama-16416")
    at = next(i for i, x in enumerate(lines) if "projected to use" in x)
    lines[at + 1 : at + 1] = [FIT_LINE, *extra]
    load = _load(lines)
    assert load.era == "C"
    return load


def test_era_c_one_gpu_chosen_with_spread_off_proposes_the_spread() -> None:
    load = _era_c()
    env = ServiceEnv(values={}, source="/proc/7/environ")
    r = placement_report(load, settings=placement_settings(env), gpus=_sample(1.0, 22.0))
    assert r is not None and r.reason == "single_gpu"
    rocm = r.devices[0]
    assert (rocm.name, rocm.layers, rocm.overflowing) == ("ROCm0", 25, 5)
    assert (rocm.placed_bytes.value, rocm.free_bytes.value) == (11065 * MIB, (11065 + 1036) * MIB)
    assert [d.name for d in r.devices if not d.used] == ["GPU 1"]
    (fix,) = r.fixes
    assert fix.action == "OLLAMA_SCHED_SPREAD=1"


def test_era_c_spread_already_on_is_not_asked_again() -> None:
    env = ServiceEnv(values={"OLLAMA_SCHED_SPREAD": "1"}, source="/proc/7/environ")
    r = placement_report(_era_c(), settings=placement_settings(env), gpus=_sample(1.0, 22.0))
    assert r is not None and r.reason == "gpu_skipped"
    assert "OLLAMA_SCHED_SPREAD=1" not in [f.action for f in r.fixes]


def test_era_c_gpu_hidden_by_cuda_visible_devices() -> None:
    env = ServiceEnv(values={"CUDA_VISIBLE_DEVICES": "0"}, source="systemctl show ollama.service")
    r = placement_report(_era_c(), settings=placement_settings(env), gpus=_sample(1.0, 22.0))
    assert r is not None and r.reason == "hidden"
    assert "CUDA_VISIBLE_DEVICES=0 hides 1 of 2 GPUs" in r.reason_text
    (fix,) = r.fixes
    assert (fix.action, fix.bytes) == ("unset CUDA_VISIBLE_DEVICES", 22 * GIB)


def test_era_c_fit_margin_is_the_reason_when_the_cut_is_within_it() -> None:
    # The cut line in llama.cpp's format string (common_params_fit_impl, "cannot fulfill margin of %d MiB, need to
    # reduce device memory by %d MiB"; as tests/unit/test_logparse_forms.py builds it).
    cut = "common_params_fit_impl: cannot fulfill margin of 1024 MiB, need to reduce device memory by 800 MiB"
    r = placement_report(_era_c(cut))
    assert r is not None and r.reason == "fit_margin"
    assert (r.cpu_bytes.value, r.cpu_bytes.source) == (800 * MIB, "runner")
    assert [f.action for f in r.fixes][-1] == "LLAMA_ARG_FIT_TARGET=224"
    env = ServiceEnv(values={"LLAMA_ARG_FIT_TARGET": "200"}, source="/proc/7/environ")
    again = placement_report(_era_c(cut), settings=placement_settings(env))
    assert again is not None and "LLAMA_ARG_FIT_TARGET=224" not in [f.action for f in again.fixes]


@pytest.mark.parametrize("prefix", ["001", "054", "045"])
def test_rows_render_every_device_and_the_cpu(prefix: str) -> None:
    r = placement_report(_load(_lines(prefix)))
    assert r is not None
    rows = placement_rows(r.to_json())
    labels = [label for label, _ in rows]
    assert labels[0] == "why" and "CPU" in labels
    assert [label for label in labels if label.startswith("CUDA")] == [d.name for d in r.devices]


def test_001_rows_carry_marks_and_fixes() -> None:
    r = placement_report(_load(_lines("001")), settings=placement_settings(None, _config_047()))
    assert r is not None
    rows = dict((label, text) for label, text in placement_rows(r.to_json()) if label != "fix")
    assert rows["CUDA0"] == "11 layers, placed ~21.8 GiB, free 22.0 GiB at load"
    assert rows["CPU"] == "37 layers, ~40.3 GiB overflowed (memory.required.full − partial)"
    assert "OLLAMA_SCHED_SPREAD false=" in rows["settings"]


def test_era_c_spread_fix_is_sized_per_unused_gpu() -> None:
    # The fit's cut line in llama.cpp's format string (as tests/unit/test_logparse_forms.py builds it): 6210 MiB cut.
    cut = "common_params_fit_impl: cannot fulfill margin of 1024 MiB, need to reduce device memory by 6210 MiB"
    r = placement_report(_era_c(cut), gpus=_sample(1.0, 22.0, 3.0))
    assert r is not None and r.reason == "single_gpu"
    assert (r.cpu_bytes.value, r.cpu_bytes.source) == (6210 * MIB, "runner")
    (fix,) = r.fixes
    # most free first, each up to its free memory less the 1024 MiB margin: GPU 1 takes it all
    assert (fix.action, fix.bytes, fix.enough) == ("OLLAMA_SCHED_SPREAD=1", 6210 * MIB, True)
    assert fix.detail == "the overflow would go to GPU 1 ~6.1 GiB"
