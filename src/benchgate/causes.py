"""Why a speculative arm got faster or slower: acceptance against step cost.

Between two releases (or two runs) of one speculative arm at one load, its
output tokens/s can change because more or fewer tokens come out of every
step (the drafter's tokens are accepted more or less often), or because every
step takes more or less time (the engine). The server's spec-decode counters
(``trials[].server.spec_decode``: ``drafts``, the draft/verify steps counted
per request, and ``accepted_tokens``) tell the two apart. For one trial of
``T`` seconds in which the server generated ``O`` tokens, ``A`` of them
accepted draft tokens, in ``D`` drafts:

* steps ``P = O - A``: every step a request takes emits one token (the
  verified bonus token, or the plain one of a step without a draft) plus the
  draft tokens accepted in it. Counted per request: with 16 requests in
  flight, one engine step is 16 of them;
* tokens per step ``O / P`` and time per step ``T / P``, so that the
  server's tokens/s ``O / T = (O / P) / (T / P)`` exactly;
* the acceptance length ``L = 1 + A / D`` (tokens per verify step, the bonus
  token included: ``benchgate.ab.acceptance_of``'s figure) and the share of
  steps that drafted ``D / P``; tokens per step ``= 1 + (L - 1) * D / P``.
  A draft model drafts in nearly every step (all but each request's first),
  so tokens per step is about ``L`` and a step about a verify step; an
  n-gram drafter drafts only where the text repeats itself (a fifth of the
  steps in the demo), so ``T / D`` would mostly time steps without a draft.

A side's figures are pooled over its valid trials that drafted (ratios of
sums, not medians of the trials' ratios): tokens/s ``ΣC / ΣT`` with ``C`` the
client's count of output tokens, tokens per step ``ΣO / ΣP``, time per step
``ΣT / ΣP``, acceptance length ``1 + ΣA / ΣD``, drafted ``ΣD / ΣP``. The
identity then holds for the pooled figures as it does for one trial::

    ΣO / ΣT = (ΣO / ΣP) / (ΣT / ΣP)

(the medians of the three would not: the median of a ratio is not the ratio
of the medians). Between two sides A and B::

    ln(tok_B / tok_A) = ln(per_step_B / per_step_A) - ln(step_B / step_A) + rest

The first term is the acceptance's share of the change (the drafter: how many
tokens it gets accepted, and how often it proposes), the second the step
cost's (the engine), and ``rest = ln((ΣC_B / ΣO_B) / (ΣC_A / ΣO_A))`` only
the disagreement of the client's count of output tokens (tokens/s) with the
server's (the steps), where it differs between the sides: zero where the
counts agree (as where the server's count is missing and the client's is
taken). The pooled
tokens/s is the trials' tokens/s weighted by their durations, so it can differ
from the median tokens/s the report shows elsewhere where the trials vary; the
line says "over all trials".

A part *dominates* when it carries more than two thirds of the log change
(:data:`DOMINANT_SHARE`) while the other moved by at most a third; a change
of tokens/s under :data:`SAME_PCT` percent is "about the same"; when the rest
is more than a third of the change the split says it is not clear (the two
counts of tokens disagree). Otherwise both parts are named.

This is a description, not a test: the gate and the A/B judge whether a
change is real; the split says what it is made of.

Pure functions, no I/O: the report (:mod:`benchgate.report`) and the tests
call them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from . import stages
from .numfmt import figure, number, rise_words

#: A part dominates when its share of the log change is above this.
DOMINANT_SHARE = 2.0 / 3.0
#: ... and the other part's share is at most this (either way).
MINOR_SHARE = 1.0 / 3.0
#: Above this share of the log change, the rest (the client's and the server's counts of
#: output tokens disagree) makes the split unclear.
REST_SHARE = 1.0 / 3.0
#: A change of tokens/s below this many percent (either way) is "about the same".
SAME_PCT = 1.0

# Split statuses.
SPLIT = "split"
PLAIN = "plain"
NO_COUNTERS = "no counters"
NO_DRAFTS = "no drafts"
NO_TRIALS = "no trials"
NO_RESULT = "no result"
NOT_MEASURED = "not measured"

# Causes of a split change.
ENGINE = "engine"
DRAFTER = "drafter"
BOTH = "both"
UNCLEAR = "unclear"
SAME = "same"

__all__ = [
    "BOTH",
    "DOMINANT_SHARE",
    "DRAFTER",
    "ENGINE",
    "SAME",
    "SAME_PCT",
    "UNCLEAR",
    "Side",
    "Split",
    "StepTrial",
    "Steps",
    "pool",
    "side_of",
    "split_results",
    "split_steps",
    "steps_by_stage",
    "steps_of",
]


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    v = float(value)
    return v if math.isfinite(v) else None


@dataclass(frozen=True)
class StepTrial:
    """One valid trial's counts for the split (a side sums them: :func:`side_of`)."""

    duration_s: float  # T, the trial's wall-clock duration
    tokens: float  # C, the client's count of output tokens
    generated: float  # O, the server's count of generated tokens (else the client's)
    accepted: float  # A, accepted draft tokens
    drafts: float  # D, drafts (draft/verify steps, per request)

    @property
    def steps(self) -> float:
        """P = O - A: the steps, counted per request."""
        return self.generated - self.accepted

    @property
    def tokens_per_s(self) -> float:
        """The client's output tokens per second, C / T."""
        return self.tokens / self.duration_s

    @property
    def tokens_per_step(self) -> float:
        """O / P."""
        return self.generated / self.steps

    @property
    def step_ms(self) -> float:
        """T / P, in ms."""
        return 1000.0 * self.duration_s / self.steps

    @property
    def acceptance_length(self) -> float:
        """Tokens per verify step, 1 + A / D."""
        return 1.0 + self.accepted / self.drafts

    @property
    def drafted(self) -> float:
        """The share of the steps that drafted, D / P."""
        return self.drafts / self.steps


