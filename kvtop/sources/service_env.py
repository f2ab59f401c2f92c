"""The ``ollama serve`` environment: the **service** rung of the source ladder.

``OLLAMA_KV_CACHE_TYPE``, ``OLLAMA_NUM_PARALLEL``, ``OLLAMA_FLASH_ATTENTION``,
``OLLAMA_CONTEXT_LENGTH`` … are what the server was told (docs/ollama-internals.md §3). They are read,
in this order, from the first place this user can read:

1. ``/proc/<pid>/environ`` of the ``ollama serve`` process (its own user, or root);
2. its systemd unit, named by ``/proc/<pid>/cgroup`` (``…/ollama.service``):
   ``systemctl show <unit> -p Environment -p EnvironmentFiles`` (needs no root; drop-ins are
   merged by systemd) and then the ``EnvironmentFiles`` it lists, when readable;
3. its docker container, named by the cgroup (``docker-<id>.scope`` or ``/docker/<id>``):
   ``docker inspect`` ``Config.Env`` (needs access to the docker socket);
4. macOS: ``launchctl getenv KEY`` for Ollama's variables (what the app's server inherits).

Only ``OLLAMA_*`` and the GPU selection variables are kept, and a value whose name says it is a
secret (``KEY``, ``TOKEN``, ``SECRET``, ``PASS``, ``AUTH`` …: ``kvtop.redact``), a URL's credentials
and a secret query parameter (``?token=``) are masked here, before it reaches any state, screen,
recording or metric. Everything here is blocking (it runs in ``ProcSource``'s worker thread) and
is read once per server PID: a service's environment only changes when the process restarts.
Never raises.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType

from kvtop.model.gpu_snapshots import ServiceEnv
from kvtop.redact import is_secret_name, mask_query

KEEP_PREFIXES = ("OLLAMA_", "LLAMA_ARG_")
KEEP_NAMES = frozenset(
    {
        "CUDA_VISIBLE_DEVICES",
        "HIP_VISIBLE_DEVICES",
        "ROCR_VISIBLE_DEVICES",
        "GPU_DEVICE_ORDINAL",
        "HSA_OVERRIDE_GFX_VERSION",
        "GGML_VK_VISIBLE_DEVICES",
    }
)
"""The variables that change how Ollama loads a model (§3, §7); nothing else is kept."""

LAUNCHCTL_KEYS = (
    "OLLAMA_FLASH_ATTENTION",
    "OLLAMA_KV_CACHE_TYPE",
    "OLLAMA_NUM_PARALLEL",
    "OLLAMA_CONTEXT_LENGTH",
    "OLLAMA_MAX_LOADED_MODELS",
    "OLLAMA_KEEP_ALIVE",
    "OLLAMA_SCHED_SPREAD",
    "OLLAMA_GPU_OVERHEAD",
    "OLLAMA_HOST",
    "OLLAMA_MODELS",
    "OLLAMA_DEBUG",
    "OLLAMA_MAX_QUEUE",
    "OLLAMA_LOAD_TIMEOUT",
    "OLLAMA_ORIGINS",
    "OLLAMA_NEW_ENGINE",
    "OLLAMA_LLM_LIBRARY",
)
"""The variables asked one by one on macOS, where ``launchctl`` has no "list all"."""

COMMAND_TIMEOUT_S = 2.0
"""Deadline of one ``systemctl`` / ``docker`` / ``launchctl`` call."""

_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
_SEPARATORS = re.compile(r"([,;\s]+)")
_UNIT = re.compile(r"/((?:[\w@.\\-]|\\x[0-9a-f]{2})+\.service)(?:/|$)")
_DOCKER = re.compile(r"(?:docker-|/docker/)([0-9a-f]{64})")
MASK = "••••"

Runner = Callable[[Sequence[str]], "tuple[int, str]"]
"""Runs a command: returns (exit status, stdout); raises OSError or TimeoutError when it cannot."""


def _run(argv: Sequence[str]) -> tuple[int, str]:
    done = subprocess.run(
        list(argv),
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,  # noqa: S603 - fixed argv
        check=False,
        errors="replace",
    )
    return done.returncode, done.stdout


def keep(name: str) -> bool:
    """True for the variables kvtop shows (``OLLAMA_*``, ``LLAMA_ARG_*``, GPU selection)."""
    return name.startswith(KEEP_PREFIXES) or name in KEEP_NAMES


def mask(name: str, value: str) -> str:
    """``value`` with secrets hidden: the whole value when the name says secret, else the user
    information of every address in it (``user:pass@`` with or without a scheme, as Ollama's
    ``OLLAMA_HOST`` takes it; up to the last ``@``, so a password holding ``@`` or ``/`` is hidden
    whole), and the value of a secret query parameter (``?token=``, ``&key=``: ``kvtop.redact``).
    Lists (``OLLAMA_ORIGINS``) are masked item by item. A name says secret by
    ``kvtop.redact.is_secret_name`` (``KEY``, ``TOKEN``, ``SECRET``, ``PASS`` — ``OLLAMA_PASS`` too —,
    ``AUTH``, ``CREDENTIAL``, ``COOKIE``, ``SIGNATURE``)."""
    if is_secret_name(name) and value:
        return MASK
    return "".join(mask_query(_mask_userinfo(part), MASK) for part in _SEPARATORS.split(value))


def _mask_userinfo(token: str) -> str:
    scheme = _SCHEME.match(token)
    prefix = scheme.group(0) if scheme else ""
    rest = token[len(prefix) :]
    at = rest.rfind("@")
    return token if at <= 0 else prefix + MASK + rest[at:]


def filtered(env: Mapping[str, str]) -> Mapping[str, str]:
    """The kept variables of ``env``, masked, sorted by name."""
    return MappingProxyType({k: mask(k, v) for k, v in sorted(env.items()) if keep(k)})


def parse_environ(data: bytes) -> dict[str, str]:
    """``/proc/<pid>/environ`` (NUL-separated ``KEY=value``) -> dict."""
    out: dict[str, str] = {}
    for item in data.split(b"\0"):
        key, sep, value = item.decode("utf-8", "replace").partition("=")
        if sep and key:
            out[key] = value
    return out


def parse_env_assignments(text: str) -> dict[str, str]:
    """systemd's ``Environment=`` value: space-separated ``KEY=value`` words, shell-quoted when a
    value has spaces (``Environment="A=1" "B=x y"`` shows as ``A=1 "B=x y"``)."""
    try:
        words = shlex.split(text)
    except ValueError:
        words = text.split()
    out: dict[str, str] = {}
    for word in words:
        key, sep, value = word.partition("=")
        if sep and key:
            out[key] = value
    return out


def parse_env_file(text: str) -> dict[str, str]:
    """An ``EnvironmentFile``: ``KEY=value`` lines, ``#``/``;`` comments, optional quotes."""
    out: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("export "):
            line = line[7:].lstrip()
        key, sep, value = line.partition("=")
        key = key.strip()
        if not sep or not key:
            continue
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        out[key] = value
    return out


