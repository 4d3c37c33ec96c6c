"""Issue 34, 3: a speculative arm's change of tokens/s split into acceptance (tokens per
step) and step cost (time per step), and the report line that says which one moved."""

from __future__ import annotations

import dataclasses
import doctest
import json
import math
import re
import statistics
from pathlib import Path
from typing import Any

import pytest

from benchgate import causes, ledger, report, serverconfig
from benchgate.results import summarize_dicts

K = 3  # draft tokens per draft


def trial(
    index: int,
    *,
    length: float,
    step_ms: float,
    drafted: float = 1.0,
    output_tokens: int = 4096,
    jitter: float = 0.0,
    stage: str | None = None,
    server_ok: bool = True,
    counters: bool = True,
) -> dict[str, Any]:
    """One trial as ``benchgate bench`` writes it, made from the engine's figures: every
    step emits one token plus the draft tokens accepted in it; ``drafted`` of the steps
    draft, and accept ``length - 1`` tokens on average; each step takes ``step_ms``."""
    step_ms *= 1.0 + jitter
    steps = output_tokens / (1.0 + drafted * (length - 1.0))
    drafts = drafted * steps
    accepted = drafts * (length - 1.0)
    duration = steps * step_ms / 1000.0
    tok_s = output_tokens / duration
    spec = {
        "drafts": drafts,
        "draft_tokens": drafts * K,
        "accepted_tokens": accepted,
        "acceptance_rate": accepted / (drafts * K) if drafts else None,
        "mean_acceptance_length": length if drafts else None,
        "per_position_acceptance": [0.8, 0.6, 0.4],
    }
    out: dict[str, Any] = {
        "index": index,
        "valid": True,
        "duration_s": duration,
        "num_requests": 8,
        "output_tokens": output_tokens,
        "metrics": {
            "output_tokens_per_s": tok_s,
            "ttft_ms": {"median": 40.0},
            "tpot_ms": {"median": 1000.0 / tok_s},
        },
        "server": {
            "ok": server_ok,
            "generation_tokens": float(output_tokens),
            "spec_decode": spec if counters else None,
        },
    }
    if stage is not None:
        out["stage"] = stage
    return out


JITTER = (0.0, 0.01, -0.01, 0.02, -0.02)
#: Per stage (None: unstaged), the engine's figures of :func:`trial`.
Levels = dict[str | None, dict[str, float]]


def result(
    release: str,
    levels: Levels,
    *,
    server_config: dict[str, Any] | None = None,
    **kwargs: Any,
) -> dict[str, Any]:
    """A result of one arm: per stage (None: unstaged) its ``length``, ``step_ms`` and
    ``drafted``, five trials each with a little jitter in the step time."""
    trials = [
        trial(len(JITTER) * i + j, jitter=jit, stage=stage, **{**figures, **kwargs})
        for i, (stage, figures) in enumerate(levels.items())
        for j, jit in enumerate(JITTER)
    ]
    out: dict[str, Any] = {
        "schema": "benchgate.result/1",
        "target": {"base_url": "http://gpu-1:8000", "model": "m", "server_version": release},
        "workload": {"name": "chat", "version": 1, "hash": "h", "params": {}},
        "trials": trials,
        "summary": dataclasses.asdict(summarize_dicts(trials)),
    }
    staged = [s for s in levels if s is not None]
    if staged:
        out["stages"] = [
            {
                "name": name,
                "params": {"concurrency": 1 + 7 * i},
                "summary": dataclasses.asdict(
                    summarize_dicts([t for t in trials if t.get("stage") == name])
                ),
            }
            for i, name in enumerate(staged)
        ]
    if server_config is not None:
        out["server_config"] = server_config
    return out


def one(a: dict[str, Any], b: dict[str, Any], **kwargs: Any) -> causes.Split:
    (split,) = causes.split_results(a, b, **kwargs)
    return split


BASE = {"length": 2.4, "step_ms": 4.1}


# --------------------------------------------------------------------------- the split


