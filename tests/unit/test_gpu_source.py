"""GpuSource against a fake pynvml (installed as ``sys.modules["pynvml"]``), a fake sysfs tree and
the real pynvml on this machine (no NVIDIA driver: the source must say so, not raise)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from kvtop.sources import gpu_nvml
from kvtop.sources.gpu import STATUS_NO_PYNVML, GpuSource
from kvtop.sources.gpu_nvml import STATUS_NO_LIBRARY, GpuLost, NvmlFatal, NvmlUnavailable, nvml_query
from kvtop.sources.gpu_sysfs import read_amd_sysfs
from tests.fakes.nvml import ERROR_CODES, FakeGpu, FakeNvml, GiB, MiB, missing_library, two_gpus
from tests.fakes.sysfs import add_amd_card, add_other_card

FAKE_PSUTIL = SimpleNamespace(
    virtual_memory=lambda: SimpleNamespace(total=64 * GiB, available=40 * GiB, used=22 * GiB),
    swap_memory=lambda: SimpleNamespace(total=8 * GiB, used=0),
)


def _source(tmp_path: Path, **kwargs: Any) -> GpuSource:
    """A source that imports ``pynvml`` (whatever the test installed) and reads sysfs under tmp_path."""
    kwargs.setdefault("platform", "linux")
    kwargs.setdefault("psutil_module", FAKE_PSUTIL)
    return GpuSource(sysfs_root=tmp_path, clock=lambda: 1000.0, **kwargs)


# --------------------------------------------------------------------------------------------
# the guarded call


@pytest.mark.parametrize(
    "code",
    [
        ERROR_CODES[c]
        for c in (
            "NOT_SUPPORTED",
            "FUNCTION_NOT_FOUND",
            "NO_PERMISSION",
            "NOT_FOUND",
            "INVALID_ARGUMENT",
            "UNKNOWN",
            "TIMEOUT",
        )
    ],
)
def test_nvml_query_field_errors_become_none(code: int) -> None:
    fake = FakeNvml()

    def failing(*_: Any) -> None:
        raise fake.module.NVMLError(code)

    fake.module.nvmlDeviceGetPowerUsage = failing
    assert nvml_query(fake.module, "nvmlDeviceGetPowerUsage", object()) is None


@pytest.mark.parametrize(
    ("code", "exc"),
    [
        (ERROR_CODES["GPU_IS_LOST"], GpuLost),
        (ERROR_CODES["RESET_REQUIRED"], GpuLost),
        (ERROR_CODES["LIBRARY_NOT_FOUND"], NvmlUnavailable),
        (ERROR_CODES["DRIVER_NOT_LOADED"], NvmlUnavailable),
        (ERROR_CODES["LIB_RM_VERSION_MISMATCH"], NvmlUnavailable),
        (ERROR_CODES["UNINITIALIZED"], NvmlUnavailable),
    ],
)
def test_nvml_query_raises_only_when_nvml_or_the_device_is_gone(code: int, exc: type[Exception]) -> None:
    fake = FakeNvml()

    def failing(*_: Any) -> None:
        raise fake.module.NVMLError(code)

    fake.module.nvmlDeviceGetName = failing
    with pytest.raises(exc) as info:
        nvml_query(fake.module, "nvmlDeviceGetName", object())
    assert isinstance(info.value, NvmlFatal) and info.value.code == code


def test_nvml_query_subclass_from_the_real_constructor_shape() -> None:
    fake = FakeNvml()
    err = fake.module.NVMLError(ERROR_CODES["GPU_IS_LOST"])
    assert type(err).__name__ == "NVMLError_GpuIsLost" and isinstance(err, fake.module.NVMLError_GpuIsLost)


def test_nvml_query_missing_function_mismatch_and_odd_errors() -> None:
    fake = FakeNvml()
    assert nvml_query(fake.module, "nvmlDeviceGetSomethingNew", 1) is None

    def mismatch(*_: Any) -> None:
        raise fake.module.NVMLLibraryMismatchError("use the _v2 function")

    def odd(*_: Any) -> None:
        raise UnicodeDecodeError("utf-8", b"\xff", 0, 1, "bad")

    fake.module.f1, fake.module.f2 = mismatch, odd
    assert nvml_query(fake.module, "f1") is None
    assert nvml_query(fake.module, "f2") is None
    with pytest.raises(NvmlFatal):
        nvml_query(fake.module, "f2", required=True)
    with pytest.raises(NvmlFatal) as info:
        nvml_query(FakeNvml(init_error=ERROR_CODES["NO_PERMISSION"]).module, "nvmlInit", required=True)
    assert info.value.code == ERROR_CODES["NO_PERMISSION"]


# --------------------------------------------------------------------------------------------
# two GPUs


async def test_two_gpus_every_field(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeNvml(two_gpus())
    fake.install(monkeypatch)
    snap = await _source(tmp_path).sample()
    assert snap.ok and snap.backend == "nvml" and snap.problem is None
    assert snap.status == "GPU telemetry: 2 NVIDIA GPUs (NVML, driver 550.54.15)"
    assert snap.driver_version == "550.54.15"
    d0, d1 = snap.devices
    assert (d0.index, d0.name, d0.uuid, d0.bus_id) == (
        0,
        "NVIDIA RTX A6000",
        "GPU-aaaaaaaa-0000-0000-0000-000000000000",
        "00000000:01:00.0",
    )
    # v2 memory: reserved apart, not counted as free
    assert d0.memory_total_bytes == 48 * GiB
    assert d0.memory_reserved_bytes == 512 * MiB
    assert d0.memory_used_bytes == 20 * GiB
    assert d0.memory_free_bytes == 48 * GiB - 512 * MiB - 20 * GiB
    assert (d0.gpu_util_percent, d0.memory_util_percent, d0.temperature_c) == (45, 20, 61)
    assert (d0.power_draw_mw, d0.power_limit_mw) == (250_000, 300_000)
    assert [(p.pid, p.used_memory_bytes, p.kinds) for p in d0.processes or ()] == [
        (4101, 5 * GiB, ("compute",)),
        (4102, 9 * GiB, ("compute",)),
        (7777, 4 * GiB, ("compute",)),
    ]
    assert [(p.pid, p.kinds) for p in d1.processes or ()] == [(1234, ("graphics",)), (4102, ("compute",))]
    assert snap.pids == (1234, 4101, 4102, 7777)
    assert snap.system is not None and snap.system.swap_total_bytes == 8 * GiB
    assert snap.taken_at == 1000.0


async def test_unsupported_fields_are_not_available(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gpus = two_gpus()
    gpus[1].unsupported = {
        "nvmlDeviceGetPowerUsage",
        "nvmlDeviceGetEnforcedPowerLimit",
        "nvmlDeviceGetTemperature",
        "nvmlDeviceGetUtilizationRates",
        "nvmlDeviceGetComputeRunningProcesses",
        "nvmlDeviceGetGraphicsRunningProcesses",
        "nvmlDeviceGetPciInfo",
    }
    FakeNvml(gpus).install(monkeypatch)
    snap = await _source(tmp_path).sample()
    d1 = snap.devices[1]
    assert snap.ok and d1.error is None
    assert (d1.power_draw_mw, d1.power_limit_mw, d1.temperature_c, d1.gpu_util_percent, d1.bus_id) == (None,) * 5
    assert d1.processes is None and d1.processes_note
    assert d1.memory_total_bytes == 24 * GiB  # what is supported is still read


async def test_old_driver_v1_memory_and_v2_process_functions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gpus = two_gpus()
    gpus[0].no_memory_v2 = True  # FunctionNotFound: the driver predates nvmlDeviceGetMemoryInfo_v2
    gpus[0].no_processes_v3 = True  # pynvml's unversioned call raises NVMLLibraryMismatchError
    FakeNvml(gpus).install(monkeypatch)
    d0 = (await _source(tmp_path).sample()).devices[0]
    assert d0.memory_reserved_bytes is None
    assert d0.memory_used_bytes == 20 * GiB + 512 * MiB  # v1 counts the reserve as used
    assert [p.pid for p in d0.processes or ()] == [4101, 4102, 7777]


async def test_wddm_process_memory_not_available(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    FakeNvml([FakeGpu(compute=[(42, None)], used=GiB)]).install(monkeypatch)
    d0 = (await _source(tmp_path).sample()).devices[0]
    assert d0.processes is not None and d0.processes[0].used_memory_bytes is None
    assert "WSL2" in (d0.processes_note or "")


# --------------------------------------------------------------------------------------------
# failures and recovery


async def test_gpu_lost_mid_run_then_recovers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeNvml(two_gpus())
    fake.install(monkeypatch)
    source = _source(tmp_path)
    assert (await source.sample()).problem is None
    fake.lose(1)
    snap = await source.sample()
    assert snap.ok and snap.problem == "lost"
    assert "GPU 1 is lost" in snap.status
    lost = snap.devices[1]
    assert lost.error is not None and "lost" in lost.error
    assert lost.name == "NVIDIA GeForce RTX 4090"  # remembered from before
    assert snap.devices[0].error is None and snap.devices[0].memory_total_bytes == 48 * GiB
    inits = fake.init_calls
    snap = await source.sample()  # still lost: NVML is initialised again to re-enumerate
    assert fake.init_calls == inits + 1 and snap.problem == "lost"
    fake.gpus[1].lost = False
    snap = await source.sample()
    snap = await source.sample()
    assert snap.problem is None and all(d.error is None for d in snap.devices) and len(snap.devices) == 2


async def test_device_vanishes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeNvml(two_gpus())
    fake.install(monkeypatch)
    source = _source(tmp_path)
    await source.sample()
    gone = fake.vanish(1)
    snap = await source.sample()
    assert snap.ok and snap.problem == "vanished"
    assert "GPU 1 (NVIDIA GeForce RTX 4090) vanished" in snap.status
    assert [(d.index, d.error is None) for d in snap.devices] == [(0, True), (1, False)]
    assert "vanished" in (snap.devices[1].error or "")
    fake.gpus.append(gone)
    snap = await source.sample()
    assert snap.problem is None and len(snap.devices) == 2


async def test_library_missing_says_so_and_recovers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = missing_library()
    fake.install(monkeypatch)
    source = _source(tmp_path)
    snap = await source.sample()
    assert snap.status == STATUS_NO_LIBRARY == "GPU telemetry: no NVIDIA driver (NVML library not found)"
    assert (snap.ok, snap.problem, snap.devices, snap.backend) == (False, "no_library", (), None)
    assert snap.system is not None  # RAM and swap are there without a GPU
    fake.init_error = None  # the driver got installed
    fake.gpus.extend(two_gpus())
    snap = await source.sample()
    assert snap.ok and len(snap.devices) == 2


@pytest.mark.parametrize(
    ("code", "problem", "words"),
    [
        (ERROR_CODES["DRIVER_NOT_LOADED"], "no_driver", "NVIDIA driver not loaded"),
        (ERROR_CODES["LIB_RM_VERSION_MISMATCH"], "version_mismatch", "version mismatch"),
        (ERROR_CODES["NO_PERMISSION"], "no_permission", "no permission"),
        (ERROR_CODES["UNKNOWN"], "error", "NVML failed (Unknown Error)"),
    ],
)
async def test_init_failures_in_plain_words(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int, problem: str, words: str
) -> None:
    FakeNvml(two_gpus(), init_error=code).install(monkeypatch)
    snap = await _source(tmp_path).sample()
    assert snap.problem == problem and words in snap.status and not snap.ok


async def test_driver_mismatch_mid_run_then_recovers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeNvml(two_gpus())
    fake.install(monkeypatch)
    source = _source(tmp_path)
    assert (await source.sample()).ok
    fake.driver_error = ERROR_CODES["LIB_RM_VERSION_MISMATCH"]  # driver upgraded under us
    snap = await source.sample()
    assert snap.problem == "version_mismatch" and not snap.ok and snap.devices == ()
    fake.driver_error = None
    assert (await source.sample()).ok


async def test_pynvml_not_installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    snap = await _source(tmp_path).sample()
    assert snap.status == STATUS_NO_PYNVML and snap.problem == "no_pynvml"


async def test_macos_reads_no_nvml(tmp_path: Path) -> None:
    """macOS goes to ioreg (tests/unit/test_gpu_unified.py), never NVML; no ioreg here."""
    fake = FakeNvml()

    def no_ioreg() -> str:
        raise FileNotFoundError(2, "No such file or directory: 'ioreg'")

    snap = await _source(tmp_path, platform="darwin", nvml=fake.module, ioreg=no_ioreg).sample()
    assert snap.status == "GPU telemetry: not available (the ioreg command is not found)"
    assert snap.problem == "not_supported" and not snap.ok and fake.init_calls == 0


async def test_an_unexpected_bug_is_a_snapshot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeNvml(two_gpus())
    source = _source(tmp_path, nvml=fake.module)

    def boom(self: Any, *args: Any) -> Any:
        raise RuntimeError("kaboom")

    monkeypatch.setattr(GpuSource, "_read_nvml", boom)
    snap = await source.sample()
    assert snap.problem == "error" and "kaboom" in snap.status


async def test_aclose_shuts_nvml_down(tmp_path: Path) -> None:
    fake = FakeNvml(two_gpus())
    source = _source(tmp_path, nvml=fake.module)
    await source.sample()
    await source.aclose()
    assert fake.shutdown_calls == 1 and not fake.initialized
    assert (await source.sample()).ok  # used again: initialised again


def test_system_memory_survives_a_failing_swap(tmp_path: Path) -> None:
    def no_swap() -> Any:
        raise RuntimeError("no /proc/vmstat")

    ps = SimpleNamespace(virtual_memory=FAKE_PSUTIL.virtual_memory, swap_memory=no_swap)
    snap = _source(tmp_path, nvml=missing_library().module, psutil_module=ps).sample_sync()
    assert snap.system is not None and snap.system.ram_total_bytes == 64 * GiB and snap.system.swap_total_bytes is None


# --------------------------------------------------------------------------------------------
# AMD through sysfs


def test_amd_sysfs_cards(tmp_path: Path) -> None:
    add_amd_card(
        tmp_path, 0, product="AMD Radeon RX 7900 XTX", total=24 * GiB, used=3 * GiB, busy=37, slot="0000:03:00.0"
    )
    add_amd_card(
        tmp_path,
        1,
        total=16 * GiB,
        used=1 * GiB,
        busy=0,
        mem_busy=None,
        power_file="power1_input",
        cap_uw=None,
        slot="0000:04:00.0",
    )
    devices, others = read_amd_sysfs(tmp_path)
    assert others == []
    a, b = devices
    assert (a.index, a.vendor, a.name, a.bus_id) == (0, "amd", "AMD Radeon RX 7900 XTX", "0000:03:00.0")
    assert (a.memory_total_bytes, a.memory_used_bytes, a.memory_free_bytes) == (24 * GiB, 3 * GiB, 21 * GiB)
    assert (a.gpu_util_percent, a.memory_util_percent, a.temperature_c) == (37, 12, 54)
    assert (a.power_draw_mw, a.power_limit_mw) == (120_000, 250_000)
    assert a.processes is None and "per-process" in (a.processes_note or "")
    assert b.name == "AMD GPU 0x744c (card1)" and b.power_draw_mw == 120_000 and b.power_limit_mw is None
    assert b.memory_util_percent is None


async def test_amd_used_when_there_is_no_nvml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    missing_library().install(monkeypatch)
    add_amd_card(tmp_path, 0, product="AMD Radeon PRO W7800")
    snap = await _source(tmp_path).sample()
    assert snap.ok and snap.backend == "amd-sysfs" and snap.problem is None
    assert snap.status == "GPU telemetry: 1 AMD GPU (sysfs; no per-process GPU memory)"
    assert snap.devices[0].name == "AMD Radeon PRO W7800"


async def test_other_vendor_is_named_not_supported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    missing_library().install(monkeypatch)
    add_other_card(tmp_path, 0, "0x8086")
    snap = await _source(tmp_path).sample()
    assert snap.status == STATUS_NO_LIBRARY
    assert snap.notes and "Intel GPU ? (card0): not supported: the i915 driver exposes no GPU memory" in snap.notes[0]


# --------------------------------------------------------------------------------------------
# this machine: the real pynvml, no NVIDIA driver


async def test_real_pynvml_on_a_machine_without_nvidia() -> None:
    pytest.importorskip("pynvml")
    source = GpuSource()
    snap = await source.sample()
    await source.aclose()
    if snap.ok and snap.backend == "nvml":
        pytest.skip("this machine has an NVIDIA GPU")
    assert snap.status == STATUS_NO_LIBRARY
    assert snap.problem == "no_library" and snap.devices == ()
    assert snap.system is not None and snap.system.ram_total_bytes


def test_sources_do_not_import_textual_or_rich() -> None:
    code = (
        "import sys, warnings; warnings.simplefilter('error');"
        "import kvtop.sources.gpu, kvtop.sources.procs, kvtop.model.gpu;"
        "from kvtop.sources.gpu import GpuSource; GpuSource().sample_sync();"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('textual', 'rich')];"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.filterwarnings("ignore::FutureWarning")
def test_module_constants_match_pynvml() -> None:
    pynvml = pytest.importorskip("pynvml")
    for name in (
        "UNINITIALIZED",
        "NO_PERMISSION",
        "DRIVER_NOT_LOADED",
        "LIBRARY_NOT_FOUND",
        "GPU_IS_LOST",
        "RESET_REQUIRED",
        "LIB_RM_VERSION_MISMATCH",
    ):
        assert getattr(gpu_nvml, f"NVML_ERROR_{name}") == getattr(pynvml, f"NVML_ERROR_{name}") == ERROR_CODES[name]
    assert pynvml.nvmlMemory_v2 == FakeNvml().module.nvmlMemory_v2
