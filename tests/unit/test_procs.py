"""ProcSource and the runner command-line shapes of every Ollama era (docs/ollama-internals.md §7),
against psutil-like fakes (other users' processes raise AccessDenied, exiting ones NoSuchProcess)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kvtop.sources.proc_cmdline import blob_of, classify_cmdline
from kvtop.sources.procs import ProcSource, container_kind, pid_namespace
from tests.fakes.procs import FakeProcess, blob

B1 = blob(0xB1)
HEX = B1.removeprefix("sha256-")
STORE = "/usr/share/ollama/.ollama/models/blobs"


@pytest.mark.parametrize(
    ("argv", "expect"),
    [
        # v0.1.32 – v0.5.1: an extracted runner binary
        (
            [
                "/tmp/ollama2384/runners/cuda_v11/ollama_llama_server",
                "--model",
                f"{STORE}/{B1}",
                "--ctx-size",
                "8192",
                "--batch-size",
                "512",
                "--embedding",
                "--n-gpu-layers",
                "33",
                "--threads",
                "8",
                "--parallel",
                "4",
                "--port",
                "39231",
            ],
            dict(
                kind="runner",
                runner_kind="ollama_llama_server",
                era="v0.1.32–v0.5.1",
                blob=B1,
                port=39231,
                ctx_size=8192,
                parallel=4,
            ),
        ),
        # v0.5.12 – v0.11.4: ollama runner with --ctx-size
        (
            [
                "/usr/local/bin/ollama",
                "runner",
                "--model",
                f"{STORE}/{B1}",
                "--ctx-size",
                "2048",
                "--batch-size",
                "512",
                "--n-gpu-layers",
                "29",
                "--threads",
                "6",
                "--parallel",
                "1",
                "--port",
                "41653",
            ],
            dict(
                kind="runner",
                runner_kind="ollama runner",
                era="v0.5.2–v0.11.4",
                blob=B1,
                port=41653,
                ctx_size=2048,
                parallel=1,
                engine="llama.cpp",
            ),
        ),
        # v0.11.5 – v0.24: ollama runner, new engine, only --model and --port
        (
            ["/usr/bin/ollama", "runner", "--ollama-engine", "--model", f"{STORE}/{B1}", "--port", "35151"],
            dict(kind="runner", runner_kind="ollama runner", era="v0.11.5–v0.24", blob=B1, port=35151, engine="ollama"),
        ),
        # --model=VALUE form
        (["ollama", "runner", f"--model={STORE}/{B1}", "--port=1"], dict(kind="runner", blob=B1, port=1)),
        # GPU discovery runner (v0.12.4+): no --model
        (["/usr/bin/ollama", "runner", "--ollama-engine", "--port", "41221"], dict(kind="discovery")),
        # v0.30+: llama-server from Ollama's lib dir
        (
            [
                "/usr/local/lib/ollama/llama-server",
                "--model",
                f"{STORE}/{B1}",
                "--port",
                "40123",
                "--host",
                "127.0.0.1",
                "--no-webui",
                "--offline",
                "-c",
                "8192",
                "-np",
                "2",
                "--flash-attn",
                "auto",
            ],
            dict(
                kind="runner",
                runner_kind="llama-server",
                era="v0.30+",
                blob=B1,
                port=40123,
                ctx_size=8192,
                parallel=2,
                ollama_path=True,
            ),
        ),
        # v0.30+ discovery: no --model, or --list-devices
        (
            [
                "/usr/lib/ollama/llama-server",
                "--port",
                "40000",
                "--host",
                "127.0.0.1",
                "--no-webui",
                "--offline",
                "--verbose",
            ],
            dict(kind="discovery", runner_kind="llama-server"),
        ),
        (["/usr/lib/ollama/llama-server", "--list-devices", "--offline", "--verbose"], dict(kind="discovery")),
        # Windows
        (
            [
                r"C:\Users\me\AppData\Local\Programs\Ollama\lib\ollama\llama-server.exe",
                "--model",
                rf"C:\Users\me\.ollama\models\blobs\{B1}",
                "--port",
                "5000",
            ],
            dict(kind="runner", runner_kind="llama-server", blob=B1, port=5000, ollama_path=True),
        ),
        # MLX: a model name, not a blob
        (
            ["ollama", "runner", "--mlx-engine", "--model", "qwen3:8b", "--port", "1234"],
            dict(kind="runner", runner_kind="mlx runner", model_name="qwen3:8b", blob=None, engine="mlx"),
        ),
        # someone's own llama-server: recognised, but not Ollama's by its path
        (
            ["llama-server", "-m", "/data/mistral.gguf", "--port", "8080"],
            dict(kind="runner", runner_kind="llama-server", blob=None, ollama_path=False),
        ),
        # the server
        (["/usr/local/bin/ollama", "serve"], dict(kind="server")),
        (["ollama.exe", "serve"], dict(kind="server")),
        # a process that rewrote its title into one string
        ([f"ollama runner --model {STORE}/{B1} --port 7"], dict(kind="runner", blob=B1, port=7)),
        # old blob store names
        (["ollama", "runner", "--model", f"/x/blobs/sha256:{HEX}"], dict(kind="runner", blob=B1)),
    ],
)
def test_classify_every_era(argv: list[str], expect: dict[str, Any]) -> None:
    c = classify_cmdline(argv)
    assert c is not None
    for key, value in expect.items():
        assert getattr(c, key) == value, key


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["python", "train.py"],
        ["vim", "ollama.md"],
        ["ollama", "ps"],
        ["ollama", "run", "llama3.2"],
        ["/usr/bin/python3", "runner", "--model", "x"],
        ["bash", "-c", "ollama serve"],
    ],
)
def test_not_ollama(argv: list[str]) -> None:
    assert classify_cmdline(argv) is None


def test_blob_of() -> None:
    assert blob_of(f"{STORE}/{B1}") == B1
    assert blob_of("/data/model.gguf") is None
    assert blob_of(None) is None
    assert blob_of(f"/x/{B1}-partial") is None


def _source(processes: list[FakeProcess], tmp_path: Path, **kwargs: Any) -> ProcSource:
    kwargs.setdefault("environ", {})
    return ProcSource(
        process_iter=lambda: list(processes),
        proc_root=tmp_path / "proc",
        root=tmp_path,
        clock=lambda: 5.0,
        platform="linux",
        **kwargs,
    )


def _table() -> list[FakeProcess]:
    return [
        FakeProcess(1, ["/sbin/init"], name="systemd", ppid=0, user="root"),
        FakeProcess(100, ["/usr/local/bin/ollama", "serve"]),
        FakeProcess(
            4101, ["/usr/local/bin/ollama", "runner", "--model", f"{STORE}/{blob(1)}", "--port", "40101"], ppid=100
        ),
        FakeProcess(
            4102,
            [
                "/usr/local/lib/ollama/llama-server",
                "--model",
                f"{STORE}/{blob(2)}",
                "--port",
                "40102",
                "-c",
                "8192",
                "-np",
                "2",
            ],
            ppid=100,
        ),
        FakeProcess(4200, ["/usr/local/bin/ollama", "runner", "--ollama-engine", "--port", "41000"], ppid=100),
        FakeProcess(7777, ["python", "train.py"], user="alice"),
        FakeProcess(1234, ["/usr/lib/xorg/Xorg", ":0"], name="Xorg", user="root", denied=("cmdline", "username")),
        FakeProcess(5555, ["python", "gone.py"], gone=True),
        FakeProcess(6000, ["llama-server", "-m", "/data/mine.gguf", "--port", "8080"], user="carol"),
        FakeProcess(6001, ["llama-server", "-m", "/data/other.gguf"], ppid=100),  # Ollama's: its parent says so
    ]


async def test_sample_finds_server_runners_and_describes_gpu_pids(tmp_path: Path) -> None:
    snap = await _source(_table(), tmp_path).sample([4101, 4102, 7777, 1234, 5555, 9999])
    assert snap.ok and snap.taken_at == 5.0
    assert [(s.pid, s.user) for s in snap.servers] == [(100, "ollama")]
    runners = {r.pid: r for r in snap.runners}
    assert sorted(runners) == [4101, 4102, 6001]
    r1, r2 = runners[4101], runners[4102]
    assert (r1.kind, r1.blob, r1.port, r1.server_pid, r1.user) == ("ollama runner", blob(1), 40101, 100, "ollama")
    assert (r2.kind, r2.blob, r2.ctx_size, r2.parallel) == ("llama-server", blob(2), 8192, 2)
    assert r1.rss_bytes == 100 * 1024**2
    assert runners[6001].blob is None and runners[6001].server_pid == 100
    assert snap.discovery_pids == (4200,)
    p = snap.processes
    assert (p[7777].user, p[7777].name, p[7777].cmdline, p[7777].note) == (
        "alice",
        "python",
        ("python", "train.py"),
        None,
    )
    # another user's process: PID and name known, the rest is not, and that is said
    assert (p[1234].visible, p[1234].name, p[1234].user, p[1234].cmdline) == (True, "Xorg", None, None)
    assert "access denied" in (p[1234].note or "")
    assert p[5555].visible is False and p[9999].visible is False
    assert not snap.namespace.mismatch  # runner PIDs are on the GPU: the namespaces agree


async def test_a_foreign_llama_server_is_not_a_runner(tmp_path: Path) -> None:
    snap = await _source(_table(), tmp_path).sample([6000])
    assert 6000 not in {r.pid for r in snap.runners}
    assert snap.processes[6000].user == "carol"


async def test_access_denied_everywhere_never_fails(tmp_path: Path) -> None:
    procs = [FakeProcess(i, ["x"], denied=("name", "ppid", "cmdline", "username", "memory_info")) for i in range(2, 50)]
    procs.append(
        FakeProcess(
            60, ["ollama_llama_server", "--model", f"/b/{blob(3)}"], name="ollama_llama_ser", denied=("cmdline",)
        )
    )
    snap = await _source(procs, tmp_path).sample([3, 60])
    assert snap.ok
    assert snap.processes[3].visible and snap.processes[3].cmdline is None
    # a runner whose command line cannot be read: known by name, blob unknown
    assert [(r.pid, r.kind, r.blob) for r in snap.runners] == [(60, "ollama_llama_server", None)]


async def test_process_exits_between_the_two_reads(tmp_path: Path) -> None:
    procs = [FakeProcess(70, ["ollama", "runner", "--model", f"/b/{blob(4)}"], gone_after_reads=1)]
    snap = await _source(procs, tmp_path).sample([70])
    assert snap.runners == ()
    assert snap.processes[70].note == "exited during the sample"


async def test_process_iter_failure_is_a_snapshot(tmp_path: Path) -> None:
    def broken() -> list[FakeProcess]:
        raise OSError("/proc is not mounted")

    snap = await ProcSource(process_iter=broken, proc_root=tmp_path, root=tmp_path, environ={}).sample([1])
    assert not snap.ok and "/proc is not mounted" in (snap.error or "")


# --------------------------------------------------------------------------------------------
# containers and PID namespaces


def test_container_kind_markers(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    assert container_kind(tmp_path, proc, {}) is None
    assert container_kind(tmp_path, proc, {"KUBERNETES_SERVICE_HOST": "10.0.0.1"}) == "kubernetes"
    assert container_kind(tmp_path, proc, {"container": "podman"}) == "podman"
    (proc / "1").mkdir(parents=True)
    (proc / "1" / "cgroup").write_text("0::/system.slice/docker-abc.scope\n")
    assert container_kind(tmp_path, proc, {}) == "docker"
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / ".containerenv").write_text("")
    assert container_kind(tmp_path, proc, {}) == "podman"
    (tmp_path / ".dockerenv").write_text("")
    assert container_kind(tmp_path, proc, {}) == "docker"


@pytest.mark.parametrize(
    ("container", "pid1", "gpu", "visible", "ollama", "mismatch"),
    [
        (None, "systemd", [10], [10], [], False),  # a host: PIDs are local
        (None, "systemd", [], [], [], False),  # nothing on the GPU
        ("docker", "ollama", [4101], [], [], True),  # private PID namespace: host PIDs
        ("docker", "ollama", [4101], [4101], [], True),  # a local PID that happens to match proves nothing
        ("docker", "ollama", [17], [17], [17], False),  # our runner's PID is on the GPU: they agree
        ("docker", "systemd", [4101], [4101], [], False),  # --pid=host
        (None, "systemd", [9001, 9002], [], [], True),  # none of NVML's PIDs exist here
    ],
)
def test_pid_namespace(
    container: str | None, pid1: str, gpu: list[int], visible: list[int], ollama: list[int], mismatch: bool
) -> None:
    ns = pid_namespace(container, pid1, gpu, visible, ollama)
    assert ns.mismatch is mismatch
    assert (ns.note is not None) is mismatch


async def test_in_a_container_names_are_not_trusted(tmp_path: Path) -> None:
    (tmp_path / ".dockerenv").write_text("")
    procs = [
        FakeProcess(1, ["/bin/ollama", "serve"], name="ollama", ppid=0),
        FakeProcess(7, ["/bin/ollama", "runner", "--model", f"/root/.ollama/models/blobs/{blob(5)}"], ppid=1),
        FakeProcess(4242, ["sleep", "1000"]),
    ]  # a local PID equal to a host PID NVML reports
    snap = await _source(procs, tmp_path).sample([4242, 88123])
    assert snap.namespace.container == "docker" and snap.namespace.private is True
    assert snap.namespace.mismatch and "host PIDs" in (snap.namespace.note or "")
