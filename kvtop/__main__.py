"""Allow ``python -m kvtop``."""

from __future__ import annotations

from kvtop.cli import main

raise SystemExit(main())
