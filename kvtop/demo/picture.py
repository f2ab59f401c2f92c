"""Regenerate the README's picture of kvtop from the demo: ``python -m kvtop.demo.picture``.

It plays ``kvtop --demo`` headless (the stand-in with its server log and simulated GPU, as the
command line wires them) at :data:`SPEED` times real time until gemma4 has spilled and served a
request (about :data:`AT_S` s of scenario time), then writes

- ``docs/kvtop-demo.svg``: Textual's SVG screenshot at 160×48 (the large layout);
- the README's text screen at 80×24, between the ``<!-- kvtop-demo-screen … -->`` markers.

Both carry :func:`layout_hash`, a hash of the files that define the layout (:data:`LAYOUT_GLOBS`);
``tests/unit/test_readme_picture.py`` fails when the hash no longer matches, i.e. the README shows
an older layout than the code draws. Rerun this command after changing the layout.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import os
import re
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

__all__ = ["AT_S", "LAYOUT_GLOBS", "MARKER", "SPEED", "layout_hash", "main", "readme_hash", "svg_hash"]

REPO = Path(__file__).resolve().parents[2]
LAYOUT_GLOBS = (
    "kvtop/ui/kvtop.tcss",
    "kvtop/ui/layout.py",
    "kvtop/ui/screens/dashboard.py",
    "kvtop/ui/screens/history.py",
    "kvtop/ui/widgets/*.py",
)
"""The files whose content the README's screen depends on (relative to the repository)."""

SPEED = 8.0
"""Scenario seconds per real second while the picture is taken."""

AT_S = 52.0
"""Scenario time of the picture: three models loaded, gemma4 spilled and one of its requests timed."""

MARKER = re.compile(r"<!-- kvtop-demo-screen layout=([0-9a-f]{16}) -->\n(.*?)<!-- /kvtop-demo-screen -->", re.S)
SVG_MARKER = re.compile(r"<!-- kvtop-demo-screen layout=([0-9a-f]{16}) -->")


