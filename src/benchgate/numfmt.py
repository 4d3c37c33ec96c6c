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

__all__ = [
    "MISSING",
    "change_interval",
    "change_words",
    "factor_words",
    "figure",
    "medians_note",
    "number",
    "pct_change",
    "rise_words",
]

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


#: From this factor on (either way) a change is written as a factor, ``42× slower``:
#: "4157.8% worse" is hard to read, and a halving is as far as a doubling.
FACTOR_FROM = 2.0


def factor_words(ratio: float, worse: bool) -> str:
    """A ratio of 2 or more (or 1/2 or less) as a factor: ``2.5× slower``, ``42× faster``.

    Slower is the worse way, whatever the metric's direction; one decimal
    below 10.

    >>> factor_words(42.578, worse=True), factor_words(0.4, worse=False)
    ('43× slower', '2.5× faster')
    """
    size = ratio if ratio >= 1 else 1.0 / ratio
    digits = 0 if size >= 10 else 1
    return f"{size:.{digits}f}× {'slower' if worse else 'faster'}"


def change_words(value: float | None, higher_is_better: bool = True) -> str:
    """A relative change in % in words, oriented for the metric: ``4.1% worse``, ``2.0% better``.

    Below 0.05% it is ``no change``; from a factor of :data:`FACTOR_FROM` on,
    either way (+100% or -50%), a factor (:func:`factor_words`): ``42× slower``;
    an unbounded change (a ratio against zero) is ``unbounded``; MISSING for None.

    >>> change_words(-4.14), change_words(-4.14, higher_is_better=False), change_words(0.01)
    ('4.1% worse', '4.1% better', 'no change')
    >>> change_words(4157.8, higher_is_better=False), change_words(-60.0), change_words(99.9)
    ('43× slower', '2.5× slower', '99.9% better')
    """
    if value is None:
        return MISSING
    if math.isinf(value) or math.isnan(value) or value <= -100.0:
        return "unbounded"
    size = abs(value)
    if size < 0.05:
        return "no change"
    worse = value < 0 if higher_is_better else value > 0
    ratio = 1.0 + value / 100.0
    if ratio >= FACTOR_FROM or ratio <= 1.0 / FACTOR_FROM:
        return factor_words(ratio, worse)
    return f"{size:.1f}% {'worse' if worse else 'better'}"


def rise_words(value: float | None) -> str:
    """A relative change in % of a figure that is neither better nor worse by itself
    (time per step, tokens accepted per step): ``12.2% higher``, ``0.4% lower``.

    Below 0.05% it is ``no change``; from a factor of :data:`FACTOR_FROM` on,
    either way, a factor: ``2.5× higher``, ``2.5× lower``; MISSING for None.

    >>> rise_words(12.23), rise_words(-0.41), rise_words(0.01), rise_words(-60.0)
    ('12.2% higher', '0.4% lower', 'no change', '2.5× lower')
    """
    if value is None:
        return MISSING
    if math.isinf(value) or math.isnan(value) or value <= -100.0:
        return "unbounded"
    if abs(value) < 0.05:
        return "no change"
    way = "higher" if value > 0 else "lower"
    ratio = 1.0 + value / 100.0
    if ratio >= FACTOR_FROM or ratio <= 1.0 / FACTOR_FROM:
        size = ratio if ratio >= 1 else 1.0 / ratio
        return f"{size:.{0 if size >= 10 else 1}f}× {way}"
    return f"{abs(value):.1f}% {way}"


def medians_note(
    baseline: float | None,
    candidate: float | None,
    change: float | None,
    higher_is_better: bool = True,
    pairs_change: float | None = None,
    paired: bool | None = None,
) -> str:
    """What the estimate ``change`` (in %) is computed from, in words, and why each
    side's median can point the other way; "" when there is nothing to add.

    ``pairs_change`` is the median of the pairs' ratios, in %, of a side-by-side
    comparison (None: two samples, or a verdict recorded before it was kept:
    ``paired`` then says which). Every place that shows a verdict writes
    these words beside the estimate: the reasons, the gate's table, the
    summary, the report and the history.

    >>> print(medians_note(559.5, 545.9, 6.2, pairs_change=5.9))  # doctest: +NORMALIZE_WHITESPACE
    the pairs' median ratio: 5.9% better; each side's median: 2.4% worse, but the pairs compare
    trials that ran together
    >>> print(medians_note(100.0, 98.0, 3.0))  # doctest: +NORMALIZE_WHITESPACE
    each side's median: 2.0% worse, but the estimate weighs every candidate trial against every
    baseline trial
    >>> medians_note(100.0, 103.0, 3.0), medians_note(None, 1.0, 2.0)
    ('', '')
    """
    words = []
    if pairs_change is not None:
        words.append(f"the pairs' median ratio: {change_words(pairs_change, higher_is_better)}")
    if change is not None and baseline and candidate is not None:
        medians = (candidate / baseline - 1.0) * 100.0

        def way(value: float) -> int:
            if abs(value) < 0.05:
                return 0
            return 1 if (value > 0) == higher_is_better else -1

        if way(medians) * way(change) < 0:
            why = (
                "the pairs compare trials that ran together"
                if (pairs_change is not None if paired is None else paired)
                else "the estimate weighs every candidate trial against every baseline trial"
            )
            medians_words = change_words(medians, higher_is_better)
            words.append(f"each side's median: {medians_words}, but {why}")
    return "; ".join(words)


def change_interval(
    value: float | None,
    lo: float | None,
    hi: float | None,
    higher_is_better: bool = True,
    level: float | None = None,
    note: str = "",
) -> str:
    """One estimate of a change with its interval, in words: worst end first.

    ``lo`` and ``hi`` are the interval's ends as signed changes in %; ``level``
    the interval's confidence in %, named when given; ``note`` (:func:`medians_note`)
    follows the interval. Without an interval, only the estimate; MISSING
    without an estimate.

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
        return f"{head} ({note})" if note else head
    worst, best = (lo, hi) if higher_is_better else (hi, lo)
    ends = [change_words(end, higher_is_better) for end in (worst, best)]
    named = f"{level:g}% interval " if level is not None else ""
    tail = f"; {note}" if note else ""
    return f"{head} ({named}{ends[0]} to {ends[1]}{tail})"
