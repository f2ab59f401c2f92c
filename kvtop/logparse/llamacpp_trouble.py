"""The words of llama.cpp's failure lines in free text: the out-of-memory and load-failure phrases
(:data:`TROUBLE_RE`), the allocator's own failures among them and the cheap substring test run first
(:func:`may_be_trouble`); ``llamacpp_lines.py`` turns a match into ``Oom`` or ``LoadFailed``
(docs/ollama-internals.md §4.3: each allocator failure line is one out-of-memory incident).
"""

from __future__ import annotations

import re

TROUBLE_RE = re.compile(
    r"(?P<oom>[Oo]ut of memory|OutOf(?:Device|Host)?Memory|cudaMalloc failed|hipMalloc failed|[Ff]ailed to allocate"
    r"|[Ii]nsufficient [Mm]emory|[Nn]ot enough memory|[Uu]nable to allocate)"
    r"|(?P<fail>[Ee]rror loading model|[Ff]ailed to load model|[Uu]nable to load model|[Ff]ailed to create context"
    r"|unable to create llama context|Unsupported cache type|requires flash_attn|failed to initialize the context"
    r"|error: failed to)"
)

ALLOCATOR_FAILURES = frozenset(("cudaMalloc failed", "hipMalloc failed", "Unable to allocate", "unable to allocate"))
"""The :data:`TROUBLE_RE` out-of-memory matches that are an allocator's own failure line (``Oom.allocation``)."""


def may_be_trouble(text: str) -> bool:
    """Cheap substring test run before :data:`TROUBLE_RE` (most free-text lines are harmless).

    A broad test first, then one substring that every alternative of the regex contains
    (the regex search costs far more when it fails on a long line).
    """
    if not (
        "emory" in text
        or "alloc" in text
        or "ail" in text
        or "nable" in text
        or "rror" in text
        or "Unsupported" in text
        or "requires" in text
    ):
        return False
    return (
        "ut of memory" in text
        or "ailed to" in text
        or "nable to " in text
        or "OutOf" in text
        or "Malloc failed" in text
        or "nsufficient " in text
        or "ot enough memory" in text
        or "rror loading model" in text
        or "Unsupported cache type" in text
        or "requires flash_attn" in text
    )
