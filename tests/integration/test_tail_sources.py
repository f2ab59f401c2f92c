"""JournalTail, DockerTail, StdinTail and auto against real processes and pipes.

``journalctl``, ``docker`` and ``systemctl`` are tiny fake executables in ``tmp_path`` and are
the only things on ``PATH``: that is their process boundary. Each fake records its argv and
pid, prints recorded output to stdout/stderr and either exits with a given code or follows
(``exec sleep``) like ``-f`` does.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path

import pytest

from kvtop.sources import tail_base, tail_proc
from kvtop.sources.tail import AutoTail, open_log_source, parse_log_spec, resolve_auto
from kvtop.sources.tail_file import FileTail
from kvtop.sources.tail_proc import DockerTail, JournalTail, StdinTail, journal_message
from kvtop.sources.tail_proc import JOURNAL_PERMISSION
from tests.tail_collect import Collector

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX fakes")

# $0's directory holds NAME.out (stdout), NAME.err (stderr), NAME.rc (exit code; absent: follow).
FAKE = """#!/bin/sh
d=$(CDPATH= cd -- "${0%/*}" && pwd)
n=${0##*/}
printf '%s\\n' "$@" > "$d/$n.argv"
printf '%s\\n' "$@" >> "$d/$n.allargv"
echo $$ >> "$d/$n.pids"  # last: a test that saw the PID reads the arguments whole, however busy the machine
[ -f "$d/$n.out" ] && /bin/cat "$d/$n.out"
[ -f "$d/$n.err" ] && /bin/cat "$d/$n.err" >&2
case " $* " in
  *" -f "*) ;;
  *) exit "$(/bin/cat "$d/$n.rc" 2>/dev/null || echo 0)" ;;