def layout_hash(repo: Path = REPO) -> str:
    """16 hex digits of the sha256 over the layout files' paths and contents (sorted by path)."""
    digest = hashlib.sha256()
    files = sorted({p for pattern in LAYOUT_GLOBS for p in repo.glob(pattern) if p.is_file()})
    for path in files:
        digest.update(path.relative_to(repo).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def readme_hash(text: str) -> str | None:
    """The layout hash the README's screen was made with, None when it has no marked screen."""
    m = MARKER.search(text)
    return m.group(1) if m else None


def svg_hash(text: str) -> str | None:
    """The layout hash in the SVG picture's comment, None when it has none."""
    m = SVG_MARKER.search(text)
    return m.group(1) if m else None


async def capture(size: tuple[int, int], svg: Path | None = None) -> list[str]:
    """Play the demo headless at ``size`` (columns, rows) until :data:`AT_S`; the screen's lines,
    and with ``svg`` Textual's screenshot written there.

    Raises:
        RuntimeError: The demo server did not start, or gemma4 had not spilled and been timed
            within a minute.
    """
    from kvtop.cli.demo import _machine_sources, demo_server
    from kvtop.config import Settings
    from kvtop.sources.tail_file import FileTail
    from kvtop.ui.app import make_app

    with tempfile.TemporaryDirectory(prefix="kvtop-picture-") as tmp, _fresh_user_dirs(Path(tmp)):
        log = Path(tmp) / "server.log"
        with demo_server(SPEED, extra=["--log-file", str(log)]) as url:
            settings = Settings(host_url=url, interval_s=1.0, demo=True, log_spec="file:server.log", theme="kvtop-dark")
            tail = FileTail(log)
            tail.description = "file:server.log"  # the picture does not show this machine's temporary path
            sources = _machine_sources(settings)
            assert sources is not None
            app = make_app(settings, log_source=tail, gpu_source=sources[0], proc_source=sources[1])
            async with app.run_test(size=size) as pilot:
                loop = asyncio.get_running_loop()
                await asyncio.sleep(AT_S / SPEED)
                deadline = loop.time() + 60
                while not _spilled_and_timed(app):
                    if loop.time() > deadline:
                        raise RuntimeError("gemma4 did not spill and serve a request within a minute")
                    await pilot.pause(0.1)
                await pilot.pause(0.5)
                lines = _screen_lines(app)
                if svg is not None:
                    svg.parent.mkdir(parents=True, exist_ok=True)
                    app.save_screenshot(filename=svg.name, path=str(svg.parent))
    return lines


@contextlib.contextmanager
def _fresh_user_dirs(tmp: Path) -> Iterator[None]:
    """Config and state folders of a new user (under ``tmp``) while the picture is taken: the
    panels someone chose on this machine (``state.toml``) or a config file must not change it."""
    saved = {k: os.environ.get(k) for k in ("XDG_CONFIG_HOME", "XDG_STATE_HOME")}
    os.environ["XDG_CONFIG_HOME"] = str(tmp / "config")
    os.environ["XDG_STATE_HOME"] = str(tmp / "state")
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _spilled_and_timed(app: object) -> bool:
    state = getattr(app, "state", None)
    for m in getattr(state, "models", ()):
        if (
            m.name.startswith("gemma4")
            and m.cpu_percent
            and m.throughput is not None
            and m.throughput.avg_decode_tps is not None
        ):
            return True
    return False


def _screen_lines(app: object) -> list[str]:
    return [strip.text.rstrip() for strip in app.screen._compositor.render_strips()]  # type: ignore[attr-defined]


def _with_marker(svg_text: str, digest: str) -> str:
    comment = f"<!-- kvtop-demo-screen layout={digest} -->"
    if SVG_MARKER.search(svg_text):
        return SVG_MARKER.sub(comment, svg_text)
    head, _, rest = svg_text.partition(">")  # after the root element's opening tag
    return f"{head}>{comment}{rest}" if rest else svg_text + comment


def update_readme(text: str, lines: Sequence[str], digest: str) -> str:
    """``text`` with its marked screen replaced by ``lines`` (added after the first paragraph when absent)."""
    block = (
        f"<!-- kvtop-demo-screen layout={digest} -->\n![kvtop --demo at 160×48](docs/kvtop-demo.svg)\n\n"
        "```\n" + "\n".join(lines).rstrip("\n") + "\n```\n<!-- /kvtop-demo-screen -->"
    )
    if MARKER.search(text):
        return MARKER.sub(lambda _: block, text, count=1)
    head, sep, rest = text.partition("\n\n```\n")
    if sep:  # the old unmarked screen: replace it
        old, _, tail = rest.partition("\n```\n")
        return f"{head}\n\n{block}\n{tail}"
    return text.rstrip("\n") + "\n\n" + block + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: write the SVG and the README's screen; 1 when the demo could not be played."""
    parser = argparse.ArgumentParser(prog="python -m kvtop.demo.picture", description=__doc__.splitlines()[0])
    parser.add_argument("--readme", type=Path, default=REPO / "README.md", help="the README to update")
    parser.add_argument("--svg", type=Path, default=REPO / "docs" / "kvtop-demo.svg", help="the SVG to write")
    args = parser.parse_args(argv)
    digest = layout_hash()
    try:
        asyncio.run(capture((160, 48), args.svg))
        lines = asyncio.run(capture((80, 24)))
    except (RuntimeError, OSError) as exc:
        print(f"kvtop.demo.picture: {exc}", file=sys.stderr)
        return 1
    args.svg.write_text(_with_marker(args.svg.read_text(encoding="utf-8"), digest), encoding="utf-8")
    readme = args.readme.read_text(encoding="utf-8")
    args.readme.write_text(update_readme(readme, lines, digest), encoding="utf-8")
    print(f"{args.svg} and {args.readme}: layout {digest}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