def test_only_the_step_cost_changed_is_the_engine() -> None:
    a = result("0.31.0", {None: BASE})
    b = result("0.32.0", {None: {**BASE, "step_ms": 4.6}})
    split = one(a, b, names=("0.31.0", "0.32.0"))
    assert split.status == causes.SPLIT and split.cause == causes.ENGINE
    assert split.tokens_change_pct == pytest.approx(100 * (4.1 / 4.6 - 1), abs=0.01)
    assert split.step_change_pct == pytest.approx(100 * (4.6 / 4.1 - 1), abs=0.01)
    assert split.per_step_change_pct == pytest.approx(0.0, abs=1e-9)
    assert split.share_step == pytest.approx(1.0) and split.share_acceptance == pytest.approx(0.0)
    assert split.sentence == (
        "tokens/s over all trials 10.9% lower (585.4 → 521.7): tokens per step 2.40 → 2.40 "
        "(no change; "
        "acceptance length 2.40 → 2.40), time per step 4.10 → 4.60 ms (12.2% higher); "
        "of the change: acceptance 0%, step cost 100%: the engine got slower, not the drafter"
    )


def test_only_the_acceptance_changed_is_the_drafter() -> None:
    a = result("0.31.0", {None: BASE})
    b = result("0.32.0", {None: {**BASE, "length": 2.1}})
    split = one(a, b)
    assert split.cause == causes.DRAFTER
    assert split.share_acceptance == pytest.approx(1.0)
    assert split.step_change_pct == pytest.approx(0.0, abs=1e-9)
    assert "acceptance length 2.40 → 2.10" in split.sentence
    assert split.sentence.endswith("the drafter got worse, not the engine")
    better = one(b, a)
    assert better.cause == causes.DRAFTER
    assert better.sentence.endswith("the drafter got better, not the engine")


def test_both_changed() -> None:
    a = result("0.31.0", {None: BASE})
    b = result("0.32.0", {None: {"length": 2.16, "step_ms": 4.5}})  # 10% fewer, 10% longer
    split = one(a, b)
    assert split.cause == causes.BOTH
    assert split.share_acceptance == pytest.approx(0.5, abs=0.05)
    assert split.sentence.endswith("both: the drafter got worse and the engine got slower")
    # Opposite ways: the drafter got better, the engine much slower; no part "dominates".
    c = result("0.32.0", {None: {"length": 2.64, "step_ms": 5.1}})
    split = one(a, c)
    assert split.cause == causes.BOTH
    assert (split.share_step or 0) > 1 and (split.share_acceptance or 0) < 0
    assert split.sentence.endswith(
        "both, in opposite ways: the engine got slower, more than the drafter got better"
    )
    # A small move the other way does not hide the part that dominates.
    d = result("0.32.0", {None: {"length": 2.45, "step_ms": 5.1}})
    split = one(a, d)
    assert split.cause == causes.ENGINE
    assert split.sentence.endswith(
        "the engine got slower, not the drafter (the drafter got better, which made up part of it)"
    )


def test_a_drafter_that_drafts_in_few_steps_is_still_split_right() -> None:
    """An n-gram drafter drafts only where the text repeats (a fifth of the steps in the
    demo). Duration over drafts would then time mostly steps without a draft: a drafter
    that got worse would read as an engine that got faster. Steps count them all."""
    a = result("0.31.0", {None: {**BASE, "length": 3.0, "drafted": 0.2}})
    worse = result("0.32.0", {None: {**BASE, "length": 2.5, "drafted": 0.2}})
    split = one(a, worse)
    assert split.cause == causes.DRAFTER and split.step_change_pct == pytest.approx(0.0, abs=1e-9)
    assert "acceptance length 3.00 → 2.50, drafts in 20% → 20% of the steps" in split.sentence
    rarer = result("0.32.0", {None: {**BASE, "length": 3.0, "drafted": 0.1}})  # proposes less
    split = one(a, rarer)
    assert split.cause == causes.DRAFTER
    assert "drafts in 20% → 10% of the steps" in split.sentence


