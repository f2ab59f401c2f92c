"""``python -m kvtop.cli``: the ``kvtop`` command (as when ``kvtop/cli.py`` was a module)."""

from __future__ import annotations

from kvtop.cli import main

if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
