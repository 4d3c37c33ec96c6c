"""How benchgate writes numbers for people: one sign, one placeholder.

Tables and summaries (``benchgate bench``, ``rollout``, ``advise``, the report,
the Ansible summary) write figures with these functions, so that a figure
reads the same everywhere: negative numbers with the ASCII ``-`` that Python
prints (copied into a shell or a spreadsheet, it is still a number), and a
value that is not there as :data:`MISSING`, the same character. A change
that has a better and a worse direction (the gate's and the A/B's estimates)
is written in those words, with its interval (:func:`change_interval`), so that
the sign never has to be read against the metric's direction.
"""

from __future__ import annotations

import math

__all__ = ["MISSING", "change_interval", "change_words", "figure", "number", "pct_change"]

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


def figure(value: float | None) -> str:
    """A measured value with the digits it deserves: ``412.3``, ``42.06``, ``0.5123``.

    One decimal from 100 up (thousands separated), two from 1, else four
    significant digits; MISSING for None.

    >>> figure(1234.56), figure(42.061), figure(-0.51234), figure(None)
    ('1,234.6', '42.06', '-0.5123', '-')
    """
    if value is None:
        return MISSING
    size = abs(value)
    if size >= 100:
        return f"{value:,.1f}"
    if size >= 1:
        return f"{value:.2f}"
    return f"{value:.4g}"


def change_words(value: float | None, higher_is_better: bool = True) -> str:
    """A relative change in % in words, oriented for the metric: ``4.1% worse``, ``2.0% better``.

    Below 0.05% it is ``no change``; an unbounded change (a ratio against
    zero) is ``unbounded``; MISSING for None.

    >>> change_words(-4.14), change_words(-4.14, higher_is_better=False), change_words(0.01)
    ('4.1% worse', '4.1% better', 'no change')
    """
    if value is None:
        return MISSING
    if math.isinf(value) or math.isnan(value):
        return "unbounded"
    size = abs(value)
    if size < 0.05:
        return "no change"
    worse = value < 0 if higher_is_better else value > 0
    return f"{size:.1f}% {'worse' if worse else 'better'}"


def change_interval(
    value: float | None,
    lo: float | None,
    hi: float | None,
    higher_is_better: bool = True,
    level: float | None = None,
) -> str:
    """One estimate of a change with its interval, in words: worst end first.

    ``lo`` and ``hi`` are the interval's ends as signed changes in %; ``level``
    the interval's confidence in %, named when given. Without an interval, only
    the estimate; MISSING without an estimate.

    >>> change_interval(2.5, -1.0, 6.0)
    '2.5% better (1.0% worse to 6.0% better)'
    >>> change_interval(2.5, -1.0, 6.0, level=95)
    '2.5% better (95% interval 1.0% worse to 6.0% better)'
    >>> change_interval(12.0, 5.0, 19.0, higher_is_better=False)
    '12.0% worse (19.0% worse to 5.0% worse)'
    >>> change_interval(-3.0, None, None), change_interval(None, 1.0, 2.0)
    ('3.0% worse', '-')
    """
    if value is None:
        return MISSING
    head = change_words(value, higher_is_better)
    if lo is None or hi is None:
        return head
    worst, best = (lo, hi) if higher_is_better else (hi, lo)
    ends = [change_words(end, higher_is_better) for end in (worst, best)]
    named = f"{level:g}% interval " if level is not None else ""
    return f"{head} ({named}{ends[0]} to {ends[1]})"
