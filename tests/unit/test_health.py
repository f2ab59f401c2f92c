"""Health of ollama serve: a process tree the test owns, a fake systemctl on PATH, cgroup files in
a temp dir."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from kvtop.model.gpu_snapshots import ProcSnapshot, ServerProcess, ServiceEnv
from kvtop.model.server_view import fold_health, health_json
from kvtop.model.server_health import ServerInfo
from kvtop.sources.health import HealthSource


@pytest.fixture
def tree():
    """A parent that starts two children (its "runners"), all of them the test's own."""
    code = (
        "import subprocess,sys,time\n"
        "kids=[subprocess.Popen([sys.executable,'-c','import time\\nx=bytearray(8<<20)\\ntime.sleep(60)'])"
        " for _ in range(2)]\n"
        "print('ready',flush=True)\ntime.sleep(60)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None and parent.stdout.readline().strip() == "ready"
    deadline = time.monotonic() + 10

    def settled() -> bool:  # both children started and hold their 8 MiB
        kids = psutil.Process(parent.pid).children()
        return len(kids) == 2 and all(k.memory_info().rss > 16 << 20 for k in kids)

    while not settled() and time.monotonic() < deadline:
        time.sleep(0.05)
    yield parent
    for child in psutil.Process(parent.pid).children(recursive=True):
        child.kill()
    parent.kill()
    parent.wait()


def _procs(pid: int, source: str | None = None) -> ProcSnapshot:
    env = ServiceEnv({"OLLAMA_HOST": "127.0.0.1:11434", "OLLAMA_API_KEY": "****"}, source=source)
    return ProcSnapshot(taken_at=time.time(), servers=(ServerProcess(pid, env=env),))


def test_process_tree_cpu_rss_uptime(tree, tmp_path: Path) -> None:
    src = HealthSource(proc_root=tmp_path, cgroup_root=tmp_path / "cg")
    first = src.sample_sync(_procs(tree.pid), "http://127.0.0.1:11434")
    assert first.tree is not None and first.error is None
    assert first.tree.pid == tree.pid and first.tree.processes == 3
    assert first.tree.cpu_percent is None  # psutil needs two samples
    kids = psutil.Process(tree.pid).children()
    expected = psutil.Process(tree.pid).memory_info().rss + sum(k.memory_info().rss for k in kids)
    assert abs(first.tree.rss_bytes - expected) < 4 << 20  # type: ignore[operator]
    assert sorted(p for p, _, _ in first.tree.runners) == sorted(k.pid for k in kids)
    assert all(rss is not None and rss > 16 << 20 for _, rss, _ in first.tree.runners)  # each holds 8 MiB more
    assert first.tree.started_at == pytest.approx(psutil.Process(tree.pid).create_time())
    second = src.sample_sync(_procs(tree.pid), "http://127.0.0.1:11434")
    assert second.tree is not None and second.tree.cpu_percent is not None and second.tree.cpu_percent >= 0
    doc = health_json(fold_health(ServerInfo(), second))
    assert doc is not None and doc["pid"] == tree.pid and doc["processes"] == 3
    assert doc["uptime_s"] >= 0 and doc["settings"]["OLLAMA_API_KEY"] == "****"


def test_no_server_says_why(tmp_path: Path) -> None:
    h = HealthSource(proc_root=tmp_path).sample_sync(ProcSnapshot(taken_at=0.0), "http://127.0.0.1:11434")
    assert h.tree is None and h.error == "no ollama serve process visible on this machine"


def test_pid_change_counts_a_restart(tree, tmp_path: Path) -> None:
    src = HealthSource(proc_root=tmp_path, cgroup_root=tmp_path)
    info = fold_health(ServerInfo(), src.sample_sync(_procs(tree.pid), "http://127.0.0.1:11434"))
    info = fold_health(info, src.sample_sync(_procs(tree.pid), "http://127.0.0.1:11434"))
    assert info.pid_changes == 0
    other = psutil.Process(tree.pid).children()[0].pid
    info = fold_health(info, src.sample_sync(_procs(other), "http://127.0.0.1:11434"))
    assert info.pid_changes == 1 and info.server_pids == (tree.pid, other)


def _fake_tool(bin_dir: Path, name: str, body: str) -> None:
    bin_dir.mkdir(exist_ok=True)
    path = bin_dir / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)


def test_systemd_nrestarts_from_fake_systemctl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_tool(
        tmp_path / "bin",
        "systemctl",
        'echo "$@" >> "' + str(tmp_path / "calls") + '"\n'
        '[ "$1 $2 $3 $4 $5" = "show -p NRestarts --value ollama.service" ] && echo 3 && exit 0\nexit 1\n',
    )
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    (tmp_path / "proc" / "4242").mkdir(parents=True)
    (tmp_path / "proc" / "4242" / "cgroup").write_text("0::/system.slice/ollama.service\n")
    src = HealthSource(proc_root=tmp_path / "proc", cgroup_root=tmp_path / "cg")
    r = src.restarts(4242)
    assert (r.count, r.source, r.error) == (3, "systemd NRestarts (ollama.service)", None)
    assert (tmp_path / "calls").read_text() == "show -p NRestarts --value ollama.service\n"
    # from the service rung's source when the cgroup names no unit
    (tmp_path / "proc" / "4242" / "cgroup").write_text("0::/user.slice\n")
    assert src.restarts(4242, "systemctl show ollama.service").count == 3