def test_about_the_same_is_not_attributed() -> None:
    a = result("0.31.0", {None: BASE})
    split = one(a, result("0.32.0", {None: {**BASE, "step_ms": 4.12}}))
    assert split.cause == causes.SAME and split.share_step is None
    assert split.sentence.startswith("tokens/s over all trials about the same (0.5% lower, ")
    cancel = one(a, result("0.32.0", {None: {"length": 2.64, "step_ms": 4.51}}))
    assert cancel.cause == causes.SAME
    assert cancel.sentence.endswith(
        "the drafter got better and the engine got slower, and the two cancel out"
    )


def test_shares_add_up_and_there_is_no_rest_where_the_counts_agree() -> None:
    a = result("0.31.0", {None: BASE})
    b = result("0.32.0", {None: {"length": 2.2, "step_ms": 4.3}})
    split = one(a, b)
    shares = [split.share_acceptance, split.share_step, split.share_rest]
    assert all(s is not None for s in shares)
    assert sum(s or 0.0 for s in shares) == pytest.approx(1.0, abs=1e-12)
    assert split.share_rest == 0.0 and "rest" not in split.sentence
    assert split.a is not None and split.b is not None
    # tokens/s = tokens per step / time per step, trial by trial and pooled.
    for t in causes.steps_of(a).trials:
        assert t.tokens_per_s == pytest.approx(1000 * t.tokens_per_step / t.step_ms)
    assert split.a.tokens_per_s == pytest.approx(1000 * split.a.tokens_per_step / split.a.step_ms)
    assert math.isclose(split.a.acceptance_length, 2.4)


def varied(figures: list[dict[str, Any]]) -> dict[str, Any]:
    """A result of one arm whose trials differ: one trial per entry of ``figures``."""
    return {
        "schema": "benchgate.result/1",
        "trials": [trial(i, **f) for i, f in enumerate(figures)],
    }


def test_pooled_parts_add_up_to_the_change_exactly() -> None:
    """Figures pooled over the trials (ratios of sums): the acceptance's and the step
    cost's parts add up to the change of tokens/s exactly, however much the trials vary,
    where the medians of the three figures would leave a large rest."""
    a = varied(
        [
            {"length": 3.0, "step_ms": 3.6, "drafted": 0.2, "output_tokens": 512},
            {"length": 2.2, "step_ms": 3.1, "drafted": 0.25, "output_tokens": 1024},
            {"length": 3.4, "step_ms": 4.0, "drafted": 0.15, "output_tokens": 300},
            {"length": 2.6, "step_ms": 3.3, "drafted": 0.3, "output_tokens": 700},
        ],
    )
    b = varied(
        [
            {"length": 2.1, "step_ms": 3.0, "drafted": 0.3, "output_tokens": 1500},
            {"length": 3.3, "step_ms": 3.9, "drafted": 0.18, "output_tokens": 400},
            {"length": 2.8, "step_ms": 3.4, "drafted": 0.22, "output_tokens": 512},
            {"length": 3.6, "step_ms": 4.2, "drafted": 0.12, "output_tokens": 256},
            {"length": 2.5, "step_ms": 3.2, "drafted": 0.28, "output_tokens": 900},
        ],
    )
    split = one(a, b)
    assert split.status == causes.SPLIT and split.cause != causes.UNCLEAR
    assert split.a is not None and split.b is not None
    assert split.share_acceptance is not None and split.share_step is not None
    assert split.share_acceptance + split.share_step == pytest.approx(1.0, abs=1e-12)
    assert split.share_rest == 0.0 and "rest" not in split.sentence
    # Each part is the log change of its own pooled figure, and they make the whole.
    total = math.log(split.b.tokens_per_s / split.a.tokens_per_s)
    acc = math.log(split.b.tokens_per_step / split.a.tokens_per_step)
    step = -math.log(split.b.step_ms / split.a.step_ms)
    assert acc + step == pytest.approx(total, rel=1e-12, abs=1e-15)
    assert split.share_acceptance == pytest.approx(acc / total, rel=1e-12)
    # The pooled figures are the ratios of the sums of the trials' counts.
    trials = b["trials"]
    gen = sum(t["server"]["generation_tokens"] for t in trials)
    acc_tokens = sum(t["server"]["spec_decode"]["accepted_tokens"] for t in trials)
    drafts = sum(t["server"]["spec_decode"]["drafts"] for t in trials)
    duration = sum(t["duration_s"] for t in trials)
    assert split.b.tokens_per_s == pytest.approx(sum(t["output_tokens"] for t in trials) / duration)
    assert split.b.tokens_per_step == pytest.approx(gen / (gen - acc_tokens))
    assert split.b.step_ms == pytest.approx(1000 * duration / (gen - acc_tokens))
    assert split.b.acceptance_length == pytest.approx(1 + acc_tokens / drafts)
    assert split.b.drafted == pytest.approx(drafts / (gen - acc_tokens))
    assert split.sentence.startswith("tokens/s over all trials ")

    # The medians would not add up: a rest of more than a third of the change.
    def med(steps: causes.Steps, name: str) -> float:
        return float(statistics.median(getattr(t, name) for t in steps.trials))

    sa, sb = causes.steps_of(a), causes.steps_of(b)
    m_total = math.log(med(sb, "tokens_per_s") / med(sa, "tokens_per_s"))
    m_acc = math.log(med(sb, "tokens_per_step") / med(sa, "tokens_per_step"))
    m_step = -math.log(med(sb, "step_ms") / med(sa, "step_ms"))
    assert abs(m_total - m_acc - m_step) > abs(m_total) / 3


