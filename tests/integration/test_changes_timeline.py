"""What changed (issue 27 §4) end to end: two kvtop runs against the stand-in Ollama, restarted on
the same port with a new version in between; the restart is found by the second run from the
timeline the first one left in the state folder, then a KV type change that makes the model spill
(``POST /_standin/env`` with ``--vram-bytes``). ``--once --json`` carries the changes and
``kvtop changes`` tells the story."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.standin import REPO, port_of, running, tiny_scenario

pytestmark = pytest.mark.slow  # five kvtop runs and two stand-in starts: about 18 s on 2 busy cores

VRAM_BYTES = "4500000"
"""The tiny model (5,000,000 bytes at f16, its KV 2 MiB at num_ctx 2048) fits at q8_0, not at f16."""


def kvtop(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kvtop", *args], capture_output=True, text=True, timeout=60, cwd=str(REPO)
    )


def once(url: str) -> dict[str, Any]:
    proc = kvtop("--once", "--json", "--host", url)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def scenario_at(tmp_path: Path, version: str) -> Path:
    path, _blob = tiny_scenario(tmp_path)
    data = json.loads(path.read_text(encoding="utf-8"))
    data["version"] = version
    out = tmp_path / f"scenario-{version}.json"
    out.write_text(json.dumps(data), encoding="utf-8")
    return out


def set_kv(server: Any, cache_type: str) -> None:
    response = server.client.post("/_standin/env", json={"OLLAMA_KV_CACHE_TYPE": cache_type})
    assert response.status_code == 200, response.text


def test_restart_upgrade_and_spill_are_found_across_runs_and_kept(tmp_path: Path) -> None:
    old, new = scenario_at(tmp_path, "0.32.15"), scenario_at(tmp_path, "0.33.0")
    args = ["--manual", "--vram-bytes", VRAM_BYTES]
    with running([*args, "--scenario", str(old)]) as server:
        url, port = server.url, port_of(server.url)
        set_kv(server, "q8_0")
        first = once(url)
    assert first["version"] == "0.32.15"
    assert first["changes"] == []  # the first sight of a server is no change
    timelines = list((tmp_path / "state" / "kvtop" / "timeline").glob("*.jsonl"))
    assert len(timelines) == 1  # the fingerprint was kept for the next run

    with running([*args, "--scenario", str(new)], port=port) as server:
        assert server.url == url
        set_kv(server, "q8_0")
        second = once(url)
        assert [(c["kind"], c["before"], c["after"]) for c in second["changes"]] == [("version", "0.32.15", "0.33.0")]
        assert second["changes"][0]["text"] == "server restarted: 0.32.15 → 0.33.0"
        assert second["changes"][0]["source"] == "reported"
        set_kv(server, "f16")  # the KV cache grows past the GPU budget: the model spills
        third = once(url)
        set_kv(server, "q8_0")  # back under the budget: kvtop changes --now samples the server first
        now = kvtop("changes", "--host", url, "--now", "--json")
        assert now.returncode == 0, now.stderr
        assert json.loads(now.stdout)["story"] == "since 0.32.15: version 0.33.0 → spill → all on GPU"
    kinds = [(c["kind"], c["subject"], c["before"], c["after"]) for c in third["changes"]]
    assert kinds == [("version", "", "0.32.15", "0.33.0"), ("placement", "tiny:latest", "gpu", "spill")]

    proc = kvtop("changes", "--host", url, "--since", "0.33.0")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[1] == "since 0.33.0: spill → all on GPU"
    story_all = kvtop("changes", "--host", url).stdout.splitlines()[1]
    assert story_all == "since 0.32.15: version 0.33.0 → spill → all on GPU"  # from the version before the upgrade
    assert "tiny:latest: placement gpu → spill" in proc.stdout
    everything = json.loads(kvtop("changes", "--host", url, "--json").stdout)
    assert everything["story"] == "since 0.32.15: version 0.33.0 → spill → all on GPU"
    assert len(everything["changes"]) == 3
    unknown = kvtop("changes", "--host", url, "--since", "0.1.0")
    assert unknown.returncode == 2 and "not in the timeline" in unknown.stderr
