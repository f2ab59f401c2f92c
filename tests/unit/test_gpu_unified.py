"""More GPUs: NVIDIA unified memory (GB10 / DGX Spark, Jetson), Apple Silicon through
``ioreg``, Intel through sysfs; each through ``GpuSource``'s own selection, never a crash."""

from __future__ import annotations

import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from kvtop.model.gpu import gpu_json, gpu_views
from kvtop.sources.gpu import GpuSource
from kvtop.sources.gpu_apple import parse_ioreg
from kvtop.sources.gpu_sysfs import read_intel_sysfs
from tests.fakes.nvml import FakeGpu, FakeNvml, missing_library
from tests.fakes.sysfs import add_amd_card, add_intel_card

GiB = 1024**3
MiB = 1024**2
IOREG = Path(__file__).resolve().parents[1] / "fixtures" / "ioreg"
M1_PRO = (IOREG / "m1-pro-macbook-pro-16-monterey.txt").read_text(encoding="utf-8")

RAM_TOTAL, RAM_AVAILABLE, RAM_USED = 128 * GiB, 90 * GiB, 36 * GiB
PSUTIL = SimpleNamespace(
    virtual_memory=lambda: SimpleNamespace(total=RAM_TOTAL, available=RAM_AVAILABLE, used=RAM_USED),
    swap_memory=lambda: SimpleNamespace(total=0, used=0),
)


def _source(tmp_path: Path, **kwargs: Any) -> GpuSource:
    kwargs.setdefault("platform", "linux")
    kwargs.setdefault("psutil_module", PSUTIL)
    return GpuSource(sysfs_root=tmp_path, clock=lambda: 1000.0, **kwargs)


# --------------------------------------------------------------------------------------------
# NVIDIA unified memory


def _gb10(**kwargs: Any) -> FakeGpu:
    return FakeGpu(
        name="NVIDIA GB10",
        uuid="GPU-gb10-0000",
        bus_id="0000000F:01:00.0",
        unsupported={"nvmlDeviceGetMemoryInfo"},
        compute=[(4101, 9 * GiB)],
        **kwargs,
    )


def test_nvml_memory_not_supported_is_unified_memory_from_the_system(tmp_path: Path) -> None:
    fake = FakeNvml([_gb10()])
    snap = _source(tmp_path, nvml=fake.module).sample_sync()
    assert snap.ok and snap.backend == "nvml"
    d = snap.devices[0]
    assert d.unified_memory is True
    assert (d.memory_total_bytes, d.memory_free_bytes, d.memory_used_bytes) == (RAM_TOTAL, RAM_AVAILABLE, RAM_USED)
    assert d.memory_note is not None and "Not Supported" in d.memory_note and "/proc/meminfo" in d.memory_note
    assert [(p.pid, p.used_memory_bytes) for p in d.processes or ()] == [(4101, 9 * GiB)]  # per-process figures kept
    assert snap.status.endswith("; GPU 0 shares system RAM (unified memory: memory figures from /proc/meminfo)")
    doc = gpu_json(snap, None, ())["gpus"][0]
    assert doc["unified_memory"] is True and doc["memory"]["total"] == RAM_TOTAL
    assert doc["memory"]["free"] == RAM_AVAILABLE and doc["memory_note"] == d.memory_note


def test_a_discrete_gpu_keeps_its_own_memory(tmp_path: Path) -> None:
    fake = FakeNvml([FakeGpu(used=3 * GiB)])
    d = _source(tmp_path, nvml=fake.module).sample_sync().devices[0]
    assert d.unified_memory is False and d.memory_note is None
    assert d.memory_total_bytes == 48 * GiB and d.memory_used_bytes == 3 * GiB


def test_unified_memory_without_psutil_is_unknown_not_invented(tmp_path: Path) -> None:
    fake = FakeNvml([_gb10()])
    broken = SimpleNamespace(
        virtual_memory=lambda: (_ for _ in ()).throw(OSError("no /proc")),
        swap_memory=lambda: (_ for _ in ()).throw(OSError("no /proc")),
    )
    d = _source(tmp_path, nvml=fake.module, psutil_module=broken).sample_sync().devices[0]
    assert d.unified_memory is False and d.memory_total_bytes is None and d.memory_free_bytes is None


