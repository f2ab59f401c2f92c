"""Whether flash attention is impossible for a load: the runner or Ollama turned it off because the
model or the GPU cannot use it (``flash attention enabled but not supported by …``, llama.cpp's
``Flash Attention … not supported``; docs/ollama-internals.md §4.6). Then no fix may ask for flash
attention, or for a quantized cache, which needs it (§3.2)."""

from __future__ import annotations

import re
from typing import Final

from kvtop.logparse.events import FlashAttentionForcedOff
from kvtop.logparse.load_build import Load

__all__ = ["fa_forced"]

_FA_FORCED_RE: Final = re.compile(r"forcing off|not supported|not compatible|pre-Turing", re.IGNORECASE)


def fa_forced(load: Load) -> bool:
    """The runner or Ollama turned flash attention off because the model or GPU cannot use it."""
    return (
        any(isinstance(e, FlashAttentionForcedOff) for e in load.events)
        or _FA_FORCED_RE.search(load.flash_attention_reason or "") is not None
    )
