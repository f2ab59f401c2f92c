"""Credentials: one set of masking rules (``kvtop.redact``) for every face, host values
whose userinfo holds ``/ ? # @ :``, password and netrc files kept private, warnings for a secret
on the command line, and every JSON string made safe (``textsafe.clean_json``)."""

from __future__ import annotations

import json
import os
import unicodedata
from pathlib import Path
from typing import Any

import pytest

from kvtop import redact
from kvtop.config.files import ConfigError
from kvtop.config.host import HostError
from kvtop.config.server_access import parse_host_access, server_accesses
from kvtop.redact import MASK, known_secrets, mask_argv, register_secrets, scrub_obj, scrub_text
from kvtop.sources.auth import SecretFileError, UserinfoError, netrc_login, read_password_file, split_userinfo
from kvtop.textsafe import clean_json, safe_block, safe_json


@pytest.fixture(autouse=True)
def _registry() -> Any:
    """The known secrets are process-wide: each test here leaves them as it found them."""
    saved = (redact._known, redact._text_ok)  # noqa: SLF001
    yield
    redact._known, redact._text_ok = saved  # noqa: SLF001
    for clear in redact._on_register:  # noqa: SLF001
        clear()


# --------------------------------------------------------------------------------------------
# free text


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("see https://alice:pa/ss@gpu-box:443/x now", "see https://gpu-box:443/x now"),  # '/' in the password
        ("https://alice:p?w#d@gpu-box/", "https://gpu-box/"),
        ("https://alice:p@ss@gpu-box/", "https://gpu-box/"),
        ("http://u@h and HTTPS://a:b@c", "http://h and HTTPS://c"),
        ("pull http://hub/v2/m?token=abc123&page=2", f"pull http://hub/v2/m?token={MASK}&page=2"),
        ("u?api_key=k1;sig=s2&x_access_token=t3", f"u?api_key={MASK};sig={MASK}&x_access_token={MASK}"),
        ("proxy said: Authorization: Bearer abcdefgh123", f"proxy said: Authorization: Bearer {MASK}"),
        ("bearer eyJhbGciOiJIUzI1NiJ9.x", f"bearer {MASK}"),
        # kvtop's own words stay readable
        ("sent: Authorization: Bearer from OLLAMA_API_KEY", "sent: Authorization: Bearer from OLLAMA_API_KEY"),
        ("no url here: a@b, host:port 10.0.0.1:11434", "no url here: a@b, host:port 10.0.0.1:11434"),
        ("http://gpu-box:11434/a@b", "http://gpu-box:11434/a@b"),
        ("gemma3:27b-it-q4_K_M", "gemma3:27b-it-q4_K_M"),
    ],
)
def test_scrub_text_masks_userinfo_query_secrets_and_authorization(text: str, shown: str) -> None:
    assert scrub_text(text) == shown


def test_registered_secrets_are_masked_in_every_boundary() -> None:
    secret = "Zq9-registered-secret-77"
    register_secrets([secret, "ab"])  # too short to search for: ignored
    assert secret in known_secrets() and "ab" not in known_secrets()
    assert scrub_text(f"echo {secret}!") == f"echo {MASK}!"
    assert secret not in safe_block(f"kvtop: server said {secret}\n")
    assert secret not in safe_json({"error": f"x {secret}", secret: [secret]})
    assert scrub_obj({"a": [f"{secret}", 1, None, {"k": secret}]}) == {"a": [MASK, 1, None, {"k": MASK}]}


# --------------------------------------------------------------------------------------------
# command lines


@pytest.mark.parametrize(
    ("argv", "shown"),
    [
        (
            ["llama-server", "--api-key", "SEKRET1", "--port", "8080"],
            ["llama-server", "--api-key", MASK, "--port", "8080"],
        ),
        (
            ["llama-server", "--api-key=SEKRET1", "--password=p2", "-hf-token", "t3"],
            ["llama-server", f"--api-key={MASK}", f"--password={MASK}", "-hf-token", MASK],
        ),
        (
            ["env", "HF_TOKEN=t4", "OLLAMA_PASS=p5", "PATH=/bin", "python", "x.py"],
            ["env", f"HF_TOKEN={MASK}", f"OLLAMA_PASS={MASK}", "PATH=/bin", "python", "x.py"],
        ),
        (["curl", "https://bob:pw6@x.example/m?token=t7"], ["curl", f"https://x.example/m?token={MASK}"]),
        (["llama-server", "--api-key", "--port", "1"], ["llama-server", "--api-key", "--port", "1"]),  # a flag follows
        (
            ["ollama runner --model /m --api-key SEKRET8 --port 1 TOKEN=t9"],
            [f"ollama runner --model /m --api-key {MASK} --port 1 TOKEN={MASK}"],
        ),  # a title rewritten as one string
        (
            ["/usr/bin/ollama", "runner", "--model", "/b/sha256-1", "--ctx-size", "8192", "--port", "4"],
            ["/usr/bin/ollama", "runner", "--model", "/b/sha256-1", "--ctx-size", "8192", "--port", "4"],
        ),
    ],
)
def test_mask_argv(argv: list[str], shown: list[str]) -> None:
    assert mask_argv(argv) == tuple(shown)