esac
[ -f "$d/$n.rc" ] && exit "$(/bin/cat "$d/$n.rc")"
exec /bin/sleep 30
"""


class Fakes:
    def __init__(self, root: Path) -> None:
        self.bin = root / "bin"
        self.bin.mkdir()
        self.env = {"PATH": str(self.bin), "HOME": str(root / "home"), "LANG": "C.UTF-8"}

    def add(self, name: str, out: str | bytes = b"", err: str = "", rc: int | None = None, script: str = FAKE) -> None:
        exe = self.bin / name
        exe.write_text(script)
        exe.chmod(0o755)
        (self.bin / f"{name}.out").write_bytes(out.encode() if isinstance(out, str) else out)
        if err:
            (self.bin / f"{name}.err").write_text(err)
        if rc is not None:
            (self.bin / f"{name}.rc").write_text(str(rc))

    def argv(self, name: str) -> list[str]:
        return (self.bin / f"{name}.argv").read_text().splitlines()

    def pids(self, name: str) -> list[int]:
        p = self.bin / f"{name}.pids"
        return [int(x) for x in p.read_text().split()] if p.exists() else []


@pytest.fixture
def fakes(tmp_path: Path) -> Fakes:
    return Fakes(tmp_path)


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # a zombie still answers kill(0); look at its state where /proc exists
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1].startswith("Z")
    except OSError:
        return True


def _gone_soon(pid: int, timeout_s: float = 5.0) -> bool:
    """True once ``pid`` has exited; a signalled process on a loaded machine may take a moment."""
    deadline = time.monotonic() + timeout_s
    while not _gone(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def _entry(message: object, cursor: str) -> str:
    return json.dumps({"__CURSOR": cursor, "_SYSTEMD_UNIT": "ollama.service", "MESSAGE": message})


# -- journal ---------------------------------------------------------------------------------------


async def test_journal_messages_string_bytes_and_multiline(fakes: Fakes) -> None:
    raw = 'time=2026-01-01T00:00:00.000Z level=INFO msg="caf\xe9"'.encode("latin-1")  # not UTF-8
    out = "\n".join(
        [
            _entry(
                'time=2026-01-01T00:00:00.000Z level=INFO source=routes.go:1 msg="Listening on 127.0.0.1:11434"', "c1"
            ),
            _entry(list(raw), "c2"),
            _entry("llama_context: n_ctx = 8192\nllama_context: n_batch = 512\n", "c3"),
            _entry(None, "c4"),
            "-- No entries --",
            _entry("crlf line\r", "c5"),
        ]
    )
    fakes.add("journalctl", out + "\n")
    src = open_log_source(parse_log_spec("journal"), backlog_lines=50, env=fakes.env)
    col = Collector(src)
    await col.until(lambda: len(col.lines) == 5)
    pid = fakes.pids("journalctl")[0]
    assert not _gone(pid)
    await col.close()
    assert col.lines == [
        'time=2026-01-01T00:00:00.000Z level=INFO source=routes.go:1 msg="Listening on 127.0.0.1:11434"',
        'time=2026-01-01T00:00:00.000Z level=INFO msg="caf\ufffd"',
        "llama_context: n_ctx = 8192",
        "llama_context: n_batch = 512",
        "crlf line",
    ]
    assert fakes.argv("journalctl") == ["-u", "ollama", "-f", "-o", "json", "--no-pager", "-n", "50"]
    assert all(b.ok and b.status is None and b.source == "journal:ollama (system)" for b in col.batches)
    assert _gone_soon(pid), "journalctl left running after aclose()"


async def test_journal_user_unit_passes_user(fakes: Fakes) -> None:
    fakes.add("journalctl", _entry("hello", "c1") + "\n")
    col = Collector(JournalTail("ollama", user=True, env=fakes.env))
    await col.until(lambda: col.lines == ["hello"])
    await col.close()
    assert fakes.argv("journalctl")[:2] == ["--user", "-u"]
    assert col.last.source == "journal:ollama (user)"


async def test_journal_permission_hint_while_following(fakes: Fakes) -> None:
    fakes.add(
        "journalctl",
        err="Hint: You are currently not seeing messages from other users and the system.\n"
        "      Users in groups 'adm', 'systemd-journal' can see all messages.\n"
        "      Pass -q to turn off this notice.\n",
    )
    col = Collector(JournalTail("ollama", env=fakes.env))
    await col.until(lambda: col.last.status is not None)
    await col.close()
    assert col.last.status == JOURNAL_PERMISSION
    assert col.last.ok is False and col.last.lines == ()


@pytest.mark.parametrize(
    ("err", "rc"),
    [
        ("No journal files were found.\n", 1),
        ("Failed to open journal: Permission denied\n", 1),
        ("", 1),  # a quick non-zero exit with nothing said
    ],
)
async def test_journal_permission_failures(fakes: Fakes, err: str, rc: int) -> None:
    fakes.add("journalctl", err=err, rc=rc)
    col = Collector(JournalTail("ollama", env=fakes.env))
    await col.until(lambda: col.last.status is not None)
    await asyncio.sleep(0.1)
    await col.close()
    assert col.last.status == JOURNAL_PERMISSION and not col.last.ok
    assert len(fakes.pids("journalctl")) == 1  # not restarted: retrying cannot help


async def test_journalctl_not_found(fakes: Fakes) -> None:
    col = Collector(JournalTail("ollama", env=fakes.env))
    await col.until(lambda: col.last.status is not None)
    await col.close()
    assert col.last.status == "journal: journalctl not found" and not col.last.ok


async def test_journal_restart_resumes_after_cursor(fakes: Fakes, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tail_proc, "RETRY_MIN_S", 0.05)
    monkeypatch.setattr(tail_proc, "QUICK_EXIT_S", 0.0)
    monkeypatch.setattr(tail_proc, "COALESCE_S", 0.01)  # the lines are yielded before the retry the test waits for
    fakes.add(
        "journalctl", _entry("one", "s=abc;i=1") + "\n", err="Failed to iterate through journal: Bad message\n", rc=1
    )
    col = Collector(JournalTail("ollama", env=fakes.env))
    await col.until(lambda: len(fakes.pids("journalctl")) >= 2)
    await col.close()
    assert col.lines[0] == "one"
    assert any(
        b.status == "journal: journalctl exited with code 1: Failed to iterate through journal: Bad message"
        for b in col.batches
    )
    second = (fakes.bin / "journalctl.allargv").read_text().split("-u\n")[2]
    assert "--after-cursor\ns=abc;i=1\n" in second and "-n\n" not in second


def test_journal_message_shapes() -> None:
    assert journal_message({"MESSAGE": "a"}) == ["a"]
    assert journal_message({"MESSAGE": [104, 105, 255]}) == ["hi\ufffd"]
    assert journal_message({"MESSAGE": "a\nb\r\n"}) == ["a", "b"]
    assert journal_message({"MESSAGE": ""}) == [""]
    assert journal_message({"MESSAGE": None}) == []
    assert journal_message({}) == []
    assert journal_message({"MESSAGE": ["x"]}) == []


# -- docker ----------------------------------------------------------------------------------------

DOCKER_BOTH = """#!/bin/sh
d=$(CDPATH= cd -- "${0%/*}" && pwd)
printf '%s\\n' "$@" > "$d/docker.argv"
echo $$ >> "$d/docker.pids"  # after the arguments (as FAKE)
echo 'time=2026-01-01T00:00:00Z level=INFO msg="server config" (stderr)' >&2
echo '[GIN] 2026/01/01 - 00:00:01 | 200 | 1ms | 127.0.0.1 | GET "/api/ps" (stdout)'
echo 'llama_context: n_ctx = 4096 (stderr)' >&2
/bin/sleep 30 &
echo $! > "$d/docker.child"
wait
"""


async def test_docker_merges_stdout_and_stderr_and_leaves_no_orphans(fakes: Fakes) -> None:
    fakes.add("docker", script=DOCKER_BOTH)
    col = Collector(DockerTail("ollama", backlog_lines=100, env=fakes.env))
    await col.until(lambda: len(col.lines) == 3 and (fakes.bin / "docker.child").exists())
    pid = fakes.pids("docker")[0]
    child = int((fakes.bin / "docker.child").read_text())
    await col.close()
    assert col.lines == [
        'time=2026-01-01T00:00:00Z level=INFO msg="server config" (stderr)',
        '[GIN] 2026/01/01 - 00:00:01 | 200 | 1ms | 127.0.0.1 | GET "/api/ps" (stdout)',
        "llama_context: n_ctx = 4096 (stderr)",
    ]
    assert fakes.argv("docker") == ["logs", "-f", "--tail", "100", "ollama"]
    assert col.last.source == "docker:ollama"
    assert _gone_soon(pid) and _gone_soon(child), "docker (or its child) left running"


@pytest.mark.parametrize(
    ("err", "status"),
    [
        ("Error response from daemon: No such container: ollama\n", "docker: no such container: ollama"),
        (
            "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?\n",
            "docker: cannot connect to the Docker daemon — is it running?",
        ),
        (
            "permission denied while trying to connect to the Docker daemon socket at unix:///var/run/docker.sock: "
            'Get "http://%2Fvar%2Frun%2Fdocker.sock/v1.24/containers/ollama/logs": dial unix /var/run/docker.sock: '
            "connect: permission denied\n",
            "docker: permission denied on the Docker socket — add your user to the docker group (or run with sudo)",
        ),
    ],
)
async def test_docker_errors_become_status(fakes: Fakes, err: str, status: str) -> None:
    fakes.add("docker", err=err, rc=1)
    col = Collector(DockerTail("ollama", env=fakes.env))
    await col.until(lambda: col.last.status is not None)
    await col.close()
    assert col.last.status == status and not col.last.ok
    assert col.lines == []  # docker's own complaint is not a log line


async def test_docker_not_found(fakes: Fakes) -> None:
    col = Collector(DockerTail("ollama", env=fakes.env))
    await col.until(lambda: col.last.status is not None)
    await col.close()
    assert col.last.status == "docker: docker not found"


async def test_docker_stopped_container_is_reattached_with_since(fakes: Fakes, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tail_proc, "RETRY_MIN_S", 0.05)
    monkeypatch.setattr(tail_proc, "COALESCE_S", 0.01)  # the lines are yielded before the retry the test waits for
    fakes.add("docker", "last words\n", rc=0)
    col = Collector(DockerTail("ollama", env=fakes.env))
    await col.until(lambda: len(fakes.pids("docker")) >= 2)
    await col.close()
    assert col.lines[0] == "last words"
    assert any(b.status == "docker: container ollama stopped — waiting for it to start again" for b in col.batches)
    again = fakes.argv("docker")
    assert again[:3] == ["logs", "-f", "--since"] and float(again[3]) > 0 and again[-1] == "ollama"


async def test_aclose_kills_a_child_that_ignores_sigterm(fakes: Fakes, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tail_base, "TERMINATE_WAIT_S", 0.2)
    stubborn = "#!/bin/sh\necho $$ >> \"${0%/*}/docker.pids\"\necho up\ntrap '' TERM\nexec /bin/sleep 30\n"
    fakes.add("docker", script=stubborn)
    col = Collector(DockerTail("ollama", env=fakes.env))
    await col.until(lambda: col.lines == ["up"])
    pid = fakes.pids("docker")[0]
    t0 = time.monotonic()
    await col.close()
    assert time.monotonic() - t0 < 2.0  # TERM ignored: killed after the 2 s grace, not later
    assert _gone_soon(pid)


# -- stdin -----------------------------------------------------------------------------------------


async def test_stdin_lines_partial_and_eof() -> None:
    r, w = os.pipe()
    col = Collector(StdinTail(r))
    await col.until(lambda: bool(col.batches))
    os.write(w, b"a\r\nb \xff\nunfinished")
    await col.until(lambda: col.lines == ["a", "b \ufffd"])
    os.close(w)
    await col.until(lambda: col.last.status == "log source ended")
    await col.close()
    os.close(r)
    assert col.lines == ["a", "b \ufffd", "unfinished"]
    assert col.last.ok is False and col.last.source == "stdin"


async def test_stdin_backlog_bound_counts_dropped_lines() -> None:
    r, w = os.pipe()
    os.write(w, b"".join(b"%d\n" % i for i in range(5000)))
    os.close(w)
    col = Collector(StdinTail(r, backlog_lines=100))
    await col.until(lambda: col.last.status == "log source ended")
    await col.close()
    os.close(r)
    assert col.lines == [str(i) for i in range(4900, 5000)]
    assert sum(b.dropped_lines for b in col.batches) == 4900


# -- auto ------------------------------------------------------------------------------------------

SYSTEMCTL = """#!/bin/sh
d=$(CDPATH= cd -- "${0%/*}" && pwd)
case " $* " in
  *" --user "*) /bin/cat "$d/systemctl-user.out" 2>/dev/null ;;
  *) /bin/cat "$d/systemctl.out" ;;
