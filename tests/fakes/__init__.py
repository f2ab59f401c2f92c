"""Fakes at the module boundary: a ``pynvml`` that behaves like the real one, a sysfs tree for
AMD GPUs, and psutil-like processes (some of them other users' and unreadable)."""