def test_mask_argv_keeps_none() -> None:
    assert mask_argv(None) is None


# --------------------------------------------------------------------------------------------
# host values


PW = "pa/ss?w#rd"


@pytest.mark.parametrize(
    "raw",
    [
        f"https://alice:{PW}@gpu-box/",
        "https://alice:pa/ss@gpu-box:443/x",
        "https://alice:p#x@gpu-box/",
        "alice:pa/ss@10.0.0.5:11434",
        "https://alice:pa?ss@[::1]:443/",
    ],
)
def test_an_unencoded_slash_question_or_hash_in_a_password_is_refused_without_printing_it(raw: str) -> None:
    with pytest.raises(UserinfoError) as info:
        split_userinfo(raw)
    message = str(info.value)
    assert "pa" not in message.replace("password", "").replace("percent", "")  # no piece of it
    assert "alice" not in message and "%2F" in message and "--password-file" in message
    with pytest.raises(HostError):
        parse_host_access(raw, strict=True)


@pytest.mark.parametrize(
    "raw",
    [
        "http://al/ice:s3cr3t@gpu-box:11434",
        "http://al?ice:s3cr3t@gpu-box/",
        "http://al#ice:s3cr3t@gpu-box/",
        "al/ice:s3cr3t@10.0.0.5:11434",
        "https://al/ice:p/w@gpu-box/",
    ],
)
def test_an_unencoded_slash_question_or_hash_in_a_user_name_is_refused_without_printing_the_password(raw: str) -> None:
    # "al" reads as a host name: before this, kvtop resolved "al" and printed the password (the
    # rest of the value read as a path) in its unreachable error, --check --json included.
    with pytest.raises(UserinfoError) as info:
        split_userinfo(raw)
    message = str(info.value)
    assert "s3cr3t" not in message and "p/w" not in message and "ice" not in message
    assert "%2F" in message
    with pytest.raises(HostError):
        parse_host_access(raw, strict=True)


@pytest.mark.parametrize(
    "raw",
    [
        "http://al/iceW0RDX@gpu-box",
        "http://al/iceW0RDX@gpu-box:11434/x",
        "al/iceW0RDX@10.0.0.5:11434",
        "http://al?iceW0RDX@gpu-box/",
        "https://al#iceW0RDX@gpu-box",
        "http://al:1234/iceW0RDX@gpu-box",
        "gpu-box:11434/a@b",
    ],
)
def test_an_at_after_the_host_is_refused_without_printing_what_precedes_it(raw: str) -> None:
    # a user name with an unencoded "/" and no password: "al" read as the host and "iceW0RDX" sent
    # in the path; "al:1234/iceW0RDX" may as well be a user and a password starting with digits.
    # What precedes the "@" cannot be told apart from a path holding one: it is refused, and the
    # message says how to write either.
    with pytest.raises(UserinfoError) as info:
        split_userinfo(raw)
    message = str(info.value)
    for piece in ("W0RDX", "al/", "al?", "al#", "al:", "1234", "a@b"):
        assert piece not in message, message
    assert "%2F" in message and "%40" in message
    with pytest.raises(HostError):
        parse_host_access(raw, strict=True)


def test_an_encoded_one_and_at_or_colon_in_a_password_work() -> None:
    assert split_userinfo("https://alice:pa%2Fss%3Fw%23rd@gpu-box/") == ("https://gpu-box/", "alice", PW)
    assert split_userinfo("https://alice:a:b@c@gpu-box/") == ("https://gpu-box/", "alice", "a:b@c")
    assert split_userinfo("https://alice:pw@gpu-box/a@b") == ("https://gpu-box/a@b", "alice", "pw")
    assert parse_host_access("https://al%2Fice:pw@gpu-box/") == ("https://gpu-box:443", "al/ice", "pw")
    assert parse_host_access("http://al%2Fice@gpu-box") == ("http://gpu-box:80", "al/ice", None)
    assert parse_host_access("gpu-box:11434/a%40b") == ("http://gpu-box:11434/a%40b", None, None)


# --------------------------------------------------------------------------------------------
# password and netrc files


def _private(path: Path, text: str, mode: int = 0o600) -> Path:
    path.write_text(text, encoding="utf-8")
    path.chmod(mode)
    return path


