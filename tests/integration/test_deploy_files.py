"""The files shipped in ``deploy/``: Prometheus alerting rules, the Grafana dashboard, systemd units.

Every metric a rule expression or a dashboard query names must be one kvtop really exports: the
names are taken from the PromQL with a regular expression and looked up in a real scrape of
``kvtop export prometheus`` run against the stand-in Ollama server with a server log (the log gives
the tok/s, truncation and reload families), plus the GPU families of the exporter's collector fed
by ``GpuSource`` over the fake NVML (this machine has no GPU the scrape could show).
"""

from __future__ import annotations

import configparser
import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from kvtop.export.command import build_parser
from kvtop.export.metrics import METRICS, HostView, KvtopCollector, make_registry
from kvtop.model.alerts.types import KINDS
from kvtop.model.fold_alerts import fold_with_alerts
from kvtop.model.snapshots import OllamaSnapshot
from kvtop.model.state import initial_state
from kvtop.sources.gpu import GpuSource
from tests.fakes.nvml import FakeNvml
from tests.integration.test_export_prometheus import _runner, exporter
from tests.llama_fixture import ollama_spawn_line
from tests.standin import REPO, running, tiny_scenario
from tests.unit.test_prometheus import TRUNCATION, samples

DEPLOY = REPO / "deploy"
RULES = DEPLOY / "prometheus" / "kvtop-rules.yml"
DASHBOARD = DEPLOY / "grafana" / "kvtop-dashboard.json"
UNITS = sorted((DEPLOY / "systemd").glob("*.service"))

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
_RANGES = re.compile(r"\[[^\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_MATCHERS = re.compile(r"\{[^}]*\}")


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (label names, functions, grouping labels,
    string literals and Grafana's ``$variables`` left out): every identifier that starts with
    ``kvtop_`` once strings, ranges, matchers and grouping clauses are removed."""
    text = _STRINGS.sub('""', expr)
    text = _MATCHERS.sub("", text)
    text = _RANGES.sub("", text)
    text = _GROUPING.sub("", text)
    return {n for n in _NAME.findall(text) if n.startswith("kvtop_")}


def test_metric_names_are_found_in_promql() -> None:
    assert metric_names('sum by (host, model) (kvtop_model_memory_bytes{part="kv", host=~"$host"})') == {
        "kvtop_model_memory_bytes"
    }
    assert metric_names(
        "increase(kvtop_model_reloads_total[30m]) * on (host, blob) group_left (model) kvtop_model_info"
    ) == {"kvtop_model_reloads_total", "kvtop_model_info"}
    assert metric_names('kvtop_alerts{kind=~"kvtop_fake|oom"} > 0') == {"kvtop_alerts"}


def rule_exprs() -> list[tuple[str, str]]:
    doc = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    return [(r["alert"], r["expr"]) for g in doc["groups"] for r in g["rules"]]


def dashboard_exprs() -> list[tuple[str, str]]:
    doc = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    out: list[tuple[str, str]] = []

    def walk(panels: list[dict[str, Any]]) -> None:
        for p in panels:
            out.extend((p["title"], t["expr"]) for t in p.get("targets", ()))
            walk(p.get("panels", []))

    walk(doc["panels"])
    for var in doc["templating"]["list"]:
        if var["type"] == "query":
            query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
            out.append((f"${var['name']}", query))
    return out


@pytest.fixture(scope="module")
def exported_names(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    """Sample names of a real scrape: the exporter over HTTP against the stand-in with a log that
    loads a model, times a request, truncates a prompt and loads the same weights again; plus
    the GPU families of a collector over ``GpuSource`` with the fake NVML."""
    tmp_path = tmp_path_factory.mktemp("deploy")
    scenario, blob = tiny_scenario(tmp_path)
    argv, stderr = _runner("f16-fa-on-np1", blob)
    runner = ollama_spawn_line(argv) + "\n" + stderr
    log = tmp_path / "server.log"
    log.write_text(runner + TRUNCATION + "\n" + runner, encoding="utf-8")
    with running(["--manual", "--scenario", str(scenario)]) as server:
        with exporter(tmp_path, "--host", server.url, "--interval", "0.25", "--log", f"file:{log}") as ex:
            fams = ex.until(
                lambda f: (
                    bool(samples(f, "kvtop_model_reloads_total"))
                    and bool(samples(f, "kvtop_model_decode_tokens_per_second"))
                    and bool(samples(f, "kvtop_prompt_truncations_total"))
                )
            )
            assert ex.stop() == 0
    names = {s.name for f in fams.values() for s in f.samples}
    fake = FakeNvml()
    gpu = GpuSource(nvml=fake.module, sysfs_root=tmp_path / "no-sysfs", platform="linux").sample_sync()
    assert gpu.ok
    state, _ = initial_state("http://127.0.0.1:11434", {}, __import__("datetime").timezone.utc)
    state = fold_with_alerts(
        state, OllamaSnapshot(taken_at=1.0, host_url="http://127.0.0.1:11434", reachable=False, error="refused")
    )
    view = HostView(url="http://127.0.0.1:11434", local=True, log=False, state=state)
    text = generate_latest(make_registry(KvtopCollector(lambda: [view], lambda: gpu))).decode()
    names |= {s.name for f in text_string_to_metric_families(text) for s in f.samples}
    return names


def test_every_rule_and_dashboard_metric_is_exported(exported_names: set[str]) -> None:
    used = {(where, name) for where, expr in rule_exprs() + dashboard_exprs() for name in metric_names(expr)}
    missing = sorted((where, name) for where, name in used if name not in exported_names)
    assert missing == []
    # and the files do use the families the issue names: spill, KV vs weights, tok/s, GPU memory, alerts
    names = {name for _, name in used}
    assert {
        "kvtop_model_spilled",
        "kvtop_model_memory_bytes",
        "kvtop_model_decode_tokens_per_second",
        "kvtop_gpu_memory_used_bytes",
        "kvtop_alerts",
        "kvtop_server_up",
        "kvtop_prompt_truncations_total",
        "kvtop_model_reloads_total",
    } <= names
    catalogue = {m.name for m in METRICS}
    assert names <= catalogue


def test_rules_name_real_alert_kinds_and_cover_the_issue() -> None:
    exprs = dict(rule_exprs())
    assert {
        "KvtopServerDown",
        "KvtopModelSpilled",
        "KvtopKvTypeFallback",
        "KvtopFlashAttentionForcedOff",
        "KvtopPromptTruncationsRising",
        "KvtopReloadChurn",
        "KvtopGpuNearlyFull",
    } <= set(exprs)
    kinds = {
        k for expr in exprs.values() for m in re.finditer(r'kind=~?"([^"]*)"', expr) for k in m.group(1).split("|")
    }
    assert kinds and kinds <= set(KINDS), kinds - set(KINDS)


def test_dashboard_is_grafana_json_with_unique_ids_and_a_host_variable() -> None:
    doc = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    ids = [p["id"] for p in doc["panels"]]
    assert len(ids) == len(set(ids))
    assert {v["name"] for v in doc["templating"]["list"]} == {"datasource", "host"}
    titles = {p["title"] for p in doc["panels"]}
    assert {
        "KV cache vs weights vs compute per model",
        "GPU memory by owner",
        "Decode and prefill speed",
        "Models spilled to system RAM",
        "Alerts",
    } <= titles
    for p in doc["panels"]:
        if p["type"] != "row":
            assert p["targets"] and all(t["datasource"]["uid"] == "${datasource}" for t in p["targets"])


@pytest.mark.skipif(
    shutil.which("promtool") is None,
    reason="promtool is not installed (Debian: apt-get install prometheus; .ci/run installs it)",
)
def test_promtool_accepts_the_rules() -> None:
    proc = subprocess.run(["promtool", "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(rule_exprs())} rules found" in proc.stdout


RULE_TESTS = DEPLOY / "prometheus" / "kvtop-rules.test.yml"


def test_every_dashboard_panel_follows_the_host_variable() -> None:
    """Selecting a server filters every query: the GPU and RAM families carry no ``host`` label (the
    exporter's machine is its ``instance``), so they are joined on the instance of that host's
    ``kvtop_server_up``; a fleet's other machines never add into one panel."""
    for where, expr in dashboard_exprs():
        if where != "$host":
            assert "$host" in expr, (where, expr)
        if re.search(r"kvtop_(gpu|system)_", expr):
            assert 'on (instance) kvtop_server_up{host=~"$host"}' in expr, (where, expr)


@pytest.mark.skipif(
    shutil.which("promtool") is None,
    reason="promtool is not installed (Debian: apt-get install prometheus; .ci/run installs it)",
)
def test_promtool_parses_every_dashboard_query(tmp_path: Path) -> None:
    """Each dashboard query, with Grafana's variables given values, is valid PromQL (promtool parses
    it as a recording rule)."""
    rules = [
        {"record": f"kvtop:dashboard_query_{i}", "expr": expr.replace("$__rate_interval", "5m").replace("$host", ".*")}
        for i, (_, expr) in enumerate(dashboard_exprs())
        if not expr.startswith("label_values(")
    ]
    path = tmp_path / "dashboard-queries.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}), encoding="utf-8")
    proc = subprocess.run(["promtool", "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(rules)} rules found" in proc.stdout


@pytest.mark.skipif(
    shutil.which("promtool") is None,
    reason="promtool is not installed (Debian: apt-get install prometheus; .ci/run installs it)",
)
def test_promtool_unit_tests_of_the_rules_pass() -> None:
    """``kvtop-rules.test.yml``: each alert fires in the situation its name says, and only then
    (a CPU-only server's model is not "spilled", a one-minute blip is not "down", 10 % free is not
    "nearly full", a blob's first truncation counts)."""
    proc = subprocess.run(["promtool", "test", "rules", str(RULE_TESTS)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


def test_rule_tests_cover_the_spill_down_and_gpu_rules() -> None:
    doc = yaml.safe_load(RULE_TESTS.read_text(encoding="utf-8"))
    assert doc["rule_files"] == [RULES.name]
    tested = {t["alertname"] for case in doc["tests"] for t in case["alert_rule_test"]}
    assert {"KvtopModelSpilled", "KvtopServerDown", "KvtopGpuNearlyFull"} <= tested
    assert tested <= set(dict(rule_exprs()))
    firing = {t["alertname"] for case in doc["tests"] for t in case["alert_rule_test"] if t["exp_alerts"]}
    quiet = {t["alertname"] for case in doc["tests"] for t in case["alert_rule_test"] if not t["exp_alerts"]}
    assert tested == firing == quiet  # each tested rule both fires and stays quiet


@pytest.mark.parametrize("unit", UNITS, ids=[u.name for u in UNITS])
def test_systemd_units_run_a_valid_kvtop_export(unit: Path) -> None:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(unit.read_text(encoding="utf-8"))
    assert {"Unit", "Service", "Install"} <= set(parser.sections())
    argv = shlex.split(parser["Service"]["ExecStart"])
    assert argv[0].endswith("/kvtop") and argv[1] == "export"
    args = build_parser().parse_args(argv[2:])  # exits (SystemExit) on a flag kvtop does not know
    assert args.format in ("prometheus", "textfile")
    if args.format == "textfile":
        assert args.path.endswith(".prom")
        assert parser["Service"]["ReadWritePaths"] == str(Path(args.path).parent)
    assert parser["Service"]["RestartPreventExitStatus"] == "2"  # bad flags: no restart loop
    assert parser["Install"]["WantedBy"] == "multi-user.target"
    if shutil.which("systemd-analyze"):
        proc = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60)
        assert "Unknown key" not in proc.stderr and "Unknown section" not in proc.stderr, proc.stderr
