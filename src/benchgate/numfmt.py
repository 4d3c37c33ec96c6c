"""How benchgate writes numbers for people: one sign, one placeholder.

Tables and summaries (``benchgate bench``, ``rollout``, ``advise``, the report,
the Ansible summary) write figures with these functions, so that a figure
reads the same everywhere: negative numbers with the ASCII ``-`` that Python
prints (copied into a shell or a spreadsheet, it is still a number), and a
value that is not there as :data:`MISSING`, the same character.
"""

from __future__ import annotations

__all__ = ["MISSING", "number", "pct_change"]

#: What a table shows for a figure that was not measured.
MISSING = "-"


def number(value: float | None, digits: int = 1, suffix: str = "") -> str:
    """``1,234.5``: thousands separated, ``digits`` decimals, then ``suffix``; MISSING for None.

    >>> number(1234.5), number(0.25, 2, "%"), number(-3, 0, " MiB"), number(None)
    ('1,234.5', '0.25%', '-3 MiB', '-')
    """
    return MISSING if value is None else f"{value:,.{digits}f}{suffix}"


def pct_change(value: float | None) -> str:
    """A relative change in percent, always signed: ``+2.5%``, ``-25.0%``; MISSING for None.

    An unbounded change (a ratio against zero) is ``+inf%`` or ``-inf%``.

    >>> pct_change(2.5), pct_change(-25.0), pct_change(None), pct_change(float("-inf"))
    ('+2.5%', '-25.0%', '-', '-inf%')
    """
    return MISSING if value is None else f"{value:+.1f}%"