@pytest.mark.skipif(os.name != "posix", reason="POSIX mode bits")
def test_password_file_is_read_only_when_private(tmp_path: Path) -> None:
    good = _private(tmp_path / "pw", "s3cr/t:@#\nignored second line\n")
    assert read_password_file(str(good)) == "s3cr/t:@#"
    for mode in (0o640, 0o604, 0o660):
        loose = _private(tmp_path / f"pw{mode:o}", "s3cr/t\n", mode)
        with pytest.raises(SecretFileError) as info:
            read_password_file(str(loose))
        assert f"chmod 600 {loose}" in str(info.value) and "s3cr" not in str(info.value)
    with pytest.raises(SecretFileError, match="first line is empty"):
        read_password_file(str(_private(tmp_path / "empty", "\nx\n")))
    with pytest.raises(SecretFileError, match="no such file"):
        read_password_file(str(tmp_path / "missing"))


@pytest.mark.skipif(os.name != "posix", reason="POSIX mode bits")
def test_netrc_entry_for_the_host(tmp_path: Path) -> None:
    rc = _private(tmp_path / "netrc", "machine gpu-box login alice password n3t/rc@pw\ndefault login anon password d\n")
    assert netrc_login(str(rc), "gpu-box") == ("alice", "n3t/rc@pw")
    assert netrc_login(str(rc), "other") == ("anon", "d")
    rc.chmod(0o644)
    with pytest.raises(SecretFileError, match="chmod 600"):
        netrc_login(str(rc), "gpu-box")


@pytest.mark.skipif(os.name != "posix", reason="POSIX mode bits")
def test_server_accesses_take_passwords_from_files_and_warn_about_argv(tmp_path: Path) -> None:
    pw = _private(tmp_path / "pw", "file-pw-1\n")
    access, warnings = server_accesses(
        [("https://gpu-box:443", "alice", None)], password_file=str(pw), env={}, host_origin="flag"
    )
    assert (access["https://gpu-box:443"].username, access["https://gpu-box:443"].password) == ("alice", "file-pw-1")
    assert warnings == []  # nothing secret on the command line
    assert "file-pw-1" in known_secrets()  # registered: no output of this process shows it
    with pytest.raises(ConfigError, match="names its user"):
        server_accesses([("https://gpu-box:443", None, None)], password_file=str(pw), env={})
    access, _ = server_accesses(
        [("https://gpu-box:443", "alice", None), ("http://127.0.0.1:11434", None, None)], password_file=str(pw), env={}
    )  # for the server that names its user only
    assert access["https://gpu-box:443"].password == "file-pw-1" and access["http://127.0.0.1:11434"].username is None
    rc = _private(tmp_path / "netrc", "machine gpu-box login bob password netrc-pw-2\n")
    access, _ = server_accesses([("https://gpu-box:443", None, None)], netrc=True, env={"NETRC": str(rc)})
    assert (access["https://gpu-box:443"].username, access["https://gpu-box:443"].password) == ("bob", "netrc-pw-2")
    access, _ = server_accesses([("https://gpu-box:443", "carol", None)], netrc_file=str(rc), env={})
    assert access["https://gpu-box:443"].password is None  # the entry is bob's, not carol's
    _, warnings = server_accesses(
        [("https://gpu-box:443", "alice", "argv-pw-3")],
        env={},
        host_origin="flag",
        headers=["Authorization: Bearer argv-tok-4", "X-Trace: 1"],
    )
    assert len(warnings) == 2 and all("visible to every user of this machine (ps)" in w for w in warnings)
    assert "--header Authorization" in warnings[0] and "--password-file" in warnings[1]
    assert not any("argv-pw-3" in w or "argv-tok-4" in w for w in warnings)
    _, warnings = server_accesses([("https://gpu-box:443", "alice", "env-pw-5")], env={}, host_origin="env OLLAMA_HOST")
    assert warnings == []  # the environment is the user's own


@pytest.mark.skipif(os.name != "posix", reason="POSIX mode bits")
def test_a_config_file_holding_a_secret_must_be_private(tmp_path: Path) -> None:
    cfg = _private(tmp_path / "config.toml", "x = 1\n", 0o644)
    servers = {"https://gpu-box/": {"headers": {"Authorization": "Bearer cfg-tok-6"}}}
    with pytest.raises(ConfigError) as info:
        server_accesses([("https://gpu-box:443", None, None)], servers=servers, env={}, file_origin=str(cfg))
    assert f"chmod 600 {cfg}" in str(info.value) and "cfg-tok-6" not in str(info.value)
    with pytest.raises(ConfigError, match="chmod 600"):  # a password in its host value
        server_accesses(
            [("https://gpu-box:443", "alice", "cfg-pw-7")], env={}, file_origin=str(cfg), host_origin=f"file {cfg}"
        )
    server_accesses(
        [("https://gpu-box:443", None, None)],
        servers={"https://gpu-box/": {"insecure": True}},
        env={},
        file_origin=str(cfg),
    )  # no secret in it: readable is fine
    cfg.chmod(0o600)
    access, _ = server_accesses([("https://gpu-box:443", None, None)], servers=servers, env={}, file_origin=str(cfg))
    assert access["https://gpu-box:443"].headers == (("Authorization", "Bearer cfg-tok-6"),)
    pw = _private(tmp_path / "gpu.pass", "table-pw-8\n")
    access, _ = server_accesses(
        [("https://gpu-box:443", "alice", None)],
        env={},
        file_origin=str(cfg),
        servers={"https://gpu-box/": {"password_file": str(pw)}},
    )
    assert access["https://gpu-box:443"].password == "table-pw-8"