def test_a_rest_only_where_the_client_and_the_server_count_tokens_differently() -> None:
    """The steps come from the server's count of tokens, tokens/s from the client's: where
    the two disagree (differently on the two sides), what they leave is the rest, and
    when it is more than a third of the change the split is not clear."""
    a = result("0.31.0", {None: BASE})

    def client_counts(res: dict[str, Any], factor: float) -> dict[str, Any]:
        for t in res["trials"]:
            t["output_tokens"] = round(t["output_tokens"] * factor)
            t["metrics"]["output_tokens_per_s"] = t["output_tokens"] / t["duration_s"]
        return res

    b = client_counts(result("0.32.0", {None: {**BASE, "step_ms": 4.3}}), 0.98)
    split = one(a, b)
    assert split.cause == causes.ENGINE and split.share_rest is not None
    assert split.a is not None and split.b is not None
    total = math.log(split.b.tokens_per_s / split.a.tokens_per_s)
    assert split.share_rest * total == pytest.approx(math.log(round(4096 * 0.98) / 4096))
    assert split.sentence.endswith(
        "of the change: acceptance 0%, step cost 70%, rest 30%: the engine got slower, "
        "not the drafter"
    )
    unclear = one(a, client_counts(result("0.32.0", {None: {**BASE, "step_ms": 4.15}}), 0.9))
    assert unclear.cause == causes.UNCLEAR
    assert unclear.sentence.endswith(
        "not clear: the client's and the server's counts of output tokens disagree, "
        "so the steps do not account for the tokens/s"
    )


def test_missing_counters_are_not_split() -> None:
    a = result("0.31.0", {None: BASE})
    no_scrape = result("0.32.0", {None: BASE}, server_ok=False)
    split = one(a, no_scrape, names=("0.31.0", "0.32.0"))
    assert split.status == causes.NO_COUNTERS and split.cause == ""
    assert split.sentence == ("not split: the server's spec-decode counters were not read (0.32.0)")
    both = one(result("a", {None: BASE}, counters=False), no_scrape)
    assert both.sentence == "not split: the server's spec-decode counters were not read"
    invalid = result("0.32.0", {None: BASE})
    for t in invalid["trials"]:
        t["valid"] = False
    assert one(a, invalid).status == causes.NO_TRIALS
    assert causes.split_steps(causes.steps_of(a), None).sentence == (
        "not split: the result file was not found (the ledger keeps no server counters) (B)"
    )


def test_plain_decoding_has_nothing_to_split() -> None:
    a = result("0.31.0", {None: BASE})
    assert one(a, a, plain=True).sentence == "plain decoding: nothing to split"
    no_drafts = result("0.32.0", {None: BASE})
    for t in no_drafts["trials"]:
        t["server"]["spec_decode"].update(drafts=0.0, accepted_tokens=0.0)
    split = one(no_drafts, no_drafts)
    assert split.status == causes.NO_DRAFTS
    assert split.sentence == "not split: the server counted no drafts"


