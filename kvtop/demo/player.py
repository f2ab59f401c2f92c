"""The stand-in's timeline: which scenario step is current, timed or stepped by hand.

Shared by the HTTP stand-in (``demo.server``, ``demo.standin_http``) and the
runner-log writer (``demo.logwriter``), below both.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from kvtop.demo.scenario import Scenario

__all__ = ["ScenarioPlayer"]


class ScenarioPlayer:
    """Decides which step is current, in timed or manual mode. Thread-safe.

    Timed mode: step ``i`` becomes current ``at_s / speed`` seconds after :meth:`start`; with
    ``loop`` the timeline restarts after the last step's ``at_s + hold_s``. Manual mode: the
    step only changes through :meth:`advance`.
    """

    def __init__(
        self,
        scenario: Scenario,
        *,
        manual: bool = False,
        speed: float = 1.0,
        loop: bool = True,
        clock: Any = time.monotonic,
        wall_ns: Any = time.time_ns,
    ) -> None:
        """Create a player; the clock starts immediately.

        Args:
            scenario: The scenario to play.
            manual: Whether time stands still between :meth:`advance` calls.
            speed: Timeline speed factor (> 0); 2.0 plays twice as fast.
            loop: Whether to restart after the last step (manual mode: wrap on advance).
            clock: Monotonic seconds source (injectable for tests).
            wall_ns: Wall-clock nanoseconds source (injectable for tests).

        Raises:
            ValueError: When ``speed`` is not a positive finite number.
        """
        if not (speed > 0 and speed != float("inf")):
            raise ValueError(f"speed must be a positive number, got {speed!r}")
        self.scenario = scenario
        self.manual = manual
        self.speed = float(speed)
        self.loop = loop
        self._clock = clock
        self._wall_ns = wall_ns
        self._lock = threading.Lock()
        self._start = 0.0
        self._manual_index = 0
        self._manual_since_ns = 0
        self.start()

    def start(self) -> None:
        """(Re)start the timeline at step 0."""
        with self._lock:
            self._start = self._clock()
            self._manual_index = 0
            self._manual_since_ns = self._wall_ns()

    def current(self) -> tuple[int, int]:
        """Return the current step index and the wall time (ns) at which it became current.

        Returns:
            ``(index, since_unix_ns)``.
        """
        with self._lock:
            if self.manual:
                return self._manual_index, self._manual_since_ns
            now_wall = self._wall_ns()
            elapsed = (self._clock() - self._start) * self.speed
            steps = self.scenario.steps
            period = self.scenario.period_s
            if self.loop and period > 0:
                elapsed %= period
            index = 0
            for i, step in enumerate(steps):
                if step.at_s <= elapsed:
                    index = i
                else:
                    break
            behind_s = max(0.0, elapsed - steps[index].at_s) / self.speed
            return index, now_wall - int(behind_s * 1e9)

    def advance(self, to: int | None = None) -> int:
        """Move to the next step, or jump to step ``to`` (manual mode).

        Past the last step the player wraps to step 0 when ``loop`` is set, else stays.

        Args:
            to: Step index to jump to, or None for the next step.

        Returns:
            The new step index.

        Raises:
            RuntimeError: When the player is not in manual mode.
            IndexError: When ``to`` is out of range.
        """
        if not self.manual:
            raise RuntimeError("advance is only available with --manual")
        count = len(self.scenario.steps)
        with self._lock:
            if to is None:
                nxt = self._manual_index + 1
                if nxt >= count:
                    nxt = 0 if self.loop else count - 1
            else:
                if not 0 <= to < count:
                    raise IndexError(f"step {to} out of range 0..{count - 1}")
                nxt = to
            self._manual_index = nxt
            self._manual_since_ns = self._wall_ns()
            return nxt
