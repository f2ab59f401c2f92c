"""Keys as a terminal sends them in one burst: every key event posted to the app at once.

``pilot.press`` waits for the app to go idle between keys, so a handler that moves the focus has
run before the next key is routed. A terminal read (a paste, a fast typist, SSH bundling
keystrokes) gives the app all the keys together: each is routed to the widget focused when the
app takes it off its queue, before any of them is handled. ``burst`` reproduces that.
"""

from __future__ import annotations

from typing import Any

from textual import events

NAMES = {"/": "slash", " ": "space", ".": "full_stop", "?": "question_mark", "\n": "enter", "\x1b": "escape"}


def burst(pilot: Any, keys: str | list[str]) -> None:
    """Post ``keys`` (characters, or key names such as ``"enter"``) to the app in one go."""
    app = pilot.app
    for key in keys:
        if len(key) == 1:
            name = NAMES.get(key, key)
            character: str | None = key if key.isprintable() else None
        else:
            name, character = key, None
        app.post_message(events.Key(name, character))
