"""The ``benchgate`` command line.

Each subcommand lives in a ``cli_<name>`` module with a ``register(subparsers)``
function: it adds the command's sub-parser(s) and sets ``_run`` (``args ->
exit status``) and ``command_name``. To add a command, write such a module and
list it in ``COMMAND_MODULES``.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from . import __version__, cli_advise, cli_bench, cli_gate, cli_report, cli_rollout

# In the order ``benchgate --help`` lists their commands.
COMMAND_MODULES = (
    cli_bench,  # bench
    cli_gate,  # judge, record, history
    cli_advise,  # advise
    cli_report,  # report
    cli_rollout,  # rollout
)


HIDDEN = "<hidden>"
# What a usage error may show of the command line: an option's name (--limit,
# -e), never a value, nor a word that only looks like a short cluster (-eKEY=V).
_LONG_NAME = re.compile(r"--[A-Za-z0-9][A-Za-z0-9_-]*")
_SHORT_NAME = re.compile(r"-[A-Za-z]")


def shown_word(word: str) -> str:
    """A command-line word as a usage error may show it: ``--name`` and ``-x``
    as they are, ``--name=<hidden>``, ``-x<hidden>``, any other word ``<hidden>``."""
    if _LONG_NAME.fullmatch(word) or _SHORT_NAME.fullmatch(word):
        return word
    name, sep, _ = word.partition("=")
    if sep and _LONG_NAME.fullmatch(name):
        return f"{name}={HIDDEN}"
    if _SHORT_NAME.fullmatch(word[:2]):
        return word[:2] + HIDDEN
    return HIDDEN


def redact_usage_error(message: str, argv: Sequence[str]) -> str:
    """``message`` (argparse's) without a value from ``argv``.

    argparse quotes the values it could not use (``invalid int value: 'x'``,
    ``invalid choice: 'x'``, a type's message) and writes a mistyped
    ``--opt=value`` whole (``ambiguous option: --ext=...``): every such value
    is replaced, the longest first.
    """
    for word in sorted(set(argv), key=len, reverse=True):
        shown = shown_word(word)
        if shown == word:
            continue
        if shown != HIDDEN:  # --opt=value and -xvalue appear unquoted
            pattern = rf"(?<!\S){re.escape(word)}(?!\S)"
            message = re.sub(pattern, shown.replace("\\", "\\\\"), message)
        message = message.replace(repr(word), HIDDEN).replace(f'"{word}"', HIDDEN)
        value = word.partition("=")[2] if shown.endswith(f"={HIDDEN}") else word[2:]
        if shown != HIDDEN and value:
            message = message.replace(repr(value), HIDDEN)
    return message


class ArgumentParser(argparse.ArgumentParser):
    """argparse whose usage errors (exit status 2) never echo a value given on the
    command line: a secret given with ``-e`` beside a mistyped option stays out of
    the terminal, the journal and CI logs. Its sub-parsers are of this class too."""

    _argv: Sequence[str] = ()

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: Any = None
    ) -> tuple[argparse.Namespace, list[str]]:
        self._argv = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, namespace)

    def parse_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: Any = None
    ) -> argparse.Namespace:
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            self.error("unrecognized arguments: " + " ".join(shown_word(w) for w in extras))
        return parsed

    def error(self, message: str) -> NoReturn:
        super().error(redact_usage_error(message, self._argv))


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="benchgate", description="Pinned vLLM upgrades, re-benchmarked and gated."
    )
    parser.add_argument("--version", action="version", version=f"benchgate {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for module in COMMAND_MODULES:
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args._run(args))


if __name__ == "__main__":
    sys.exit(main())