def test_docker_restart_count(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cid = "0123456789ab" * 5 + "cdef"
    _fake_tool(tmp_path / "bin", "docker", f'[ "$4" = "{cid}" ] && echo 5 && exit 0\nexit 1\n')
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    (tmp_path / "7").mkdir()
    (tmp_path / "7" / "cgroup").write_text(f"0::/system.slice/docker-{cid}.scope\n")
    r = HealthSource(proc_root=tmp_path).restarts(7)
    assert (r.count, r.source) == (5, "docker RestartCount (0123456789ab)")


def test_neither_systemd_nor_docker(tmp_path: Path) -> None:
    (tmp_path / "7").mkdir()
    (tmp_path / "7" / "cgroup").write_text("0::/user.slice/user-1000.slice/session-2.scope\n")
    r = HealthSource(proc_root=tmp_path).restarts(7)
    assert r.count is None and r.error is not None and "PID changes" in r.error


def test_cgroup_v2_limits(tmp_path: Path) -> None:
    proc, cg = tmp_path / "proc", tmp_path / "cg"
    (proc / "9").mkdir(parents=True)
    (proc / "9" / "cgroup").write_text("0::/system.slice/ollama.service\n")
    unit = cg / "system.slice" / "ollama.service"
    unit.mkdir(parents=True)
    (unit / "memory.max").write_text("17179869184\n")
    (unit / "memory.current").write_text("1073741824\n")
    (unit / "cpu.max").write_text("400000 100000\n")
    limits = HealthSource(proc_root=proc, cgroup_root=cg).cgroup_limits(9)
    assert limits is not None
    assert (limits.version, limits.memory_max_bytes, limits.memory_current_bytes, limits.cpu_max_cores) == (
        2,
        17179869184,
        1073741824,
        4.0,
    )
    (unit / "memory.max").write_text("max\n")
    (unit / "cpu.max").write_text("max 100000\n")
    limits = HealthSource(proc_root=proc, cgroup_root=cg).cgroup_limits(9)
    assert limits is not None and limits.memory_max_bytes is None and limits.cpu_max_cores is None


def test_cgroup_v2_container_root_fallback(tmp_path: Path) -> None:
    proc, cg = tmp_path / "proc", tmp_path / "cg"
    (proc / "9").mkdir(parents=True)
    (proc / "9" / "cgroup").write_text("0::/\n")  # a container's own namespace
    cg.mkdir()
    (cg / "memory.max").write_text("8589934592\n")
    (cg / "cpu.max").write_text("150000 100000\n")
    limits = HealthSource(proc_root=proc, cgroup_root=cg).cgroup_limits(9)
    assert limits is not None and limits.memory_max_bytes == 8589934592 and limits.cpu_max_cores == 1.5


def test_cgroup_v1_limits(tmp_path: Path) -> None:
    proc, cg = tmp_path / "proc", tmp_path / "cg"
    (proc / "9").mkdir(parents=True)
    (proc / "9" / "cgroup").write_text("12:memory:/docker/abc\n5:cpu,cpuacct:/docker/abc\n1:name=systemd:/docker/abc\n")
    mem = cg / "memory" / "docker" / "abc"
    mem.mkdir(parents=True)
    (mem / "memory.limit_in_bytes").write_text("4294967296\n")
    (mem / "memory.usage_in_bytes").write_text("1000\n")
    cpu = cg / "cpu,cpuacct" / "docker" / "abc"
    cpu.mkdir(parents=True)
    (cpu / "cpu.cfs_quota_us").write_text("200000\n")
    (cpu / "cpu.cfs_period_us").write_text("100000\n")
    limits = HealthSource(proc_root=proc, cgroup_root=cg).cgroup_limits(9)
    assert limits is not None
    assert (limits.version, limits.memory_max_bytes, limits.memory_current_bytes, limits.cpu_max_cores) == (
        1,
        4294967296,
        1000,
        2.0,
    )
    (mem / "memory.limit_in_bytes").write_text("9223372036854771712\n")  # v1 "no limit"
    (cpu / "cpu.cfs_quota_us").write_text("-1\n")
    limits = HealthSource(proc_root=proc, cgroup_root=cg).cgroup_limits(9)
    assert limits is not None and limits.memory_max_bytes is None and limits.cpu_max_cores is None


def test_descendants_listed_again_only_when_the_ollama_processes_change(tree, tmp_path: Path) -> None:
    """The tree walk (every process's parent read) is redone when the process sample's
    Ollama PIDs change, a member goes, or every TREE_WALK_EVERY_S; the members are read each time."""
    from kvtop.model.gpu_snapshots import RunnerProcess
    from kvtop.sources.health import TREE_WALK_EVERY_S

    now = [0.0]
    src = HealthSource(proc_root=tmp_path, cgroup_root=tmp_path / "cg", monotonic=lambda: now[0])
    kids = sorted(k.pid for k in psutil.Process(tree.pid).children())
    for i in range(4):
        now[0] += 1
        h = src.sample_sync(_procs(tree.pid), "http://127.0.0.1:11434")
        assert h.tree is not None and h.tree.processes == 3 and sorted(p for p, _, _ in h.tree.runners) == kids
        if i:
            assert h.tree.cpu_percent is not None
    assert src.tree_walks == 1
    now[0] += TREE_WALK_EVERY_S
    src.sample_sync(_procs(tree.pid), "http://127.0.0.1:11434")
    assert src.tree_walks == 2
    with_runner = _procs(tree.pid)
    import dataclasses

    with_runner = dataclasses.replace(
        with_runner, runners=(RunnerProcess(kids[0], "llama-server", "C", server_pid=tree.pid),)
    )
    now[0] += 1
    src.sample_sync(with_runner, "http://127.0.0.1:11434")
    assert src.tree_walks == 3  # a new runner in the sample: listed again
    now[0] += 1
    h = src.sample_sync(with_runner, "http://127.0.0.1:11434")
    assert src.tree_walks == 3 and h.tree is not None and h.tree.processes == 3
