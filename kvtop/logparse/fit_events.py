"""The events of the memory a llama-server load is fitted to: llama.cpp's fit pass (Era C,
``common_params_fit_impl``: :class:`FitOverflow` per device, :class:`FitPlan` per summary line; §1.2,
§3.5, §4.4, §4.5) and the free memory a device reports before the load (:class:`DeviceFree`; §1.2,
§4.5). Sections refer to ``docs/ollama-internals.md``; ``events.py`` lists them in ``LogEvent`` and
:data:`~kvtop.logparse.events.EVENT_TYPES`.
"""

from __future__ import annotations

from typing import ClassVar

from kvtop.logparse.event_class import EventBase, frozen_event

__all__ = ["DeviceFree", "FitOverflow", "FitPlan"]


@frozen_event
class FitOverflow(EventBase):
    """C ``common_params_fit_impl:   - ROCm0 (…): 25 layers ( 5 overflowing), 11065 MiB used, 1036 MiB free``
    (§1.2, §4.4, §4.5): the layers the fit put on a device, how many of them overflow it, and the memory the
    device is then projected to use and to keep free (None when the line stops before them)."""

    kind: ClassVar[str] = "fit_overflow"
    device: str
    layers: int
    overflowing: int
    used_bytes: int | None = None
    free_bytes: int | None = None


@frozen_event
class FitPlan(EventBase):
    """One summary line of llama.cpp's fit pass, which sizes a llama-server load to the free memory before it
    loads (Era C, ``common_params_fit_impl``; §4.4). Each line sets its own fields:

    - ``projected to use P MiB of device memory vs. F MiB of free device memory``: ``projected_bytes``,
      ``free_bytes`` (CPU only: ``… of host memory vs. F MiB of total host memory``, ``memory`` ``"host"``);
    - ``will leave L >= T MiB of free device memory, no changes needed`` (``will leave at least L >= T MiB of free
      memory on all devices``; ``of system memory`` for the host): ``left_bytes``, ``target_bytes``;
    - ``cannot fulfill margin of T MiB, need to reduce device memory by R MiB`` (several devices: ``… on all
      devices, need to use R MiB less in total``): ``target_bytes``, ``shortfall_bytes``;
    - with several devices, ``  - DEV (name): N total, U used, M surplus|deficit``: ``device`` and
      ``margin_bytes`` (negative for a deficit).

    ``T`` is the margin the fit keeps free on each device: ``LLAMA_ARG_FIT_TARGET`` in MiB (default 1024), which
    Ollama passes to llama-server, raised by the projector's size (§3.5).
    """

    kind: ClassVar[str] = "fit_plan"
    memory: str = "device"
    projected_bytes: int | None = None
    free_bytes: int | None = None
    left_bytes: int | None = None
    target_bytes: int | None = None
    shortfall_bytes: int | None = None
    device: str | None = None
    margin_bytes: int | None = None


@frozen_event
class DeviceFree(EventBase):
    """``llama_model_load_from_file_impl: using device CUDA0 (NVIDIA …) - 15221 MiB free`` (§1.2, §4.5)."""

    kind: ClassVar[str] = "device_free"
    device: str
    description: str
    free_bytes: int