@dataclass(frozen=True)
class Steps:
    """One side's trials as the split reads them (one stage, or a whole unstaged result)."""

    trials: tuple[StepTrial, ...] = ()
    valid: int = 0  # valid trials
    counted: int = 0  # valid trials whose server's spec-decode counters were read


def _valid(trial: Mapping[str, Any]) -> bool:
    valid = trial.get("valid")
    if valid is None:
        return not trial.get("error") and not trial.get("errors")
    return valid is True


def _trial_step(trial: Mapping[str, Any]) -> tuple[bool, StepTrial | None]:
    """(were the spec-decode counters read, the trial's figures when it drafted)."""
    server = trial.get("server")
    server = server if isinstance(server, Mapping) else {}
    spec = server.get("spec_decode") if server.get("ok") else None
    if not isinstance(spec, Mapping):
        return False, None
    drafts = _num(spec.get("drafts"))
    accepted = _num(spec.get("accepted_tokens"))
    if drafts is None or accepted is None:
        return False, None
    if drafts <= 0:
        return True, None
    metrics = trial.get("metrics")
    metrics = metrics if isinstance(metrics, Mapping) else {}
    tok = _num(metrics.get("output_tokens_per_s"))
    duration = _num(trial.get("duration_s"))
    client_out = _num(trial.get("output_tokens"))
    if duration is None and tok and client_out is not None:
        duration = client_out / tok
    if client_out is None and tok is not None and duration:
        client_out = tok * duration
    # The steps from the server's own count of generated tokens (the same scrapes as
    # the accepted tokens), else the client's.
    generated = _num(server.get("generation_tokens"))
    if generated is None:
        generated = client_out
    if client_out is None or not duration or duration <= 0 or generated is None:
        return True, None
    if generated - accepted <= 0:
        return True, None
    return True, StepTrial(duration, client_out, generated, accepted, drafts)


