"""``benchgate report``: the ledger as one self-contained HTML file, or as Markdown.

Examples::

    benchgate report --db artifacts/ledger.sqlite -o report.html
    benchgate report --db artifacts/ledger.sqlite --format markdown        # to stdout
    benchgate report --db artifacts/ledger.sqlite -o report.html --markdown report.md \\
        --reference-acceptance 79.3,65.1,55.0,45.3,38.6 --reference-label "field report (4xL4)"

Exit status: 0 written, 3 bad input (no ledger, unreadable ledger, bad rates),
1 the HTML needs matplotlib (``pip install 'benchgate[report]'``).
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

EXIT_OK = 0
EXIT_MISSING_LIB = 1
EXIT_BAD_INPUT = 3


def _write(text: str, target: str | None) -> None:
    if target in (None, "-"):
        sys.stdout.write(text)
        return
    path = Path(str(target))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def cmd_report(args: argparse.Namespace) -> int:
    from . import advisor, report

    fmt = args.format
    if fmt is None:
        fmt = "markdown" if str(args.output or "").endswith(".md") else "html"
    reference = None
    try:
        if args.reference_acceptance:
            reference = advisor.parse_rates(args.reference_acceptance)
        if args.no_results:
            dirs: list[str] | None = []
        else:
            dirs = args.results or None
        rep = report.load_report(
            args.db,
            results_dirs=dirs,
            host=args.host,
            since=args.since,
            title=args.title,
            reference_acceptance=reference,
            reference_label=args.reference_label,
        )
    except (FileNotFoundError, ValueError, sqlite3.Error) as exc:
        print(f"benchgate report: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    outputs: list[tuple[str, str | None]] = [(fmt, args.output)]
    if args.markdown:
        outputs.append(("markdown", args.markdown))
    for kind, target in outputs:
        if kind == "html":
            try:
                text = report.render_html(rep)
            except ImportError as exc:
                print(
                    f"benchgate report: the HTML report needs matplotlib ({exc}); "
                    "install benchgate[report], or use --format markdown",
                    file=sys.stderr,
                )
                return EXIT_MISSING_LIB
        else:
            text = report.render_markdown(rep)
        _write(text, target)
        if target not in (None, "-"):
            print(f"{kind} report written to {target}", file=sys.stderr)
    return EXIT_OK


def register(subparsers: Any) -> None:
    """Add ``report`` to a ``add_subparsers()`` object (sets ``_run`` and ``command_name``)."""
    p = subparsers.add_parser(
        "report",
        help="render the ledger as a self-contained HTML report (or Markdown)",
        description=(
            "Render the ledger: per host and release, throughput and latency over time, "
            "speculative decoding on vs off, per-position acceptance, roofline efficiency "
            "and the verdict history. HTML (one file, inline SVG charts, no scripts) or "
            "Markdown (tables) for chat or a pull request. The ledger is opened read-only."
        ),
    )
    p.add_argument("--db", required=True, help="SQLite ledger path")
    p.add_argument(
        "--output", "-o", help="write the report here (default: stdout; a .md name means Markdown)"
    )
    p.add_argument(
        "--format",
        choices=("html", "markdown"),
        help="format of --output (default: html, or markdown for a .md file name)",
    )
    p.add_argument("--markdown", metavar="PATH", help="also write a Markdown report here")
    p.add_argument(
        "--results",
        action="append",
        metavar="DIR",
        help="folder searched for the runs' result JSON files, matched by sha256 "
        "(repeatable; default: the ledger's folder)",
    )
    p.add_argument("--no-results", action="store_true", help="read the ledger only")
    p.add_argument("--host", help="only this host")
    p.add_argument("--since", help="only runs and verdicts since this ISO-8601 UTC time")
    p.add_argument("--title", default="benchgate report")
    p.add_argument(
        "--reference-acceptance",
        metavar="RATES",
        help="a per-position acceptance curve to draw beside the measured ones, "
        "percent or fractions, e.g. 79.3,65.1,55.0,45.3,38.6 (the field report's)",
    )
    p.add_argument("--reference-label", default="reference", help="name of that curve")
    p.set_defaults(_run=cmd_report, command_name="report")


def main(argv: Sequence[str] | None = None) -> int:
    """Stand-alone entry (``python -m benchgate.cli_report``)."""
    parser = argparse.ArgumentParser(prog="benchgate")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args._run(args))


if __name__ == "__main__":
    sys.exit(main())