esac
"""


async def test_auto_prefers_the_active_system_unit(fakes: Fakes) -> None:
    fakes.add("systemctl", script=SYSTEMCTL)
    (fakes.bin / "systemctl.out").write_text("active\n")
    fakes.add("journalctl", "", rc=0)
    src, reasons = await resolve_auto(env=fakes.env, platform="linux", files=[])
    assert isinstance(src, JournalTail) and not src.user
    assert reasons[0] == "journal:ollama (system): used — the ollama unit is active"
    assert reasons[1].startswith("journal:ollama (user): not tried")


async def test_auto_takes_the_user_unit_when_the_system_one_is_absent(fakes: Fakes) -> None:
    fakes.add("systemctl", script=SYSTEMCTL)
    (fakes.bin / "systemctl.out").write_text("inactive\n")
    (fakes.bin / "systemctl-user.out").write_text("active\n")
    fakes.add("journalctl", "", rc=0)
    src, reasons = await resolve_auto(env=fakes.env, platform="linux", files=[])
    assert isinstance(src, JournalTail) and src.user
    assert "not used" in reasons[0] and "used" in reasons[1]


async def test_auto_falls_through_to_an_existing_file_then_docker(fakes: Fakes, tmp_path: Path) -> None:
    present = tmp_path / "server.log"
    present.write_text("x\n")
    files = [(tmp_path / "absent.log", "first"), (present, "second")]
    src, reasons = await resolve_auto(env=fakes.env, platform="linux", files=files)
    assert isinstance(src, FileTail) and src.path == present
    assert reasons == [
        "journal:ollama (system): not used — journalctl not found",
        "journal:ollama (user): not used — journalctl not found",
        f"file:{tmp_path / 'absent.log'}: not used — no such file (first)",
        f"file:{present}: used — second",
        "docker:ollama: not tried — an earlier candidate was chosen",
    ]
    fakes.add("docker", "true\n", rc=0)
    src, reasons = await resolve_auto(env=fakes.env, platform="linux", files=files[:1])
    assert isinstance(src, DockerTail)
    assert reasons[-1] == "docker:ollama: used — a container named ollama exists (running)"
    assert fakes.argv("docker") == ["inspect", "--format", "{{.State.Running}}", "ollama"]


async def test_auto_finds_nothing(fakes: Fakes) -> None:
    fakes.add("docker", err="Error: No such object: ollama\n", rc=1)
    src, reasons = await resolve_auto(env=fakes.env, platform="darwin")
    assert src is None
    assert reasons[0] == "journal: not tried — not Linux"
    assert any(r.startswith(f"file:{fakes.env['HOME']}/.ollama/logs/server.log: not used") for r in reasons)
    assert reasons[-1].startswith("docker:ollama: not used")


async def test_auto_tail_follows_the_macos_app_log(fakes: Fakes) -> None:
    logs = Path(fakes.env["HOME"]) / ".ollama" / "logs"
    logs.mkdir(parents=True)
    (logs / "server.log").write_text("app line\n")
    src = AutoTail(env=fakes.env)
    col = Collector(src)
    await col.until(lambda: col.lines == ["app line"])
    await col.close()
    assert src.description == f"file:{logs / 'server.log'}"
    assert any("used" in r for r in src.reasons)