def steps_of(trials_or_result: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> Steps:
    """The split's figures of a result's (or a list of) trials, valid ones only."""
    trials: Any = trials_or_result
    if isinstance(trials_or_result, Mapping):
        trials = trials_or_result.get("trials")
    if not isinstance(trials, (list, tuple)):
        return Steps()
    valid = counted = 0
    out: list[StepTrial] = []
    for t in trials:
        if not isinstance(t, Mapping) or not _valid(t):
            continue
        valid += 1
        read, step = _trial_step(t)
        counted += read
        if step is not None:
            out.append(step)
    return Steps(tuple(out), valid, counted)


def steps_by_stage(result: Mapping[str, Any]) -> dict[str | None, Steps]:
    """:func:`steps_of` per stage (:func:`benchgate.stages.split_result`), in the order
    they ran; an unstaged result is one stage, ``None``."""
    return {name: steps_of(part) for name, part in stages.split_result(result).items()}


def pool(parts: Iterable[Steps | None]) -> Steps | None:
    """Several runs' trials as one side; None when none of them was read."""
    known = [p for p in parts if p is not None]
    if not known:
        return None
    return Steps(
        tuple(t for p in known for t in p.trials),
        sum(p.valid for p in known),
        sum(p.counted for p in known),
    )


@dataclass(frozen=True)
class Side:
    """One side's figures pooled over its trials that drafted (ratios of sums)."""

    trials: int
    tokens_per_s: float  # ΣC / ΣT, the client's tokens
    tokens_per_step: float  # ΣO / ΣP
    step_ms: float  # ΣT / ΣP, in ms
    acceptance_length: float  # 1 + ΣA / ΣD
    drafted: float  # ΣD / ΣP
    # ΣC / ΣO: the client's count of output tokens over the server's (1 where they agree).
    client_over_server: float = 1.0


def side_of(steps: Steps) -> Side | None:
    """The figures of ``steps`` pooled over its trials; None when no trial drafted.

    ``1000 * tokens_per_step / step_ms`` is the server's tokens/s ``ΣO / ΣT``, and
    ``tokens_per_s`` that over ``client_over_server`` (up to rounding).
    """
    if not steps.trials:
        return None
    trials = steps.trials
    duration = math.fsum(t.duration_s for t in trials)
    tokens = math.fsum(t.tokens for t in trials)
    generated = math.fsum(t.generated for t in trials)
    accepted = math.fsum(t.accepted for t in trials)
    drafts = math.fsum(t.drafts for t in trials)
    taken = generated - accepted  # ΣP
    return Side(
        trials=len(trials),
        tokens_per_s=tokens / duration,
        tokens_per_step=generated / taken,
        step_ms=1000.0 * duration / taken,
        acceptance_length=1.0 + accepted / drafts,
        drafted=drafts / taken,
        client_over_server=tokens / generated,
    )


@dataclass(frozen=True)
class Split:
    """The change of one arm's tokens/s from side A to side B, split into its causes."""

    stage: str | None
    status: str  # SPLIT, or why not (PLAIN, NO_COUNTERS, NO_DRAFTS, NO_TRIALS, ...)
    sentence: str
    a: Side | None = None
    b: Side | None = None
    tokens_change_pct: float | None = None
    per_step_change_pct: float | None = None
    step_change_pct: float | None = None
    length_change_pct: float | None = None
    # Shares of ln(tok_B / tok_A): acceptance + step cost + rest = 1; the rest is the
    # client's and the server's counts of tokens disagreeing (0 where they agree).
    share_acceptance: float | None = None
    share_step: float | None = None
    share_rest: float | None = None
    cause: str = ""  # ENGINE, DRAFTER, BOTH, UNCLEAR, SAME; "" when not split

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _pct(a: float, b: float) -> float:
    return 100.0 * (b / a - 1.0)


_WHY_NOT = (
    (NO_TRIALS, "no valid trials"),
    (NO_COUNTERS, "the server's spec-decode counters were not read"),
    (NO_DRAFTS, "the server counted no drafts"),
)


def _why_not(a: Steps | None, b: Steps | None, names: tuple[str, str]) -> Split | None:
    """The split that says why the two sides cannot be split; None when they can."""
    missing = [name for name, s in zip(names, (a, b)) if s is None]
    if missing:
        where = "" if len(missing) == 2 else f" ({missing[0]})"
        words = "the result file was not found (the ledger keeps no server counters)"
        return Split(None, NO_RESULT, f"not split: {words}{where}")
    assert a is not None and b is not None
    for status, words in _WHY_NOT:
        hit = [
            name
            for name, s in zip(names, (a, b))
            if (status == NO_TRIALS and s.valid == 0)
            or (status == NO_COUNTERS and s.counted == 0)
            or (status == NO_DRAFTS and not s.trials)
        ]
        if hit:
            where = "" if len(hit) == 2 else f" ({hit[0]})"
            return Split(None, status, f"not split: {words}{where}")
    return None


#: How the line names the pooled tokens/s (the report's median tokens/s can differ a little).
TOKENS_WORDS = "tokens/s over all trials"

#: Below this share of steps drafted (either side), the split names it.
_MOSTLY_DRAFTED = 0.95


def _figures_words(a: Side, b: Side, per_step_pct: float, step_pct: float) -> str:
    drafted = ""
    if min(a.drafted, b.drafted) < _MOSTLY_DRAFTED:
        drafted = f", drafts in {min(a.drafted, 1.0):.0%} → {min(b.drafted, 1.0):.0%} of the steps"
    return (
        f"tokens per step {figure(a.tokens_per_step)} → {figure(b.tokens_per_step)} "
        f"({rise_words(per_step_pct)}; acceptance length {figure(a.acceptance_length)} → "
        f"{figure(b.acceptance_length)}{drafted}), time per step {figure(a.step_ms)} → "
        f"{figure(b.step_ms)} ms ({rise_words(step_pct)})"
    )


def _drafter_engine(c_acc: float, c_step: float) -> tuple[str, str]:
    return (
        "the drafter got " + ("better" if c_acc > 0 else "worse"),
        "the engine got " + ("faster" if c_step > 0 else "slower"),
    )


def _cause(c_acc: float, c_step: float, c_rest: float) -> tuple[str, str, float, float, float]:
    """(cause, its words, share of acceptance, of step cost, of the rest)."""
    total = c_acc + c_step + c_rest
    s_acc, s_step, s_rest = c_acc / total, c_step / total, c_rest / total
    drafter, engine = _drafter_engine(c_acc, c_step)
    if abs(s_rest) > REST_SHARE:
        words = (
            "not clear: the client's and the server's counts of output tokens disagree, "
            "so the steps do not account for the tokens/s"
        )
        return UNCLEAR, words, s_acc, s_step, s_rest
    one_percent = math.log(1.01)
    for cause, own, other, mine, theirs, c_other in (
        (DRAFTER, s_acc, s_step, drafter, engine, c_step),
        (ENGINE, s_step, s_acc, engine, drafter, c_acc),
    ):
        if own > DOMINANT_SHARE and abs(other) <= MINOR_SHARE:
            not_other = "not the engine" if cause == DRAFTER else "not the drafter"
            words = f"{mine}, {not_other}"
            if other < 0 and abs(c_other) >= one_percent:
                words += f" ({theirs}, which made up part of it)"
            return cause, words, s_acc, s_step, s_rest
    if s_acc >= 0 and s_step >= 0:
        words = f"both: {drafter} and {engine}"
    else:
        big, small = (drafter, engine) if abs(c_acc) > abs(c_step) else (engine, drafter)
        words = f"both, in opposite ways: {big}, more than {small}"
    return BOTH, words, s_acc, s_step, s_rest


def _share(value: float) -> str:
    """A share in whole percent, without a "-0%"."""
    return f"{round(100 * value) or 0}%"


def _share_words(s_acc: float, s_step: float, s_rest: float) -> str:
    parts = [f"acceptance {_share(s_acc)}", f"step cost {_share(s_step)}"]
    if round(100 * s_rest):
        parts.append(f"rest {_share(s_rest)}")
    return "of the change: " + ", ".join(parts)


def split_steps(
    a: Steps | None,
    b: Steps | None,
    *,
    stage: str | None = None,
    plain: bool = False,
    names: tuple[str, str] = ("A", "B"),
) -> Split:
    """Split the change of tokens/s from side ``a`` to side ``b`` (one arm, one stage).

    ``plain``: the arm decodes without speculation (nothing to split). A side
    that is None was not read at all (its result file was not found); ``names``
    name the sides where only one of them cannot be split.
    """
    if plain:
        return Split(stage, PLAIN, "plain decoding: nothing to split")
    why = _why_not(a, b, names)
    side_a, side_b = (side_of(a), side_of(b)) if a and b else (None, None)
    if why is not None or side_a is None or side_b is None:
        return replace(why or Split(None, NO_DRAFTS, "not split"), stage=stage)
    tok_pct = _pct(side_a.tokens_per_s, side_b.tokens_per_s)
    per_step_pct = _pct(side_a.tokens_per_step, side_b.tokens_per_step)
    step_pct = _pct(side_a.step_ms, side_b.step_ms)
    len_pct = _pct(side_a.acceptance_length, side_b.acceptance_length)
    # ln(tok_B / tok_A) = c_acc + c_step + c_rest, exactly for the pooled figures.
    c_acc = math.log(side_b.tokens_per_step / side_a.tokens_per_step)
    c_step = -math.log(side_b.step_ms / side_a.step_ms)
    c_rest = math.log(side_b.client_over_server / side_a.client_over_server)
    figures = _figures_words(side_a, side_b, per_step_pct, step_pct)
    tokens = f"{number(side_a.tokens_per_s)} → {number(side_b.tokens_per_s)}"
    changes = (side_a, side_b, tok_pct, per_step_pct, step_pct, len_pct)
    if abs(tok_pct) < SAME_PCT:
        tail = ""
        if c_acc * c_step < 0 and min(abs(c_acc), abs(c_step)) >= math.log(1.01):
            drafter, engine = _drafter_engine(c_acc, c_step)
            tail = f": {drafter} and {engine}, and the two cancel out"
        sentence = (
            f"{TOKENS_WORDS} about the same ({rise_words(tok_pct)}, {tokens}): {figures}{tail}"
        )
        return Split(stage, SPLIT, sentence, *changes, cause=SAME)
    cause, words, s_acc, s_step, s_rest = _cause(c_acc, c_step, c_rest)
    sentence = (
        f"{TOKENS_WORDS} {rise_words(tok_pct)} ({tokens}): {figures}; "
        f"{_share_words(s_acc, s_step, s_rest)}: {words}"
    )
    return Split(stage, SPLIT, sentence, *changes, s_acc, s_step, s_rest, cause)


def split_results(
    a: Mapping[str, Any],
    b: Mapping[str, Any],
    *,
    plain: bool = False,
    names: tuple[str, str] = ("A", "B"),
) -> list[Split]:
    """:func:`split_steps` at every stage of two results of one arm (one split for
    unstaged results), in the order ``b``'s stages ran, then any only ``a`` has. A
    stage that one side did not measure is not split."""
    parts_a, parts_b = steps_by_stage(a), steps_by_stage(b)
    out = []
    for stage in [*parts_b, *(s for s in parts_a if s not in parts_b)]:
        if stage not in parts_a or stage not in parts_b:
            side = names[0] if stage not in parts_a else names[1]
            words = f"not split: stage {stage} was not measured ({side})"
            out.append(Split(stage, NOT_MEASURED, words))
            continue
        split = split_steps(parts_a[stage], parts_b[stage], stage=stage, plain=plain, names=names)
        out.append(split)
    return out
