"""``python -m kvtop.plan_cli``: ``kvtop plan`` without the ``kvtop`` command."""

from __future__ import annotations

import sys

from kvtop.plan_cli import main_plan

if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main_plan(sys.argv[1:]))