def test_staged_results_are_split_stage_by_stage() -> None:
    levels: Levels = {"single": BASE, "busy": {"length": 2.2, "step_ms": 1.3}}
    a = result("0.31.0", levels)
    b = result("0.32.0", {"single": BASE, "busy": {"length": 2.2, "step_ms": 1.6}})
    splits = causes.split_results(a, b)
    assert [(s.stage, s.cause) for s in splits] == [
        ("single", causes.SAME),
        ("busy", causes.ENGINE),
    ]
    assert set(causes.steps_by_stage(a)) == {"single", "busy"}
    only_single = result("0.32.0", {"single": BASE})
    splits = causes.split_results(a, only_single, names=("0.31.0", "0.32.0"))
    assert [(s.stage, s.status) for s in splits] == [
        ("single", causes.SPLIT),
        ("busy", causes.NOT_MEASURED),
    ]
    assert splits[1].sentence == "not split: stage busy was not measured (0.32.0)"


# --------------------------------------------------------------------------- serverconfig


def config(*flags: str, env: dict[str, str] | None = None, cpus: str | None = "0-1") -> dict:
    argv = ["/opt/vllm/releases/0.32.0/bin/python3", "/opt/vllm/current/bin/vllm", "serve", "m"]
    return {"argv": [*argv, "--port", "8000", *flags], "env": env or {}, "cpus": cpus}


SPEC = "--speculative-config", '{"method":"ngram","num_speculative_tokens":3}'


def test_doctests() -> None:
    assert doctest.testmod(serverconfig).failed == 0


def test_configs_that_differ_only_in_speculation_have_no_differences() -> None:
    off = config("--max-num-seqs", "8")
    assert serverconfig.differences(off, config("--max-num-seqs", "8", *SPEC)) == []
    inline = config("--max-num-seqs=8", "--speculative-config={}")
    assert serverconfig.differences(off, inline) == []
    old = config("--max-num-seqs", "8", "--speculative-model", "[ngram]",
                 "--num-speculative-tokens", "3", "--ngram_prompt_lookup_max", "3")  # fmt: skip
    assert serverconfig.differences(off, old) == []
    # The program's path (the release's venv) and the port do not count either.
    moved = {**off, "argv": ["/other/vllm", "serve", "m", "--port", "9000", "--max-num-seqs", "8"]}
    assert serverconfig.differences(off, moved) == []
    assert serverconfig.differences(None, off) == [] and serverconfig.differences(off, {}) != []


def test_configs_that_differ_in_more_than_speculation_say_how() -> None:
    a = config("--max-num-seqs", "1", "--enforce-eager", env={"VLLM_CPU_OMP_THREADS_BIND": "1"})
    b = config(
        "--max-num-seqs", "256", *SPEC, "--async-scheduling",
        env={"VLLM_CPU_OMP_THREADS_BIND": "0-1", "VLLM_USE_V1": "1"}, cpus="0-3",
    )  # fmt: skip
    assert serverconfig.differences(a, b) == [
        "--max-num-seqs: 1 vs 256",
        "--enforce-eager only in A",
        "--async-scheduling only in B",
        "VLLM_CPU_OMP_THREADS_BIND: 1 vs 0-1",
        "VLLM_USE_V1=1 only in B",
        "cpus: 0-1 vs 0-3",
    ]
    other_model = {**b, "argv": [x if x != "m" else "m2" for x in b["argv"]]}
    assert serverconfig.differences(b, other_model, ("off", "ngram-k3")) == ["model: m vs m2"]
    assert serverconfig.differences(a, {**a, "cpus": None}, ("off", "ngram-k3")) == [
        "cpus 0-1 only in off"
    ]
    # The fingerprint is unchanged by the refactoring that differences() shares.
    assert serverconfig.config_args(a) == [
        "m", "--max-num-seqs", "1", "--enforce-eager", "VLLM_CPU_OMP_THREADS_BIND=1", "cpus=0-1",
    ]  # fmt: skip


# --------------------------------------------------------------------------- the report


def record(db: Path, folder: Path, name: str, res: dict[str, Any], **kwargs: Any) -> int:
    path = folder / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(res), encoding="utf-8")
    return ledger.record_result(db, res, host="gpu-1", **kwargs)