def parse_systemctl_show(text: str) -> tuple[dict[str, str], list[str]]:
    """``systemctl show -p Environment -p EnvironmentFiles`` -> (assignments, env file paths).

    ``EnvironmentFiles=/etc/default/ollama (ignore_errors=yes)`` may repeat; a leading ``-`` on
    a path (optional file) is dropped.
    """
    env: dict[str, str] = {}
    files: list[str] = []
    for line in text.splitlines():
        key, _, value = line.partition("=")
        if key == "Environment":
            env.update(parse_env_assignments(value))
        elif key == "EnvironmentFiles" and value.strip():
            path = value.strip().split(" (", 1)[0].lstrip("-")
            if path:
                files.append(path)
    return env, files


def unit_of(cgroup_text: str) -> tuple[str | None, bool]:
    """The systemd unit in a ``/proc/<pid>/cgroup`` (``0::/system.slice/ollama.service``), and
    whether it is a user unit (under ``user@UID.service``)."""
    units = _UNIT.findall(cgroup_text)
    units = [u for u in units if not u.startswith("user@")] or units
    if not units:
        return None, False
    return units[-1], "user@" in cgroup_text


def container_of(cgroup_text: str) -> str | None:
    """The docker container ID in a ``/proc/<pid>/cgroup``, None when there is none."""
    m = _DOCKER.search(cgroup_text)
    return m.group(1) if m else None


