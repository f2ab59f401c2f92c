"""A server's timeline of changes kept across kvtop runs (``model.changes``): one JSON-lines file
per server in kvtop's state folder (``config.files.state_dir``: ``~/.local/state/kvtop/timeline/``
on Linux), named by a hash of the server's URL.

Lines: ``{"type": "server", "url": ...}`` (the URL without userinfo or secret query parameters:
``redact.scrub_text``), then ``{"type": "change", ...}`` (``Change.to_json``), oldest first, then
one ``{"type": "fingerprint", "facts": {key: [value, at, source]}}``: the facts the next run compares
with. Bounded (the newest :data:`MAX_CHANGES` changes), rewritten whole and atomically (a
temporary file then ``os.replace``: a crash leaves the old file or the new one). Reading never
raises: a missing file is an empty timeline; unreadable lines (a truncated or corrupt file) are
skipped and said once in :attr:`Timeline.warning`. Writing says its failure as a sentence.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kvtop.model.changes import Change, Fact
from kvtop.redact import scrub_text

__all__ = ["MAX_CHANGES", "Timeline", "TimelineStore", "timeline_folder"]

MAX_CHANGES = 500
"""Changes kept per server (the oldest are dropped)."""

MAX_FILE_BYTES = 4 * 1024 * 1024
"""A timeline file larger than this is not read (a real one is well under 200 KiB)."""

MAX_FACTS = 2000
"""Facts kept in a fingerprint (a server with thousands of models loaded over time)."""


def timeline_folder(state_folder: Path) -> Path:
    """Where the timelines are: ``<state_dir>/timeline``."""
    return state_folder / "timeline"


@dataclass(frozen=True, slots=True)
class Timeline:
    """What a timeline file holds.

    Attributes:
        changes: Oldest first.
        facts: The last fingerprint (empty for a new server).
        warning: One sentence when part of the file could not be read, else None.
    """

    changes: tuple[Change, ...] = ()
    facts: Mapping[str, Fact] = field(default_factory=dict)
    warning: str | None = None


def _fact(raw: object) -> Fact | None:
    if not isinstance(raw, list) or len(raw) != 3:
        return None
    value, at, source = raw
    if value is not None and not isinstance(value, str):
        return None
    if not isinstance(at, (int, float)) or isinstance(at, bool) or not math.isfinite(at):
        return None
    if not isinstance(source, str):
        return None
    return Fact(value, float(at), source)


class TimelineStore:
    """The timeline file of one server.

    Args:
        folder: The timelines' folder (:func:`timeline_folder`).
        url: The server's base URL (its userinfo and secrets never reach the file).
    """

    def __init__(self, folder: Path, url: str) -> None:
        self.folder = folder
        self.url = scrub_text(url)
        digest = hashlib.sha256(self.url.encode("utf-8")).hexdigest()[:16]
        self.path = folder / f"{digest}.jsonl"

    def read(self) -> Timeline:
        """The file's changes and last fingerprint; never raises."""
        try:
            with open(self.path, "rb") as fh:
                raw = fh.read(MAX_FILE_BYTES + 1)
        except FileNotFoundError:
            return Timeline()
        except OSError as exc:
            return Timeline(warning=f"cannot read the change timeline {self.path}: {exc.strerror or exc}")
        if len(raw) > MAX_FILE_BYTES:
            return Timeline(warning=f"the change timeline {self.path} is over {MAX_FILE_BYTES:,} bytes: not read")
        changes: list[Change] = []
        facts: dict[str, Fact] = {}
        bad = 0
        for line in raw.decode("utf-8", errors="replace").splitlines():
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
                kind = obj.get("type") if isinstance(obj, dict) else None
                if kind == "change":
                    changes.append(Change.from_json(obj))
                elif kind == "fingerprint":
                    found = obj.get("facts")
                    if not isinstance(found, dict):
                        raise ValueError("facts is not an object")
                    facts = {}
                    for key, value in list(found.items())[:MAX_FACTS]:
                        fact = _fact(value)
                        if fact is None:
                            bad += 1
                        else:
                            facts[str(key)] = fact
                elif kind != "server":
                    raise ValueError("unknown line")
            except (ValueError, AttributeError, RecursionError):
                bad += 1
        warning = None
        if bad:
            warning = (
                f"the change timeline {self.path}: {bad} unreadable line(s) skipped (a truncated or"
                " damaged file); kvtop goes on with the rest and rewrites it on the next change"
            )
        changes.sort(key=lambda c: c.at)
        return Timeline(tuple(changes[-MAX_CHANGES:]), facts, warning)

    def write(self, changes: Sequence[Change], facts: Mapping[str, Fact]) -> str | None:
        """Replace the file with the newest :data:`MAX_CHANGES` of ``changes`` and ``facts``
        (atomically); None, or the sentence saying why it could not be written."""
        lines = [json.dumps({"type": "server", "url": self.url}, ensure_ascii=False)]
        for c in list(changes)[-MAX_CHANGES:]:
            lines.append(json.dumps({"type": "change", **c.to_json()}, ensure_ascii=False))
        kept = dict(list(facts.items())[-MAX_FACTS:])
        lines.append(
            json.dumps(
                {"type": "fingerprint", "facts": {k: [f.value, f.at, f.source] for k, f in kept.items()}},
                ensure_ascii=False,
            )
        )
        tmp = self.folder / f".{self.path.name}.{os.getpid()}.tmp"
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            tmp.write_text("\n".join(lines) + "\n", encoding="utf-8")
            os.replace(tmp, self.path)
        except OSError as exc:
            try:
                tmp.unlink(missing_ok=True)
            except OSError:
                pass
            return f"cannot save the change timeline in {self.folder}: {exc.strerror or exc}"
        return None