# --------------------------------------------------------------------------------------------
# JSON


def _strings(obj: Any) -> list[str]:
    if isinstance(obj, str):
        return [obj]
    if isinstance(obj, dict):
        return [s for k, v in obj.items() for s in (*_strings(k), *_strings(v))]
    if isinstance(obj, list):
        return [s for v in obj for s in _strings(v)]
    return []


def assert_no_control(doc: Any) -> None:
    """No string (value or key, at any depth) holds a C0/C1 control, DEL or a format character."""
    bad = [s for s in _strings(doc) if any(unicodedata.category(ch) in ("Cc", "Cf") for ch in s)]
    assert bad == [], bad[:5]


def test_clean_json_replaces_every_control_in_every_string_and_key() -> None:
    hostile = "\x1b[31mred\x07\x9b2J\u202e\n\t\x00"
    doc = {"a": hostile, hostile: [hostile, {"n": 1, "b": True, "z": None, "t": (hostile,)}]}
    cleaned = clean_json(doc)
    assert_no_control(cleaned)
    assert cleaned["a"] == "\ufffd[31mred\ufffd\ufffd2J\ufffd\ufffd\ufffd\ufffd"
    assert cleaned["\ufffd[31mred\ufffd\ufffd2J\ufffd\ufffd\ufffd\ufffd"][1]["n"] == 1
    text = safe_json(doc)
    assert "\\u001b" not in text and "\\u009b" not in text  # jq -r has nothing to turn back into ESC
    assert_no_control(json.loads(text))


def test_only_secret_header_values_are_registered() -> None:
    server_accesses(
        [("https://gpu-box:443", None, None)],
        env={"OLLAMA_API_KEY": "env-key-reg-9"},
        headers=["X-Team: research-team-x", "X-Api-Key: hdr-key-reg-10"],
    )
    assert "env-key-reg-9" in known_secrets() and "hdr-key-reg-10" in known_secrets()
    assert "research-team-x" not in known_secrets()  # a plain header is no secret: model names keep it


@pytest.mark.parametrize("indent", [None, 2])
def test_safe_json_on_the_text_equals_clean_json_per_string(indent: int | None) -> None:
    """safe_json works on the serialized text (one pass); it must give exactly what cleaning each
    string would: escaped backslashes before a letter are text, not controls."""
    strings = [
        "plain",
        "a\\nb",
        "a\\\nb",
        "\\\\\x1b[2J",
        "\\u001b literally",
        "\x7f del",
        "tab\there",
        "\u202eevil",
        "\x9b31m",
        "emoji 🦙 and CJK 模型",
        "surrogate \ud800 lone",
        "https://bob:pw/x@h/m?token=abc&k=1",
        "Authorization: Bearer abcdefghijk",
        '"quoted\\"',
        "\x00",
    ]
    doc = {"list": strings, "nested": {s: {"v": s, "n": 1.5, "t": True, "z": None} for s in strings}}
    assert safe_json(doc, indent=indent) == json.dumps(clean_json(doc), indent=indent, ensure_ascii=False)
    assert_no_control(json.loads(safe_json(doc, indent=indent)))
    assert json.loads(safe_json(doc, indent=indent))["list"][1] == "a\\nb"  # a backslash and an n: kept


def test_a_secret_that_looks_like_json_structure_is_masked_in_strings_only(tmp_path: Path) -> None:
    """A password "2048" (or "true") must not replace numbers and literals of the JSON text."""
    register_secrets(["2048"])
    doc = {"context_length": 2048, "flash": True, "note": "pin 2048 echoed", "2048": [2048, "a2048"]}
    out = json.loads(safe_json(doc))
    assert out == {"context_length": 2048, "flash": True, "note": f"pin {MASK} echoed", MASK: [2048, f"a{MASK}"]}
    from kvtop.sources.recorder import Recorder

    rec = Recorder.create(tmp_path / "r.jsonl", doc)
    rec.close()
    assert json.loads((tmp_path / "r.jsonl").read_text(encoding="utf-8")) == out
