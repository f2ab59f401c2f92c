"""Which watched server runs on this machine: its GPUs, processes, ``/slots`` and server log are
the ones kvtop reads here. Shared by the dashboard, ``--once``/``--check`` and the exporter."""

from __future__ import annotations

import functools
import importlib
import ipaddress
import socket
import ssl
from collections.abc import Collection, Sequence

import httpx


def is_loopback_url(url: str) -> bool:
    """True when ``url`` names this machine's loopback (``127.0.0.0/8``, ``::1``, ``localhost``):
    no proxy (``HTTP_PROXY``…) may sit between kvtop and that server."""
    name = (httpx.URL(url).host or "").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


@functools.cache
def _no_ca_context() -> ssl.SSLContext:
    """A TLS client context with verification on and no CA loaded: built in about a millisecond
    (loading the CA bundle takes 30-130 ms per client), and any TLS connection made with it fails
    verification instead of going unchecked. Shared by every client of the process."""
    return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)


def _tls_proxy_in_env() -> bool:
    """Whether the environment names a proxy reached over TLS (``HTTPS_PROXY=https://…``)."""
    import urllib.request

    return any(str(v).lower().startswith("https://") for v in urllib.request.getproxies().values())


def httpx_verify(url: str, *, trust_env: bool) -> ssl.SSLContext | bool:
    """The ``verify=`` argument for an httpx client whose requests all go to ``url``.

    A client that only speaks plain HTTP never makes a TLS connection (kvtop follows no
    redirect), so building httpx's default context (the CA bundle read and parsed: 30-130 ms of
    startup per client) is wasted: such a client gets :func:`_no_ca_context`. A client
    for an ``https://`` URL, or one that reads the environment (``trust_env``) where a proxy is
    reached over TLS, gets ``True``: httpx's default verification, unchanged.

    Args:
        url: The client's base URL, or the URL of every request it sends.
        trust_env: The client's ``trust_env`` (proxies from ``HTTP_PROXY``… are used).

    Returns:
        An ``ssl.SSLContext`` or True, for ``httpx.AsyncClient(verify=...)``.
    """
    if not url.lower().startswith("http://") or (trust_env and _tls_proxy_in_env()):
        return True
    return _no_ca_context()


def local_addresses() -> frozenset[str]:
    """The IP addresses of this machine's network interfaces (psutil), scope ids removed."""
    try:
        psutil = importlib.import_module("psutil")
        found: set[str] = set()
        for addrs in psutil.net_if_addrs().values():
            for a in addrs:
                if a.family in (socket.AF_INET, socket.AF_INET6) and a.address:
                    found.add(a.address.split("%", 1)[0].lower())
        return frozenset(found)
    except Exception:  # noqa: BLE001 - without the list only loopback counts as local
        return frozenset()


def host_is_this_machine(url: str, *, addresses: Collection[str] | None = None, hostname: str | None = None) -> bool:
    """Whether the server at ``url`` runs on this machine (its GPU and processes are ours).

    True for ``localhost``, loopback addresses, an address of one of this machine's interfaces
    (``addresses``; default :func:`local_addresses`) and this machine's own host name
    (``hostname``; default ``socket.gethostname()``, short or fully qualified). No DNS lookup:
    any other name counts as another machine.
    """
    host = httpx.URL(url).host.lower().rstrip(".")
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        ip = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        name = (hostname if hostname is not None else socket.gethostname()).lower().rstrip(".")
        return bool(name) and (host == name or host == name.split(".", 1)[0] or host.split(".", 1)[0] == name)
    if ip.is_loopback or ip.is_unspecified:
        return True
    mapped = getattr(ip, "ipv4_mapped", None)
    if mapped is not None and mapped.is_loopback:
        return True
    pool = addresses if addresses is not None else local_addresses()
    return str(ip) in {a.lower() for a in pool} or (mapped is not None and str(mapped) in pool)


def local_host(hosts: Sequence[str], *, addresses: Collection[str] | None = None, hostname: str | None = None) -> str:
    """The server this machine's GPU sample, process table and server log belong to: the first
    one on this machine (:func:`host_is_this_machine`), else the first one given (a single
    ``--host`` may be an SSH tunnel to this machine).

    Raises:
        IndexError: ``hosts`` is empty.
    """
    return next((url for url in hosts if host_is_this_machine(url, addresses=addresses, hostname=hostname)), hosts[0])
