"""The ``ollama serve`` environment (``kvtop.sources.service_env``): /proc, systemd, docker, launchctl.

``/proc/<pid>/environ`` is read for real (a file under ``tmp_path``, and this test process's own
in the last test); ``systemctl``, ``docker`` and ``launchctl`` are replaced at the one function
that runs a command, with the exact output those tools print.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

from kvtop.sources.service_env import (
    MASK,
    ServiceEnvReader,
    container_of,
    mask,
    parse_env_file,
    parse_environ,
    parse_systemctl_show,
    unit_of,
)

DOCKER_ID = "3f4e" * 16


class FakeRun:
    """Answers commands from a table; records what was asked."""

    def __init__(self, answers: dict[str, tuple[int, str]]) -> None:
        self.answers = answers
        self.calls: list[list[str]] = []

    def __call__(self, argv: Sequence[str]) -> tuple[int, str]:
        self.calls.append(list(argv))
        for prefix, answer in self.answers.items():
            if " ".join(argv).startswith(prefix):
                return answer
        raise FileNotFoundError(argv[0])


def proc_dir(tmp_path: Path, pid: int, *, environ: bytes | None, cgroup: str = "") -> Path:
    d = tmp_path / str(pid)
    d.mkdir(parents=True)
    if environ is not None:
        (d / "environ").write_bytes(environ)
    (d / "cgroup").write_text(cgroup)
    return tmp_path


def test_parsers() -> None:
    assert parse_environ(b"HOME=/usr/share/ollama\0OLLAMA_HOST=0.0.0.0:11434\0BROKEN\0EMPTY=\0") == {
        "HOME": "/usr/share/ollama",
        "OLLAMA_HOST": "0.0.0.0:11434",
        "EMPTY": "",
    }
    env, files = parse_systemctl_show(
        'Environment=OLLAMA_KV_CACHE_TYPE=q8_0 "OLLAMA_ORIGINS=http://a http://b" OLLAMA_NUM_PARALLEL=2\n'
        "EnvironmentFiles=/etc/default/ollama (ignore_errors=yes)\n"
        "EnvironmentFiles=-/etc/ollama.env (ignore_errors=no)\n"
    )
    assert env == {"OLLAMA_KV_CACHE_TYPE": "q8_0", "OLLAMA_ORIGINS": "http://a http://b", "OLLAMA_NUM_PARALLEL": "2"}
    assert files == ["/etc/default/ollama", "/etc/ollama.env"]
    assert parse_env_file('# comment\n; also\nexport OLLAMA_FLASH_ATTENTION=1\nOLLAMA_MODELS="/srv/models"\nbad\n') == {
        "OLLAMA_FLASH_ATTENTION": "1",
        "OLLAMA_MODELS": "/srv/models",
    }
    assert unit_of("0::/system.slice/ollama.service\n") == ("ollama.service", False)
    assert unit_of("0::/user.slice/user-1000.slice/user@1000.service/app.slice/ollama.service\n") == (
        "ollama.service",
        True,
    )
    assert unit_of("0::/user.slice/user-1000.slice/session-4.scope\n") == (None, False)
    assert container_of(f"0::/system.slice/docker-{DOCKER_ID}.scope\n") == DOCKER_ID
    assert container_of(f"12:memory:/docker/{DOCKER_ID}\n") == DOCKER_ID


@pytest.mark.parametrize(
    ("name", "value", "shown"),
    [
        ("OLLAMA_API_KEY", "sk-123", MASK),
        ("OLLAMA_AUTH_TOKEN", "t", MASK),
        ("OLLAMA_HOST", "https://user:pass@gpu-box:443", f"https://{MASK}@gpu-box:443"),
        ("OLLAMA_HOST", "admin:hunter2@127.0.0.1:18004", f"{MASK}@127.0.0.1:18004"),  # Ollama's scheme is optional
        (
            "OLLAMA_ORIGINS",
            "http://user:p@ss@evil.com,http://u:pa/ss@x.org app://ok",
            f"http://{MASK}@evil.com,http://{MASK}@x.org app://ok",
        ),  # @ and / inside passwords; a list item by item
        ("LLAMA_ARG_HF_TOKEN", "hf_abc", MASK),
        ("OLLAMA_KV_CACHE_TYPE", "q8_0", "q8_0"),
        # a name pattern that wanted PASSW showed OLLAMA_PASS; URL query secrets must be masked too
        ("OLLAMA_PASS", "hunter2", MASK),
        ("OLLAMA_PROXY_PASSPHRASE", "x y", MASK),
        ("OLLAMA_REMOTES", "https://hub.example/v2?token=abc123&page=2", f"https://hub.example/v2?token={MASK}&page=2"),
        (
            "OLLAMA_ORIGINS",
            "https://a.example/?key=k1,https://b.example/x?sig=s2;app://ok?api_key=k3",
            f"https://a.example/?key={MASK},https://b.example/x?sig={MASK};app://ok?api_key={MASK}",
        ),
        ("OLLAMA_MODELS", "/srv/models", "/srv/models"),
        ("OLLAMA_KEEP_ALIVE", "24h", "24h"),
    ],
)
def test_secrets_are_masked(name: str, value: str, shown: str) -> None:
    assert mask(name, value) == shown


def test_proc_environ_first_only_ollama_and_gpu_variables_kept(tmp_path: Path) -> None:
    root = proc_dir(
        tmp_path,
        41,
        environ=b"PATH=/usr/bin\0OLLAMA_KV_CACHE_TYPE=q8_0\0CUDA_VISIBLE_DEVICES=1\0"
        b"OLLAMA_API_KEY=sk-x\0AWS_SECRET=z\0",
        cgroup="0::/system.slice/ollama.service\n",
    )
    run = FakeRun({})
    got = ServiceEnvReader(root, run=run, platform="linux").read(41)
    assert got.source == "/proc/41/environ" and got.error is None
    assert dict(got.values) == {"CUDA_VISIBLE_DEVICES": "1", "OLLAMA_API_KEY": MASK, "OLLAMA_KV_CACHE_TYPE": "q8_0"}
    assert run.calls == []  # readable: systemctl is not asked


def test_another_users_server_falls_back_to_its_systemd_unit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = proc_dir(tmp_path, 42, environ=b"X=1\0", cgroup="0::/system.slice/ollama.service\n")
    real = Path.read_bytes

    def denied(self: Path) -> bytes:
        if self.name == "environ":
            raise PermissionError(13, "Permission denied")
        return real(self)

    monkeypatch.setattr(Path, "read_bytes", denied)
    run = FakeRun(
        {
            "systemctl show ollama.service": (
                0,
                'Environment="OLLAMA_HOST=0.0.0.0" OLLAMA_NUM_PARALLEL=4\n'
                "EnvironmentFiles=/etc/default/ollama (ignore_errors=yes)\n",
            )
        }
    )
    files = {"/etc/default/ollama": "OLLAMA_NUM_PARALLEL=2\nOLLAMA_FLASH_ATTENTION=1\n"}
    reader = ServiceEnvReader(root, run=run, platform="linux", read_file=files.__getitem__)
    got = reader.read(42)
    assert got.source == "systemctl show ollama.service + /etc/default/ollama"
    assert dict(got.values) == {"OLLAMA_FLASH_ATTENTION": "1", "OLLAMA_HOST": "0.0.0.0", "OLLAMA_NUM_PARALLEL": "2"}
    assert run.calls == [
        ["systemctl", "show", "ollama.service", "-p", "Environment", "-p", "EnvironmentFiles", "--no-pager"]
    ]
    assert reader.read(42) is got and len(run.calls) == 1  # once per server PID
    reader.forget_except(set())
    reader.read(42)
    assert len(run.calls) == 2  # a restarted server (or a new PID) is read again


def test_unreadable_env_file_is_said_and_the_rest_is_kept(tmp_path: Path) -> None:
    root = proc_dir(tmp_path, 43, environ=None, cgroup="0::/system.slice/ollama.service\n")
    run = FakeRun({"systemctl show": (0, "Environment=OLLAMA_KV_CACHE_TYPE=q4_0\nEnvironmentFiles=/etc/secret.env\n")})

    def unreadable(path: str) -> str:
        raise PermissionError(13, "Permission denied")

    got = ServiceEnvReader(root, run=run, platform="linux", read_file=unreadable).read(43)
    assert dict(got.values) == {"OLLAMA_KV_CACHE_TYPE": "q4_0"}
    assert got.error == "/etc/secret.env: permission denied"


def test_docker_container_env(tmp_path: Path) -> None:
    root = proc_dir(tmp_path, 44, environ=None, cgroup=f"0::/system.slice/docker-{DOCKER_ID}.scope\n")
    run = FakeRun(
        {"docker inspect": (0, '["PATH=/usr/local/sbin","OLLAMA_HOST=0.0.0.0:11434","OLLAMA_KEEP_ALIVE=24h"]\n')}
    )
    got = ServiceEnvReader(root, run=run, platform="linux").read(44)
    assert got.source == f"docker inspect {DOCKER_ID[:12]}"
    assert dict(got.values) == {"OLLAMA_HOST": "0.0.0.0:11434", "OLLAMA_KEEP_ALIVE": "24h"}


def test_macos_launchctl(tmp_path: Path) -> None:
    run = FakeRun({"launchctl getenv OLLAMA_FLASH_ATTENTION": (0, "1\n"), "launchctl getenv": (1, "")})
    got = ServiceEnvReader(tmp_path, run=run, platform="darwin").read(45)
    assert got.source == "launchctl getenv" and dict(got.values) == {"OLLAMA_FLASH_ATTENTION": "1"}


def test_nothing_readable_says_what_was_tried(tmp_path: Path) -> None:
    root = proc_dir(tmp_path, 46, environ=None, cgroup="0::/system.slice/ollama.service\n")

    def timeout(argv: Sequence[str]) -> tuple[int, str]:
        raise subprocess.TimeoutExpired(argv, 2)

    got = ServiceEnvReader(root, run=timeout, platform="linux").read(46)
    assert not got.readable and got.values == {}
    assert got.error == "/proc/46/environ: No such file or directory; systemctl: TimeoutExpired"


def test_a_real_process_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    """This test process's own /proc entry, read for real (Linux)."""
    if not Path(f"/proc/{os.getpid()}/environ").exists():
        pytest.skip("no /proc")
    os.environ["OLLAMA_TEST_MARKER"] = "x"  # not in /proc (set after exec): the file holds the start environment
    got = ServiceEnvReader("/proc", platform="linux").read(os.getpid())
    assert got.source == f"/proc/{os.getpid()}/environ"
    assert "PATH" not in got.values and "OLLAMA_TEST_MARKER" not in got.values