# --------------------------------------------------------------------------------------------
# Apple Silicon


def test_recorded_ioreg_output_is_parsed() -> None:
    nodes = parse_ioreg(M1_PRO)
    assert len(nodes) == 1
    node = nodes[0]
    assert node["class"] == "AGXAcceleratorG13X" and node["model"] is None
    assert node["stats"]["In use system memory"] == 340983808
    assert node["stats"]["Alloc system memory"] == 1214005248
    assert node["stats"]["Device Utilization %"] == 2


def test_apple_gpu_from_ioreg_shares_system_ram(tmp_path: Path) -> None:
    calls: list[int] = []

    def ioreg() -> str:
        calls.append(1)
        return M1_PRO

    snap = _source(tmp_path, platform="darwin", ioreg=ioreg).sample_sync()
    assert calls == [1]
    assert snap.ok and snap.backend == "ioreg" and snap.problem is None
    assert snap.status == (
        "GPU telemetry: 1 Apple GPU (ioreg; unified memory: shares system RAM; no per-process GPU memory)"
    )
    d = snap.devices[0]
    assert (d.vendor, d.name, d.unified_memory) == ("apple", "Apple GPU (AGXAcceleratorG13X)", True)
    assert d.memory_used_bytes == 340983808 and d.memory_allocated_bytes == 1214005248
    assert d.gpu_util_percent == 2
    assert (d.memory_total_bytes, d.memory_free_bytes) == (RAM_TOTAL, RAM_AVAILABLE)
    assert d.processes is None and d.processes_note == "macOS gives no per-process GPU memory without sudo"
    doc = gpu_json(snap, None, ())["gpus"][0]
    assert doc["memory"]["allocated"] == 1214005248 and doc["memory"]["used"] == 340983808
    assert doc["unified_memory"] is True and doc["utilization"]["gpu"] == 2
    assert gpu_views(snap, None, ())[0].device is d


def test_model_name_and_core_count_are_used_when_ioreg_gives_them(tmp_path: Path) -> None:
    text = M1_PRO.replace(
        '      "IONameMatched"', '      "model" = "Apple M1 Pro"\n      "gpu-core-count" = 16\n      "IONameMatched"'
    )
    d = _source(tmp_path, platform="darwin", ioreg=lambda: text).sample_sync().devices[0]
    assert d.name == "Apple M1 Pro, 16 GPU cores"


@pytest.mark.parametrize(
    ("error", "status", "problem"),
    [
        (
            FileNotFoundError(2, "No such file or directory: 'ioreg'"),
            "GPU telemetry: not available (the ioreg command is not found)",
            "not_supported",
        ),
        (
            subprocess.TimeoutExpired(["ioreg"], 2.0),
            "GPU telemetry: ioreg did not answer within 2 s; kvtop keeps trying",
            "error",
        ),
        (
            PermissionError(13, "Permission denied"),
            "GPU telemetry: ioreg failed ([Errno 13] Permission denied); kvtop keeps trying",
            "error",
        ),
    ],
)
def test_ioreg_failures_are_a_sentence_not_a_crash(tmp_path: Path, error: Exception, status: str, problem: str) -> None:
    def ioreg() -> str:
        raise error

    snap = _source(tmp_path, platform="darwin", ioreg=ioreg).sample_sync()
    assert (snap.status, snap.problem, snap.ok) == (status, problem, False)
    assert snap.system is not None and snap.system.ram_total_bytes == RAM_TOTAL  # RAM still read


def test_a_mac_without_apple_silicon_says_so(tmp_path: Path) -> None:
    snap = _source(tmp_path, platform="darwin", ioreg=lambda: "").sample_sync()
    assert snap.problem == "not_supported" and not snap.devices
    assert "ioreg lists no AGXAccelerator" in snap.status


def test_the_real_ioreg_command_is_absent_here(tmp_path: Path) -> None:
    """On this Linux machine there is no ioreg: the default runner's failure is the sentence."""
    snap = _source(tmp_path, platform="darwin").sample_sync()
    assert snap.status == "GPU telemetry: not available (the ioreg command is not found)"


# --------------------------------------------------------------------------------------------
# Intel through sysfs


