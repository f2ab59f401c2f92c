"""Event classes get their fast ``__init__`` and ``_lean`` at first use, not at import
(``logparse.event_class``: startup pays for no code generation); the generated code behaves as the
dataclass's would: frozen, with its defaults, equal by value, compacted without its raw line."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

from kvtop.logparse.event_compactor import EventCompactor
from kvtop.logparse.events import Oom


def test_no_event_class_generates_code_at_import() -> None:
    code = (
        "import kvtop.logparse.events as e, kvtop.logparse.request_events as r\n"
        "classes = [c for m in (e, r) for c in vars(m).values() if isinstance(c, type) and hasattr(c, '_lean')]\n"
        "print(len(classes), sum(c.__init__.__name__ == 'first_init' for c in classes))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    total, stubs = map(int, done.stdout.split())
    assert total >= 25 and stubs == total


def test_the_first_instance_builds_the_fast_init_and_it_behaves_as_the_dataclass() -> None:
    first = Oom(7, None, "raw line", "cudaMalloc failed: out of memory")
    assert type(first).__init__.__name__ == "__init__"  # generated now, installed on the class
    again = Oom(7, None, "raw line", "cudaMalloc failed: out of memory")
    assert first == again and first.raw == "raw line"
    with pytest.raises(dataclasses.FrozenInstanceError):
        first.line_no = 8  # type: ignore[misc]
    (lean,) = EventCompactor().compact([first])
    assert lean.raw == "" and lean.line_no == 7 and type(lean) is Oom
