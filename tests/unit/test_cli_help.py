"""``kvtop --help`` lists every subcommand and machine-readable mode; each subcommand's own
``--help`` describes all it does."""

from __future__ import annotations

import inspect
import re

import pytest

from kvtop import cli
from kvtop.export.command import build_parser as export_parser


def _epilog_lines() -> list[str]:
    text = cli.build_parser().format_help()
    return text[text.index("subcommands") :].splitlines()


def test_every_dispatched_subcommand_is_in_the_epilog() -> None:
    dispatched = re.findall(r'argv\[:1\] == \["([a-z-]+)"\]', inspect.getsource(cli.main))
    assert sorted(dispatched) == ["changes", "export", "inspect-log", "plan"]
    usages = [line.strip() for line in _epilog_lines() if line.startswith("  kvtop ")]
    for name in dispatched:
        assert any(u.startswith(f"kvtop {name} ") for u in usages), name
    choices = next(a.choices for a in export_parser()._actions if a.dest == "format")  # noqa: SLF001
    assert sorted(choices) == ["prometheus", "textfile"]
    for fmt in choices:
        assert any(u.startswith(f"kvtop export {fmt}") for u in usages), fmt
    assert any(u.startswith("kvtop plan --all ") for u in usages)
    assert any(u.startswith("kvtop --stream [--count N]") for u in usages)
    assert any(u.startswith("kvtop --once --json") for u in usages)


def test_epilog_keeps_its_lines_within_80_columns() -> None:
    lines = _epilog_lines()
    assert len(lines) > 10
    assert [line for line in lines if len(line) > 80] == []


@pytest.mark.parametrize(
    "argv, words",
    [
        (["export", "--help"], ["prometheus", "textfile", "node_exporter", "atomically", "no port"]),
        (["plan", "--help"], ["--all", "pre-flight", "VRAM-tiered"]),
    ],
)
def test_subcommand_help_names_what_it_does(
    argv: list[str], words: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    try:
        rc = cli.main(argv)  # plan returns its code; export lets argparse exit
    except SystemExit as exc:
        rc = exc.code
    out = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    assert rc in (0, None)
    for word in words:
        assert word in out, word
