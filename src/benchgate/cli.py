"""The ``benchgate`` command line.

Each subcommand lives in a ``cli_<name>`` module with a ``register(subparsers)``
function: it adds the command's sub-parser(s) and sets ``_run`` (``args ->
exit status``) and ``command_name``. To add a command, write such a module and
list it in ``COMMAND_MODULES``.
"""

from __future__ import annotations

import argparse
import sys

from . import __version__, cli_advise, cli_bench, cli_gate, cli_report, cli_rollout

# In the order ``benchgate --help`` lists their commands.
COMMAND_MODULES = (
    cli_bench,  # bench
    cli_gate,  # judge, record, history
    cli_advise,  # advise
    cli_report,  # report
    cli_rollout,  # rollout
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
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
