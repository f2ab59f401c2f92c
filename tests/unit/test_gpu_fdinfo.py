"""Intel GPUs: VRAM in use from per-process DRM fdinfo (issue 25, Platforms), read from a fake
``/proc`` tree in tmp_path (``<pid>/fd/<n>`` links to ``/dev/dri/*``, ``<pid>/fdinfo/<n>`` the
kernel's text; tests/fixtures/fdinfo/README.md says where the file's format comes from)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kvtop.sources.gpu import GpuSource
from kvtop.sources.gpu_fdinfo import parse_fdinfo, parse_size, read_drm_vram
from kvtop.sources.gpu_sysfs import read_intel_sysfs
from tests.fakes.sysfs import GiB, add_intel_card

XE = (Path(__file__).resolve().parents[1] / "fixtures" / "fdinfo" / "xe-client-vram0.txt").read_text(encoding="utf-8")
VRAM0 = 5_361_664 * 1024


def _proc(root: Path, pid: int, fds: dict[int, tuple[str, str | None]]) -> None:
    """``<root>/<pid>/fd/<n>`` -> link target and ``fdinfo/<n>`` text (None: no fdinfo file)."""
    (root / str(pid) / "fd").mkdir(parents=True)
    (root / str(pid) / "fdinfo").mkdir()
    for fd, (target, text) in fds.items():
        os.symlink(target, root / str(pid) / "fd" / str(fd))
        if text is not None:
            (root / str(pid) / "fdinfo" / str(fd)).write_text(text, encoding="utf-8")


def test_sizes_and_units() -> None:
    assert parse_size("192 KiB") == 196_608
    assert parse_size("16 MiB") == 16 * 1024**2
    assert parse_size("4096") == 4096
    assert parse_size("0") == 0
    assert parse_size("12 parsecs") is None and parse_size("") is None


def test_an_xe_client_counts_its_vram_regions_only() -> None:
    c = parse_fdinfo(XE)
    assert c is not None
    assert (c.driver, c.pdev, c.client_id) == ("xe", "0000:03:00.0", "3")
    assert c.regions == ("vram0",)  # system, gtt and stolen are system RAM
    assert c.vram_resident_bytes == VRAM0 and c.vram_total_bytes == VRAM0


def test_the_xe_drivers_own_example_output() -> None:
    """The example in the kernel's drivers/gpu/drm/xe/xe_drm_client.c (tests/fixtures/fdinfo/README.md):
    every region and engine key the driver prints; only vram0 is device memory."""
    doc = (Path(__file__).resolve().parents[1] / "fixtures" / "fdinfo" / "xe-drm-client-doc-example.txt").read_text()
    c = parse_fdinfo(doc)
    assert c is not None
    assert (c.driver, c.pdev, c.client_id, c.regions) == ("xe", "0000:03:00.0", "3", ("vram0",))
    assert c.vram_resident_bytes == c.vram_total_bytes == 23992 * 1024  # 24,567,808 B


def test_a_file_that_is_not_drm_is_none() -> None:
    assert parse_fdinfo("pos:\t0\nflags:\t02\nmnt_id:\t26\n") is None


def test_the_old_drm_memory_name_is_the_total() -> None:
    c = parse_fdinfo("drm-driver:\ti915\ndrm-pdev:\t0000:03:00.0\ndrm-client-id:\t7\ndrm-memory-local0:\t2 MiB\n")
    assert c is not None and c.vram_total_bytes == 2 * 1024**2 and c.vram_resident_bytes is None


def test_a_fake_proc_tree_sums_clients_once(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    _proc(proc, 4242, {3: ("/dev/dri/renderD128", XE), 4: ("/dev/dri/renderD128", XE), 5: ("/var/log/x", "pos: 0\n")})
    other = XE.replace("drm-client-id:\t3", "drm-client-id:\t9").replace("5361664 KiB", "1024 KiB")
    _proc(proc, 5000, {7: ("/dev/dri/card1", other), 8: ("socket:[1]", None)})
    uses = read_drm_vram(proc, frozenset({"xe", "i915"}))
    use = uses["0000:03:00.0"]
    assert use.clients == 2  # fd 3 and 4 of PID 4242 are one client (id 3)
    assert use.used_bytes == VRAM0 + 1024 * 1024
    assert use.by_pid == {4242: VRAM0, 5000: 1024 * 1024}
    assert use.unreadable == 0


def test_the_intel_card_shows_its_use_and_processes(tmp_path: Path) -> None:
    add_intel_card(tmp_path / "sys", 0, driver="xe", tiles=(16 * GiB,), slot="0000:03:00.0")
    proc = tmp_path / "proc"
    _proc(proc, 4242, {3: ("/dev/dri/renderD128", XE)})
    (d,), notes = read_intel_sysfs(tmp_path / "sys", proc)
    assert notes == []
    assert (d.memory_total_bytes, d.memory_used_bytes, d.memory_free_bytes) == (16 * GiB, VRAM0, 16 * GiB - VRAM0)
    assert d.processes is not None and [(p.pid, p.used_memory_bytes) for p in d.processes] == [(4242, VRAM0)]
    assert d.memory_note is not None and "in use: the sum of 1 DRM client' drm-resident VRAM" in d.memory_note


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads every process's fd table")
def test_unreadable_processes_leave_the_use_unknown(tmp_path: Path) -> None:
    add_intel_card(tmp_path / "sys", 0, driver="xe", tiles=(16 * GiB,), slot="0000:03:00.0")
    proc = tmp_path / "proc"
    _proc(proc, 4242, {3: ("/dev/dri/renderD128", XE)})
    (proc / "4242" / "fd").chmod(0)
    try:
        (d,), _ = read_intel_sysfs(tmp_path / "sys", proc)
    finally:
        (proc / "4242" / "fd").chmod(0o755)
    assert d.memory_used_bytes is None and d.processes is None
    assert d.memory_note is not None and "1 processes kvtop may not read" in d.memory_note


def test_without_a_proc_root_the_use_stays_unknown(tmp_path: Path) -> None:
    add_intel_card(tmp_path, 0, driver="xe", tiles=(16 * GiB,))
    (d,), _ = read_intel_sysfs(tmp_path)
    assert d.memory_used_bytes is None
    assert d.memory_note is not None and d.memory_note.startswith("VRAM size from sysfs tileN/physical_vram_size_bytes")


def test_the_status_line_says_where_the_use_comes_from(tmp_path: Path) -> None:
    add_intel_card(tmp_path / "sys", 0, driver="xe", tiles=(16 * GiB,), slot="0000:03:00.0")
    proc = tmp_path / "proc"
    _proc(proc, 4242, {3: ("/dev/dri/renderD128", XE)})
    snap = GpuSource(nvml=False, sysfs_root=tmp_path / "sys", proc_root=proc, platform="linux").sample_sync()
    assert snap.status == "GPU telemetry: 1 Intel GPU (sysfs; VRAM use and per-process memory from DRM fdinfo)"


def test_between_walks_only_known_fds_are_read_again(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    _proc(proc, 4242, {3: ("/dev/dri/renderD128", XE)})
    drivers = frozenset({"xe"})
    assert read_drm_vram(proc, drivers, now=100.0)["0000:03:00.0"].used_bytes == VRAM0
    # the runner's VRAM grows (a known fd: read again at once) and a new process opens the GPU
    (proc / "4242" / "fdinfo" / "3").write_text(XE.replace("5361664 KiB", "6000000 KiB"), encoding="utf-8")
    _proc(proc, 5000, {4: ("/dev/dri/renderD128", XE.replace("drm-client-id:\t3", "drm-client-id:\t8"))})
    use = read_drm_vram(proc, drivers, now=105.0)["0000:03:00.0"]
    assert (use.used_bytes, sorted(use.by_pid)) == (6_000_000 * 1024, [4242])
    use = read_drm_vram(proc, drivers, now=110.0)["0000:03:00.0"]  # FULL_SCAN_S later: a new walk
    assert (use.used_bytes, sorted(use.by_pid)) == (6_000_000 * 1024 + VRAM0, [4242, 5000])