def test_xe_vram_size_is_read_per_tile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    missing_library().install(monkeypatch)
    add_intel_card(tmp_path, 1, tiles=(12 * GiB,), temp_mc=48000, power_uw=35_000_000)
    snap = _source(tmp_path).sample_sync()
    assert snap.ok and snap.backend == "intel-sysfs"
    assert snap.status == "GPU telemetry: 1 Intel GPU (sysfs; VRAM size only, no use or per-process memory)"
    d = snap.devices[0]
    assert (d.vendor, d.index, d.name, d.bus_id) == ("intel", 0, "Intel GPU 0xe20b (card1, xe)", "0000:03:00.0")
    assert d.memory_total_bytes == 12 * GiB and d.memory_used_bytes is None and d.memory_free_bytes is None
    assert (d.temperature_c, d.power_draw_mw) == (48, 35_000)
    assert d.memory_note == (
        "VRAM size from sysfs tileN/physical_vram_size_bytes (xe); the kernel exposes no VRAM use for Intel GPUs"
    )


def test_multi_tile_xe_and_the_memory_subdirectory(tmp_path: Path) -> None:
    add_intel_card(tmp_path, 0, tiles=(64 * GiB, 64 * GiB), tile_subdir="memory")
    devices, notes = read_intel_sysfs(tmp_path)
    assert [d.memory_total_bytes for d in devices] == [128 * GiB] and notes == []


def test_out_of_tree_i915_lmem_total(tmp_path: Path) -> None:
    add_intel_card(tmp_path, 0, driver="i915", lmem_total=16 * GiB, device_id="0x56a0")
    devices, _ = read_intel_sysfs(tmp_path)
    assert devices[0].memory_total_bytes == 16 * GiB
    assert devices[0].memory_note is not None and "lmem_total_bytes (i915)" in devices[0].memory_note


def test_mainline_i915_is_not_supported_with_the_reason(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    missing_library().install(monkeypatch)
    add_intel_card(tmp_path, 0, driver="i915", device_id="0x46a6")
    snap = _source(tmp_path).sample_sync()
    assert not snap.ok and not snap.devices and snap.problem == "no_library"
    assert snap.notes == (
        "Intel GPU 0x46a6 (card0, i915): not supported: the i915 driver exposes no GPU memory"
        " in sysfs (an integrated GPU uses system RAM; mainline i915 has no VRAM counters)",
    )


def test_amd_and_intel_together(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    missing_library().install(monkeypatch)
    add_amd_card(tmp_path, 0, product="AMD Radeon PRO W7800")
    add_intel_card(tmp_path, 1, tiles=(16 * GiB,))
    snap = _source(tmp_path).sample_sync()
    assert snap.backend == "sysfs" and [(d.vendor, d.index) for d in snap.devices] == [("amd", 0), ("intel", 1)]
    assert snap.status == (
        "GPU telemetry: 1 AMD GPU, 1 Intel GPU (sysfs; no per-process GPU memory; Intel: VRAM size only)"
    )


def test_unreadable_sysfs_never_crashes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    missing_library().install(monkeypatch)
    dev = add_intel_card(tmp_path, 0, tiles=(8 * GiB,))
    (dev / "tile0" / "physical_vram_size_bytes").write_text("garbage\n", encoding="utf-8")
    (dev / "driver").unlink()
    snap = _source(tmp_path).sample_sync()
    assert not snap.devices and snap.notes and "not supported" in snap.notes[0]


def test_the_exporter_says_which_gpu_shares_ram(tmp_path: Path) -> None:
    from tests.unit.test_prometheus import scrape, value

    snap = _source(tmp_path, platform="darwin", ioreg=lambda: M1_PRO).sample_sync()
    fams = scrape([], snap)
    ids = {"gpu": "0", "name": "Apple GPU (AGXAcceleratorG13X)", "uuid": ""}
    assert value(fams, "kvtop_gpu_unified_memory", **ids) == 1
    assert value(fams, "kvtop_gpu_memory_used_bytes", **ids) == 340983808
    assert value(fams, "kvtop_gpu_memory_total_bytes", **ids) == RAM_TOTAL
    assert value(fams, "kvtop_gpu_utilization_ratio", **ids) == pytest.approx(0.02)