def test_report_shows_why_an_arm_got_slower(tmp_path: Path) -> None:
    """ngram-k3 on 0.31.0 and 0.32.0: the same acceptance, a slower step. The report says
    "the engine got slower, not the drafter" under the per-release table, in HTML and
    Markdown; the 0.32.0 arm also ran with --async-scheduling, which both say."""
    db, arts = tmp_path / "artifacts" / "ledger.sqlite", tmp_path / "artifacts" / "run"
    off_cfg = config()
    spec_cfg = config(*SPEC)
    async_cfg = config(*SPEC, "--async-scheduling")
    plain: Levels = {None: {"length": 1.0, "step_ms": 3.0, "drafted": 0.0}}
    for rel, cfg, step in (("0.31.0", spec_cfg, 4.1), ("0.32.0", async_cfg, 4.6)):
        off = result(rel, plain, server_config=off_cfg, counters=False)
        ngram = result(rel, {None: {**BASE, "step_ms": step}}, server_config=cfg)
        day = f"2026-12-0{rel[3]}"
        record(db, arts, f"off-{rel}", off, phase="arm:off", release=rel, recorded_at=day)
        record(db, arts, f"ngram-{rel}", ngram, phase="arm:ngram-k3", release=rel, recorded_at=day)
    rep = report.load_report(db)
    sentence = (
        "tokens/s over all trials 10.9% lower (585.4 → 521.7): tokens per step 2.40 → 2.40 "
        "(no change; "
        "acceptance length 2.40 → 2.40), time per step 4.10 → 4.60 ms (12.2% higher); "
        "of the change: acceptance 0%, step cost 100%: the engine got slower, not the drafter. "
        "These runs differ in more than speculation: --async-scheduling only in 0.32.0."
    )
    page = report.render_html(rep)
    item = r'<li data-arm="([^"]+)" data-cause="(\w+)"><b>([^<]+)</b>: ([^<]+)</li>'
    items = re.findall(item, page)
    assert items == [("ngram-k3", "engine", "ngram-k3, 0.31.0 → 0.32.0", sentence)]
    # Under the per-release table, before the charts.
    assert page.index("Why tokens/s changed") < page.index("Throughput and latency over time")
    differs = "0.32.0: ngram-k3 differs from off in more than speculation: --async-scheduling"
    assert f"{differs} only in ngram-k3" in page
    md = report.render_markdown(rep)
    assert f"- **ngram-k3, 0.31.0 → 0.32.0**: {sentence}" in md
    assert "- 0.32.0: ngram-k3 differs from off in more than speculation" in md
    # Without the result files the ledger has no counters: the line says so.
    for f in arts.glob("ngram-0.31.0.json"):
        f.unlink()
    md = report.render_markdown(report.load_report(db))
    assert (
        "- **ngram-k3, 0.31.0 → 0.32.0**: not split: the result file was not found (the "
        "ledger keeps no server counters) (0.31.0)." in md
    )


def test_staged_report_splits_every_stage(tmp_path: Path) -> None:
    db, arts = tmp_path / "ledger.sqlite", tmp_path / "results"
    before: Levels = {"single": BASE, "busy": {"length": 2.2, "step_ms": 1.3}}
    after: Levels = {"single": {**BASE, "length": 2.0}, "busy": {"length": 2.2, "step_ms": 1.6}}
    for rel, levels in (("0.31.0", before), ("0.32.0", after)):
        record(db, arts, rel, result(rel, levels), phase="arm:ngram-k3", release=rel)
    rep = report.load_report(db)
    page = report.render_html(rep)
    for stage, cause in (("single", "drafter"), ("busy", "engine")):
        section = page.split(f'data-stage="{stage}">')[1].split("<h4")[0]
        assert f'data-cause="{cause}"><b>ngram-k3, 0.31.0 → 0.32.0</b>' in section
    md = report.render_markdown(rep)
    single = md.split("Stage **single")[1].split("Stage **busy")[0]
    assert "the drafter got worse, not the engine." in single
    assert "the engine got slower, not the drafter." in md.split("Stage **busy")[1]
