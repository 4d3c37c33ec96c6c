"""What each setting written into a systemd unit may hold: one allow-list per kind.

A value that lands on a unit line as it is (``User=``, ``WorkingDirectory=``,
``SystemCallFilter=``, ``Environment=HOME=...``) can change the unit: a
newline starts a new line (a new section, or an ``ExecStartPre=+...`` that
runs as root), a space adds another path or system call, ``%`` is a
specifier. Rather than refusing the characters known to be dangerous, every
setting has a *kind*, and a kind lists the characters (or the values) it may
hold; everything else is refused.

The roles name the kind of each setting their units read
(``_vllm_service_setting_kinds``, ``_rollout_scheduler_setting_kinds``), and
their preflight calls :func:`setting_errors` through the ``setting_errors``
filter; a test fails when a unit template reads a setting without a kind.
The messages name the setting and what is wrong, never its value: some
settings are secrets.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Callable

__all__ = ["KINDS", "Kind", "setting_errors"]

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_CONTROL_WORDS = "a control character (a newline, tab, ...)"


@dataclass(frozen=True)
class Kind:
    """One kind of setting: what it may hold (for the messages; "" when the check's
    own messages say it) and its check.

    ``check(name, value)`` returns one message per problem, each starting with
    the setting's name (``name``, ``name[2]`` or ``name.KEY``).
    """

    may_hold: str
    check: Callable[[str, Any], list[str]]


def _what_else(text: str, allowed: str) -> str:
    """The characters of text outside ``allowed`` (a regex character class), described."""
    others = sorted({ch for ch in text if not re.fullmatch(allowed, ch)})
    parts = [_CONTROL_WORDS] if any(_CONTROL.fullmatch(ch) for ch in others) else []
    shown = [repr(ch) for ch in others if not _CONTROL.fullmatch(ch)]
    if shown:
        parts.append(("the characters " if len(shown) > 1 else "the character ") + ", ".join(shown))
    return " and ".join(parts)


def _text(
    allowed: str,
    *,
    empty: bool = False,
    first: str = "",
    longest: int = 4096,
    full: str = "",
) -> Callable[[str, Any], list[str]]:
    """A check for one string of the characters in ``allowed`` (numbers are read as text).

    ``first``: a class the first character must be in; ``full``: a regex the
    whole value must match besides.
    """

    def check(name: str, value: Any) -> list[str]:
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            return [f"{name} must be a string, got {type(value).__name__}"]
        text = str(value)
        if not text:
            return [] if empty else [f"{name} is empty"]
        bad = _what_else(text, allowed)
        if bad:
            return [f"{name} holds {bad}"]
        if len(text) > longest:
            return [f"{name} is longer than {longest} characters"]
        if first and not re.fullmatch(first, text[0]):
            return [f"{name} starts with {text[0]!r}"]
        if full and not re.fullmatch(full, text):
            return [f"{name} is not in that form"]
        return []

    return check


def _each(item: Callable[[str, Any], list[str]]) -> Callable[[str, Any], list[str]]:
    """A check for a list whose every item passes ``item``."""

    def check(name: str, value: Any) -> list[str]:
        if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
            return [f"{name} must be a list, got {type(value).__name__}"]
        return [error for index, one in enumerate(value) for error in item(f"{name}[{index}]", one)]

    return check


def _integer(name: str, value: Any) -> list[str]:
    if isinstance(value, bool):
        return [f"{name} must be a whole number, got a boolean"]
    if isinstance(value, int) and value >= 0:
        return []
    if isinstance(value, str) and re.fullmatch(r"[0-9]+", value):
        return []
    return [f"{name} must be a whole number of 0 or more, got {type(value).__name__} {value!r}"]


# What Ansible's `bool` filter reads as true or false.
_BOOLEANS = {"true", "false", "yes", "no", "on", "off", "y", "n", "t", "f", "1", "0"}


def _boolean(name: str, value: Any) -> list[str]:
    if isinstance(value, bool) or (isinstance(value, int) and value in (0, 1)):
        return []
    if isinstance(value, str) and value.strip().lower() in _BOOLEANS:
        return []
    return [f"{name} must be true or false, got {type(value).__name__}"]


_ENV_NAME = r"[A-Za-z_][A-Za-z0-9_]*"


def _environment(name: str, value: Any) -> list[str]:
    """Names of letters, digits and _; values anything printable (they are quoted)."""
    if not isinstance(value, Mapping):
        return [f"{name} must be a mapping of NAME: value, got {type(value).__name__}"]
    errors = []
    for key, item in value.items():
        if not isinstance(key, str) or not re.fullmatch(_ENV_NAME, key):
            errors.append(
                f"{name} has the variable name {str(key)!r}, which is not letters, digits "
                f"and _ (not starting with a digit)"
            )
            continue
        if item is None or isinstance(item, (Mapping, list, tuple)):
            errors.append(f"{name}.{key} must be a string or a number")
        elif _CONTROL.search(str(item)):
            errors.append(f"{name}.{key} holds {_CONTROL_WORDS}")
    return errors


def _argv_words(name: str, value: Any) -> list[str]:
    """ExecStart= words: C-quoted by systemd_exec_quote, so anything but NUL."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        return [f"{name} must be a list of words, got {type(value).__name__}"]
    errors = []
    for index, word in enumerate(value):
        if isinstance(word, bool) or not isinstance(word, (str, int, float)):
            errors.append(f"{name}[{index}] must be a string, got {type(word).__name__}")
        elif "\x00" in str(word):
            errors.append(f"{name}[{index}] holds a NUL character")
    return errors


