"""Host selection exactly as Ollama's envconfig.Host() reads OLLAMA_HOST (docs/ollama-internals.md §3.5)."""

from __future__ import annotations

import pytest

from kvtop.config.host import HostError, display_host, host_from_environment, parse_ollama_host


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (None, "http://127.0.0.1:11434"),  # unset: Ollama's default
        ("", "http://127.0.0.1:11434"),
        ("   ", "http://127.0.0.1:11434"),
        ("0.0.0.0", "http://127.0.0.1:11434"),  # a listen address; a client reaches loopback
        ("0.0.0.0:11434", "http://127.0.0.1:11434"),
        ("0.0.0.0:8080", "http://127.0.0.1:8080"),
        ("[::]:11434", "http://[::1]:11434"),
        ("[::1]:8080", "http://[::1]:8080"),
        ("::1", "http://[::1]:11434"),  # SplitHostPort fails, ParseIP succeeds
        ("gpu-box", "http://gpu-box:11434"),  # scheme optional, default port 11434
        ("gpu-box:1234", "http://gpu-box:1234"),
        ("http://gpu-box", "http://gpu-box:80"),  # explicit http: default port 80
        ("https://gpu-box", "https://gpu-box:443"),  # explicit https: default port 443
        ("https://gpu-box:8443/ollama/", "https://gpu-box:8443/ollama"),  # path prefix kept
        ("http://gpu-box/api-prefix", "http://gpu-box:80/api-prefix"),
        ('"gpu-box:99"', "http://gpu-box:99"),  # envconfig.Var trims quotes
        ("'gpu-box'", "http://gpu-box:11434"),
        ("gpu-box:notaport", "http://gpu-box:11434"),  # invalid port: default
        ("gpu-box:99999", "http://gpu-box:11434"),  # out of range: default
        ("HTTPS://Gpu-Box", "https://Gpu-Box:443"),
    ],
)
def test_parse_ollama_host(raw: str | None, expected: str) -> None:
    assert parse_ollama_host(raw) == expected


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        ("http://[::1", "no closing ']'"),  # was http://[::1]:80
        ("[::1", "no closing ']'"),
        ("https://[fe80::1/ollama", "no closing ']'"),
        ("[::1]x:11500", "after ']' only ':PORT'"),  # was quoted back as '[::1]x:11500]'
        ("[::1]:11500]", "after ']' only ':PORT'"),
        ("::1]:11500", "a ']' with no '[' before it"),
        ("gpu[box:11434", "a '[' inside the host"),
    ],
)
def test_a_bracket_out_of_place_is_refused_quoting_what_was_given(raw: str, words: str) -> None:
    with pytest.raises(HostError) as info:
        parse_ollama_host(raw, strict=True)
    message = str(info.value)
    assert repr(raw) in message and words in message, message
    assert f"{raw}]'" not in message and f"'[{raw}" not in message, message  # not kvtop's own form of it


def test_an_unclosed_bracket_from_the_environment_is_read_as_ollama_reads_it() -> None:
    # Ollama's envconfig.Host() trims the brackets (strings.Trim(hostport, "[]")): OLLAMA_HOST=[::1
    # reaches ::1 there, so it does here; --host (strict) refuses it.
    assert parse_ollama_host("[::1") == "http://[::1]:11434"
    with pytest.raises(HostError):
        parse_ollama_host("[::1]x:11500")


def test_host_from_environment() -> None:
    assert host_from_environment({"OLLAMA_HOST": "10.1.2.3:7000"}) == "http://10.1.2.3:7000"
    assert host_from_environment({}) == "http://127.0.0.1:11434"


@pytest.mark.parametrize(
    ("url", "shown"), [("http://127.0.0.1:11434", "127.0.0.1:11434"), ("https://gpu:443/x", "https://gpu:443/x")]
)
def test_display_host(url: str, shown: str) -> None:
    assert display_host(url) == shown


def test_the_local_server_is_the_first_on_this_machine_else_the_first() -> None:
    """sources.hosts.local_host: the GPUs, processes and log read here join one server's state."""
    from kvtop.sources.hosts import local_host

    mine = {"10.1.2.3"}
    assert (
        local_host(["http://gpu-b:11434", "http://127.0.0.1:11434"], addresses=mine, hostname="box")
        == "http://127.0.0.1:11434"
    )
    assert (
        local_host(
            ["http://gpu-b:11434", "http://10.1.2.3:11434", "http://localhost:1"], addresses=mine, hostname="box"
        )
        == "http://10.1.2.3:11434"
    )
    assert (
        local_host(["http://gpu-b:11434", "http://box.lan:11434"], addresses=mine, hostname="box")
        == "http://box.lan:11434"
    )
    assert (
        local_host(["http://gpu-a:11434", "http://gpu-b:11434"], addresses=mine, hostname="box") == "http://gpu-a:11434"
    )  # none here: the first (a single --host may be an SSH tunnel)
