"""The access options every command that reaches a server takes (``--header``, ``--password-file``,
``--netrc``, ``--netrc-file``, ``--cacert``, ``--insecure``), and the ``--help`` text on credentials.

The dashboard, ``kvtop plan`` and ``kvtop export`` import them from here; this module imports
nothing of theirs.
"""

from __future__ import annotations

import argparse
from typing import Any


ACCESS_HELP = """\
credentials, kept off the command line (where every local user sees them, ps):
  OLLAMA_API_KEY=… kvtop             sent as Authorization: Bearer
  kvtop --host https://alice@gpu-box/ --password-file FILE
                                     basic auth; FILE's first line (chmod 600)
  kvtop --host https://gpu-box/ --netrc
                                     the machine entry of $NETRC or ~/.netrc
  config file [servers."URL"]        headers = { Authorization = "…" } or
                                     password_file = "…" (file chmod 600)
"""
"""How to give credentials, for the ``--help`` of every command that reaches a server."""


def access_options(args: argparse.Namespace) -> dict[str, Any]:
    """The keyword arguments of ``config.server_accesses`` that come from :func:`add_access_arguments`'s
    flags (``headers``, ``cacert``, ``insecure``, ``password_file``, ``netrc``, ``netrc_file``)."""
    return {
        "headers": list(getattr(args, "header", None) or []),
        "cacert": getattr(args, "cacert", None),
        "insecure": bool(getattr(args, "insecure", False)),
        "password_file": getattr(args, "password_file", None),
        "netrc": bool(getattr(args, "netrc", False)),
        "netrc_file": getattr(args, "netrc_file", None),
    }


def add_access_arguments(p: argparse.ArgumentParser) -> None:
    """``--header``, ``--password-file``, ``--netrc``, ``--netrc-file``, ``--cacert`` and ``--insecure``:
    how to reach a server behind a proxy (the dashboard, ``kvtop plan`` and ``kvtop export`` take the
    same ones; :func:`access_options`, ``config.server_accesses``)."""
    p.add_argument(
        "--password-file",
        metavar="FILE",
        default=None,
        help="basic-auth password: the first line of FILE (chmod 600), for the user named in the URL "
        "(--host https://alice@gpu-box/); keeps the password out of ps",
    )
    p.add_argument(
        "--netrc",
        action="store_true",
        help="read the host's login and password from $NETRC or ~/.netrc (chmod 600), as curl -n",
    )
    p.add_argument("--netrc-file", metavar="FILE", default=None, help="like --netrc, from FILE")
    p.add_argument(
        "--header",
        action="append",
        default=[],
        metavar="'NAME: VALUE'",
        help="send this header to the server (repeatable); a credential here is visible to every "
        'local user (ps): prefer OLLAMA_API_KEY or the config file\'s [servers."URL"] headers',
    )
    tls = p.add_mutually_exclusive_group()
    tls.add_argument(
        "--cacert",
        metavar="FILE",
        default=None,
        help="trust the CA certificate(s) in this PEM file (instead of the system's) for https servers",
    )
    tls.add_argument(
        "--insecure",
        action="store_true",
        help="do not verify the server's TLS certificate (said on screen while in use)",
    )