def _argv_data(name: str, value: Any) -> list[str]:
    """Speculative settings: written as JSON or flags, C-quoted; no control characters."""
    if value is None:
        return []
    if isinstance(value, str):
        return [f"{name} holds {_CONTROL_WORDS}"] if _CONTROL.search(value) else []
    if isinstance(value, Mapping):
        return [error for key, item in value.items() for error in _argv_data(f"{name}.{key}", item)]
    if isinstance(value, (list, tuple)):
        return [
            error
            for index, item in enumerate(value)
            for error in _argv_data(f"{name}[{index}]", item)
        ]
    if isinstance(value, (bool, int, float)):
        return []
    return [f"{name} holds a {type(value).__name__}, not a string, number or mapping"]


def _token(name: str, value: Any) -> list[str]:
    from benchgate import serve

    return list(serve.token_errors(name, value))


_PATH = r"[A-Za-z0-9_.,:=@+~/-]"
_SYSCALL = r"@?[a-z0-9_-]+(:[A-Za-z0-9_]+)?"
_CPU_LIST = r"[0-9]+(-[0-9]+)?([, ][0-9]+(-[0-9]+)?)*"
_LIMIT = r"([0-9]+|infinity)(:([0-9]+|infinity))?"
_path = _text(_PATH, first="/")

KINDS: dict[str, Kind] = {
    "unit_name": Kind(
        "a systemd unit name: letters, digits and _ . : - (no @ or /), not starting with . or -",
        _text(r"[A-Za-z0-9_.:-]", first=r"[A-Za-z0-9_]", longest=200),
    ),
    "account": Kind(
        "a user or group name: letters, digits and _ . -, starting with a letter or _, "
        "at most 32 characters",
        _text(r"[A-Za-z0-9_.-]", first=r"[A-Za-z_]", longest=32),
    ),
    "path": Kind(
        "an absolute path of letters, digits and _ . , : = @ + ~ / - (no spaces, quotes, "
        "backslashes, $ or %)",
        _path,
    ),
    "paths": Kind(
        "a list of absolute paths (letters, digits and _ . , : = @ + ~ / -)", _each(_path)
    ),
    "model": Kind(
        "a model folder or hub id: letters, digits and _ . , : = @ + ~ / -",
        _text(_PATH),
    ),
    "model_name": Kind(
        "a model name, or empty: letters, digits and _ . , : = @ + ~ / -",
        _text(_PATH, empty=True),
    ),
    "host": Kind(
        "an IP address or host name, or empty: letters, digits and . : - _ [ ] %",
        _text(r"[A-Za-z0-9.:_%\[\]-]", empty=True, longest=255),
    ),
    "interface": Kind(
        "a network interface name, or empty: letters, digits and _ . @ -, at most 15 characters",
        _text(r"[A-Za-z0-9_.@-]", empty=True, longest=15),
    ),
    "word": Kind("one lowercase word: letters, digits and _", _text(r"[a-z0-9_]", longest=64)),
    "cpu_list": Kind(
        'a cpulist ("1", "2-15", "0,4-7"), or empty',
        _text(r"[0-9, -]", empty=True, full=_CPU_LIST),
    ),
    "cpu_quota": Kind(
        'a percentage ("85%"), or empty', _text(r"[0-9%]", empty=True, full=r"[1-9][0-9]*%")
    ),
    "system_calls": Kind(
        "a list of system call names and @groups (lowercase letters, digits, _ and -), "
        "each optionally with :ERRNO",
        _each(_text(r"[A-Za-z0-9_@:-]", full=_SYSCALL, longest=64)),
    ),
    "limit": Kind(
        'a number, "infinity", or soft:hard of those', _text(r"[0-9a-z:]", full=_LIMIT, longest=64)
    ),
    "calendar": Kind(
        "a list of OnCalendar= expressions: letters, digits, spaces and * : / . , ~ + _ -",
        _each(_text(r"[A-Za-z0-9 *:/.,~+_-]", longest=200)),
    ),
    "timespan": Kind(
        'a systemd time span ("15min", "1h 30min", 0): digits, lowercase letters and spaces',
        _text(r"[0-9a-z ]", longest=64),
    ),
    "integer": Kind("a whole number of 0 or more", _integer),
    "boolean": Kind("true or false", _boolean),
    "environment": Kind(
        "a mapping of NAME: value with names of letters, digits and _, values without "
        "control characters (they are quoted)",
        _environment,
    ),
    # token_errors says itself what a token may hold.
    "token": Kind("", _token),
    "argv_words": Kind("a list of words, any characters but NUL (they are quoted)", _argv_words),
    "argv_data": Kind("a mapping (or null) whose strings hold no control characters", _argv_data),
}


def setting_errors(settings: Mapping[str, Any], kinds: Mapping[str, str]) -> list[str]:
    """One message per problem of ``settings`` (name -> value), each checked by its kind.

    ``kinds`` maps each setting's name to a key of :data:`KINDS`. A setting
    without a kind, or with an unknown one, is a problem too: the caller meant
    to check it. The messages name the setting and say what it may hold,
    never its value.

    >>> setting_errors({"user": "vllm"}, {"user": "account"})
    []
    >>> setting_errors({"deny": ["@privileged", "@debug x"]}, {"deny": "system_calls"})[0][:43]
    "deny[1] holds the character ' '; deny may h"
    """
    errors: list[str] = []
    for name, value in settings.items():
        kind = KINDS.get(str(kinds.get(name, "")))
        if kind is None:
            errors.append(
                f"{name} has no known kind ({kinds.get(name)!r}); known: {', '.join(sorted(KINDS))}"
            )
            continue
        problems = kind.check(str(name), value)
        errors += [
            f"{p}; {name} may hold {kind.may_hold}" if kind.may_hold else p for p in problems
        ]
    return errors