class ServiceEnvReader:
    """Reads and caches the environment of ``ollama serve`` processes, one read per PID.

    Args:
        proc_root: Where ``<pid>/environ`` and ``<pid>/cgroup`` are read (tests: ``tmp_path``).
        run: Runs ``systemctl`` / ``docker`` / ``launchctl`` (tests pass a fake).
        platform: ``sys.platform`` by default.
        read_file: Reads an ``EnvironmentFile`` (tests pass a fake).
    """

    def __init__(
        self,
        proc_root: Path | str = "/proc",
        *,
        run: Runner = _run,
        platform: str | None = None,
        read_file: Callable[[str], str] | None = None,
    ) -> None:
        self._proc_root = Path(proc_root)
        self._run = run
        self._platform = platform if platform is not None else sys.platform
        self._read_file = read_file or (lambda p: Path(p).read_text(encoding="utf-8", errors="replace"))
        self._cache: dict[int, ServiceEnv] = {}

    def read(self, pid: int) -> ServiceEnv:
        """The environment of server ``pid`` (cached for the PID's life); never raises."""
        hit = self._cache.get(pid)
        if hit is None:
            try:
                hit = self._read(pid)
            except Exception as exc:  # noqa: BLE001 - an unreadable environment is an answer too
                hit = ServiceEnv(error=f"{type(exc).__name__}: {exc}")
            self._cache[pid] = hit
        return hit

    def forget_except(self, pids: set[int]) -> None:
        """Drop cached servers that are gone (a restarted server gets a new PID and is read again)."""
        for pid in [p for p in self._cache if p not in pids]:
            del self._cache[pid]

    def _read(self, pid: int) -> ServiceEnv:
        tried: list[str] = []
        base = self._proc_root / str(pid)
        try:
            data = (base / "environ").read_bytes()
        except PermissionError:
            tried.append(f"/proc/{pid}/environ: permission denied (another user's process)")
        except OSError as exc:
            tried.append(f"/proc/{pid}/environ: {exc.strerror or type(exc).__name__}")
        else:
            if data:
                return ServiceEnv(values=filtered(parse_environ(data)), source=f"/proc/{pid}/environ")
            tried.append(f"/proc/{pid}/environ: empty")
        try:
            cgroup = (base / "cgroup").read_text(encoding="utf-8", errors="replace")
        except OSError:
            cgroup = ""
        unit, user = unit_of(cgroup)
        if unit is not None:
            got = self._systemd(unit, user, tried)
            if got is not None:
                return got
        container = container_of(cgroup)
        if container is not None:
            got = self._docker(container, tried)
            if got is not None:
                return got
        if self._platform == "darwin":
            got = self._launchctl(tried)
            if got is not None:
                return got
        if not tried:
            tried.append("no systemd unit or container found for it")
        return ServiceEnv(error="; ".join(tried))

    def _command(self, argv: Sequence[str], tried: list[str]) -> str | None:
        try:
            status, out = self._run(argv)
        except (OSError, subprocess.SubprocessError, TimeoutError) as exc:
            tried.append(f"{argv[0]}: {type(exc).__name__}")
            return None
        if status != 0:
            tried.append(f"{' '.join(argv[:2])}: exit status {status}")
            return None
        return out

    def _systemd(self, unit: str, user: bool, tried: list[str]) -> ServiceEnv | None:
        argv = [
            "systemctl",
            *(["--user"] if user else []),
            "show",
            unit,
            "-p",
            "Environment",
            "-p",
            "EnvironmentFiles",
            "--no-pager",
        ]
        out = self._command(argv, tried)
        if out is None:
            return None
        env, files = parse_systemctl_show(out)
        notes: list[str] = []
        for path in files:
            try:
                file_env = parse_env_file(self._read_file(path))
            except PermissionError:
                notes.append(f"{path}: permission denied")
                continue
            except OSError as exc:
                notes.append(f"{path}: {exc.strerror or type(exc).__name__}")
                continue
            env = {**env, **file_env}  # systemd: an EnvironmentFile overrides Environment=
        where = f"systemctl{' --user' if user else ''} show {unit}"
        if files:
            where += " + " + ", ".join(files)
        return ServiceEnv(values=filtered(env), source=where, error="; ".join(notes) or None)

    def _docker(self, container: str, tried: list[str]) -> ServiceEnv | None:
        out = self._command(["docker", "inspect", "--format", "{{json .Config.Env}}", container], tried)
        if out is None:
            return None
        try:
            items = json.loads(out)
        except ValueError:
            tried.append("docker inspect: not JSON")
            return None
        if not isinstance(items, list):
            tried.append("docker inspect: not a list")
            return None
        env: dict[str, str] = {}
        for item in items:
            if isinstance(item, str):
                key, sep, value = item.partition("=")
                if sep and key:
                    env[key] = value
        return ServiceEnv(values=filtered(env), source=f"docker inspect {container[:12]}")

    def _launchctl(self, tried: list[str]) -> ServiceEnv | None:
        env: dict[str, str] = {}
        for key in LAUNCHCTL_KEYS:
            try:
                status, out = self._run(["launchctl", "getenv", key])
            except (OSError, subprocess.SubprocessError, TimeoutError) as exc:
                tried.append(f"launchctl: {type(exc).__name__}")
                return None
            if status == 0 and out.strip():
                env[key] = out.strip()
        return ServiceEnv(values=filtered(env), source="launchctl getenv")
