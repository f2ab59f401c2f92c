"""Messages workers post to the app (past tense: something happened)."""

from __future__ import annotations

from textual.message import Message

from kvtop.model.snapshots import OllamaSnapshot


class SnapshotReceived(Message):
    """A source finished one sample; the app applies it to its state."""

    def __init__(self, snapshot: OllamaSnapshot) -> None:
        super().__init__()
        self.snapshot = snapshot
