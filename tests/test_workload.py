"""Workload files: validation names the field, hashing, overrides, prompt sources."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from benchgate.workload import (
    WorkloadError,
    build_prompts,
    load_workload,
    parse_workload,
)

REPO = Path(__file__).resolve().parents[1]

BASE = {
    "name": "t",
    "version": 1,
    "input_len": 16,
    "output_len": 8,
    "concurrency": 2,
    "num_requests": 4,
    "trials": 3,
}


def test_shipped_demo_workload_loads_by_name_and_path():
    by_name = load_workload("demo", search_dirs=[REPO / "workloads"])
    by_path = load_workload(REPO / "workloads" / "demo.yml")
    assert by_name == by_path
    assert (by_name.input_len, by_name.output_len, by_name.concurrency) == (64, 64, 4)
    assert by_name.num_requests == 32 and by_name.warmup >= 1 and by_name.trials >= 3
    assert by_name.ignore_eos is True and by_name.temperature == 0.0
    assert by_name.prompts.source == "synthetic"
    assert len(by_name.hash) == 64


def test_every_shipped_workload_is_valid_and_builds_prompts():
    files = sorted((REPO / "workloads").glob("*.yml"))
    assert files
    for path in files:
        wl = load_workload(path)
        prompts = build_prompts(wl, 3)
        assert len(prompts) == 3 and all(p.text for p in prompts)


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        ({"concurrency": 0}, "concurrency", "must be >= 1"),
        ({"num_requests": "many"}, "num_requests", "must be an integer"),
        ({"trials": True}, "trials", "must be an integer"),
        ({"temperature": "hot"}, "temperature", "must be a number"),
        ({"max_error_rate": 1.5}, "max_error_rate", "must be <= 1.0"),
        ({"request_rate": 0}, "request_rate", "must be > 0.0"),
        ({"api": "embeddings"}, "api", "must be one of"),
        ({"ignore_eos": "yes"}, "ignore_eos", "true or false"),
        ({"concurency": 4}, "concurency", "unknown key"),
        ({"prompts": {"source": "wiki"}}, "prompts.source", "must be one of"),
        ({"prompts": {"source": "file"}}, "prompts.path", "is required"),
        ({"prompts": {"source": "synthetic", "sed": 1}}, "prompts.sed", "unknown key"),
        ({"schema": "benchgate.workload/9"}, "schema", "must be"),
    ],
)
def test_malformed_workload_error_names_the_field(change, field, words):
    with pytest.raises(WorkloadError) as err:
        parse_workload({**BASE, **change})
    assert err.value.field == field
    assert f"'{field}'" in str(err.value) and words in str(err.value)


@pytest.mark.parametrize("missing", ["name", "version", "output_len", "trials"])
def test_missing_required_field_is_named(missing):
    data = {k: v for k, v in BASE.items() if k != missing}
    with pytest.raises(WorkloadError, match=f"'{missing}': is required"):
        parse_workload(data)


def test_malformed_file_error_names_file_and_field(tmp_path):
    path = tmp_path / "bad.yml"
    path.write_text(yaml.safe_dump({**BASE, "output_len": -3}))
    with pytest.raises(WorkloadError) as err:
        load_workload(path)
    assert str(path) in str(err.value) and "'output_len'" in str(err.value)
    path.write_text("name: [unclosed\n")
    with pytest.raises(WorkloadError, match="not valid YAML"):
        load_workload(path)


def test_unknown_workload_name():
    with pytest.raises(WorkloadError, match="no workload file or name 'nope'"):
        load_workload("nope", search_dirs=[])


def test_hash_is_canonical_and_tracks_what_is_measured():
    a = parse_workload(BASE)
    b = parse_workload(dict(reversed(list(BASE.items()))))
    assert a.hash == b.hash
    assert parse_workload({**BASE, "description": "other words"}).hash == a.hash
    assert parse_workload({**BASE, "timeout_s": 5}).hash == a.hash
    assert parse_workload({**BASE, "output_len": 9}).hash != a.hash
    assert parse_workload({**BASE, "prompts": {"seed": 1}}).hash != a.hash
    assert (
        a.hash
        == __import__("hashlib")
        .sha256(
            json.dumps(
                {k: v for k, v in a.params().items() if k != "timeout_s"},
                sort_keys=True,
                separators=(",", ":"),
            ).encode()
        )
        .hexdigest()
    )


def test_overrides_revalidate_and_rehash():
    wl = parse_workload(BASE)
    assert wl.with_overrides(concurrency=None) is wl
    bigger = wl.with_overrides(concurrency=8, trials=5)
    assert (bigger.concurrency, bigger.trials, bigger.output_len) == (8, 5, 8)
    assert bigger.hash != wl.hash
    with pytest.raises(WorkloadError, match="'warmup'"):
        wl.with_overrides(warmup=-1)
    with pytest.raises(WorkloadError, match="'name': cannot be overridden"):
        wl.with_overrides(name="x")


def test_synthetic_prompts_are_seeded_and_offset():
    wl = parse_workload({**BASE, "prompts": {"source": "synthetic", "seed": 7}})
    first = build_prompts(wl, 6)
    assert first == build_prompts(wl, 6)
    assert build_prompts(wl, 3, offset=3) == first[3:]
    assert all(len(p.text.split()) == 16 and p.approx_tokens == 16 for p in first)
    other = parse_workload({**BASE, "prompts": {"source": "synthetic", "seed": 8}})
    assert build_prompts(other, 6) != first


def test_file_prompts_text_and_json(tmp_path):
    (tmp_path / "p.txt").write_text("first prompt\n\nsecond\nprompt\n\n\nthird\n")
    (tmp_path / "p.json").write_text(json.dumps(["a b", "c d e"]))
    for name, count in (("p.txt", 3), ("p.json", 2)):
        path = tmp_path / "w.yml"
        path.write_text(yaml.safe_dump({**BASE, "prompts": {"source": "file", "path": name}}))
        wl = load_workload(path)
        prompts = build_prompts(wl, 5)
        assert len(prompts) == 5
        assert len({p.text for p in prompts}) == count
    (tmp_path / "w.yml").write_text(
        yaml.safe_dump({**BASE, "prompts": {"source": "file", "path": "missing.txt"}})
    )
    with pytest.raises(WorkloadError, match="'prompts.path': file not found"):
        build_prompts(load_workload(tmp_path / "w.yml"), 1)


def test_sharegpt_prompts_take_first_human_turn(tmp_path):
    data = [
        {
            "conversations": [
                {"from": "human", "value": "hello there"},
                {"from": "gpt", "value": "x"},
            ]
        },
        {"conversations": [{"from": "system", "value": "sys"}, {"from": "human", "value": "q2"}]},
        {"id": "no conversations"},
    ]
    (tmp_path / "sg.json").write_text(json.dumps(data))
    wl = parse_workload(
        {**BASE, "prompts": {"source": "sharegpt", "path": "sg.json"}}, base_dir=str(tmp_path)
    )
    texts = {p.text for p in build_prompts(wl, 4)}
    assert texts == {"hello there", "q2"}


def test_sharegpt_sample_lengths_come_from_the_answer(tmp_path):
    data = [
        {"conversations": [{"from": "human", "value": "q1"}, {"from": "gpt", "value": "a" * 40}]},
        {"conversations": [{"from": "human", "value": "q2"}, {"from": "gpt", "value": "b" * 400}]},
        {"conversations": [{"from": "human", "value": "q3"}]},
    ]
    (tmp_path / "sg.json").write_text(json.dumps(data))
    src = {"source": "sharegpt", "path": "sg.json", "output_lengths": "sample"}
    wl = parse_workload({**BASE, "output_len": 64, "prompts": src}, base_dir=str(tmp_path))
    lengths = {p.text: p.max_tokens for p in build_prompts(wl, 6)}
    # 40 characters ~ 10 tokens; 400 ~ 100, capped at output_len; no answer: output_len
    assert lengths == {"q1": 10, "q2": 64, "q3": None}


JSONL = [
    {"prompt": "plain prompt", "completion": "c" * 80},
    {"prompt": "counted", "output_tokens": 7},
    {"text": "no answer"},
    {
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "chat question"},
            {"role": "assistant", "content": "d" * 24},
        ]
    },
    {"prompt": "   "},
]


def _jsonl_workload(tmp_path, lines, lengths="sample"):
    (tmp_path / "s.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n\n")
    src = {"source": "jsonl", "path": "s.jsonl", "output_lengths": lengths}
    return parse_workload({**BASE, "output_len": 32, "prompts": src}, base_dir=str(tmp_path))


def test_jsonl_prompts_and_their_answer_lengths(tmp_path):
    prompts = build_prompts(_jsonl_workload(tmp_path, JSONL), 8)
    assert {p.text: p.max_tokens for p in prompts} == {
        "plain prompt": 20,
        "counted": 7,
        "no answer": None,
        "chat question": 6,
    }
    # the default: every request asks for the workload's output_len
    prompts = build_prompts(_jsonl_workload(tmp_path, JSONL, lengths="workload"), 8)
    assert {p.max_tokens for p in prompts} == {None}


def test_jsonl_sample_lengths_reach_the_request(tmp_path):
    from benchgate.client import build_payload

    wl = _jsonl_workload(tmp_path, JSONL)
    sent = {}
    for p in build_prompts(wl, 8):
        sent[p.text] = build_payload(wl, "m", p)["max_tokens"]
    assert sent == {"plain prompt": 20, "counted": 7, "no answer": 32, "chat question": 6}


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("not json", "s.jsonl:1: not JSON"),
        ("[1, 2]", "s.jsonl:1: must be a JSON object"),
        ('{"question": "x"}', "needs 'prompt' (a string) or 'messages'"),
        ('{"prompt": "x", "output_tokens": 0}', "'output_tokens' must be an integer >= 1"),
        ('{"messages": "x"}', "'messages' must be a list"),
    ],
)
def test_jsonl_bad_lines_name_the_line(tmp_path, line, message):
    (tmp_path / "s.jsonl").write_text(line + "\n")
    wl = parse_workload(
        {**BASE, "prompts": {"source": "jsonl", "path": "s.jsonl"}}, base_dir=str(tmp_path)
    )
    with pytest.raises(WorkloadError, match="'prompts.path'") as err:
        build_prompts(wl, 1)
    assert message in str(err.value)


def test_sample_lengths_need_a_source_with_answers():
    for source in ("synthetic", "file"):
        src = {"source": source, "output_lengths": "sample"}
        if source == "file":
            src["path"] = "p.txt"
        with pytest.raises(WorkloadError, match="'prompts.output_lengths': 'sample' needs"):
            parse_workload({**BASE, "prompts": src})
    with pytest.raises(WorkloadError, match="must be one of workload, sample"):
        parse_workload({**BASE, "prompts": {"source": "jsonl", "path": "x", "output_lengths": "x"}})


def test_default_output_lengths_keep_the_hash():
    # workloads written before output_lengths existed keep their hash
    plain = parse_workload({**BASE, "prompts": {"source": "file", "path": "p.txt"}})
    same = parse_workload(
        {**BASE, "prompts": {"source": "file", "path": "p.txt", "output_lengths": "workload"}}
    )
    assert "output_lengths" not in plain.params()["prompts"]
    assert plain.hash == same.hash
    sampled = parse_workload(
        {**BASE, "prompts": {"source": "jsonl", "path": "p.txt", "output_lengths": "sample"}}
    )
    assert sampled.params()["prompts"]["output_lengths"] == "sample"


FLOAT_KEYS = [
    ("temperature", "temperature"),
    ("max_error_rate", "max_error_rate"),
    ("request_rate", "request_rate"),
    ("burstiness", "burstiness"),
    ("timeout_s", "timeout_s"),
    ("slo", "slo.ttft_ms"),
]


@pytest.mark.parametrize("text", [".nan", ".inf", "-.inf"])
@pytest.mark.parametrize(("key", "field"), FLOAT_KEYS)
def test_non_finite_numbers_are_refused_naming_the_key(tmp_path, key, field, text):
    # YAML reads .nan/.inf as floats: max_error_rate: .nan compared false with
    # every limit, so failing trials counted as valid.
    value = f"{{ttft_ms: {text}}}" if key == "slo" else text
    path = tmp_path / "w.yml"
    path.write_text(yaml.safe_dump(BASE) + f"{key}: {value}\n")
    with pytest.raises(WorkloadError) as err:
        load_workload(path)
    assert err.value.field == field
    assert f"'{field}': must be a finite number" in str(err.value)


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_non_finite_overrides_are_refused(value):
    with pytest.raises(WorkloadError, match="'request_rate': must be a finite number"):
        parse_workload(BASE).with_overrides(request_rate=value)


# --------------------------------------------------------------------------- stages

STAGED = {
    **BASE,
    "stages": [
        {"name": "single", "concurrency": 1, "num_requests": 2},
        {"name": "busy", "concurrency": 4, "request_rate": 2.5, "slo": {"ttft_ms": 500}},
    ],
}


def test_unstaged_workloads_hash_as_before_stages_existed():
    # Pinned: the hash of the shipped demo workload before stages were added.
    # A change here makes every stored baseline incomparable.
    demo = load_workload(REPO / "workloads" / "demo.yml")
    assert demo.hash == "1ed44a754313143c5ccecd18dde3c12152bd964a2a06326d4705ac9f23be5d49"
    assert "stages" not in demo.params() and "stages" not in demo.to_dict()
    assert not demo.staged and demo.stage_workloads() == [(None, demo)]


def test_stages_replace_the_keys_they_name_in_order():
    wl = parse_workload(STAGED)
    assert wl.staged and wl.stage_names == ["single", "busy"]
    (n1, single), (n2, busy) = wl.stage_workloads()
    assert (n1, single.concurrency, single.num_requests, single.trials) == ("single", 1, 2, 3)
    assert (n2, busy.concurrency, busy.num_requests, busy.request_rate) == ("busy", 4, 4, 2.5)
    assert busy.slo == {"ttft_ms": 500.0} and single.slo is None
    assert not single.staged and not busy.staged
    assert wl.stage_workload("busy") == busy
    # A stage may clear an optional key the whole workload sets.
    cleared = parse_workload(
        {**BASE, "request_rate": 3, "stages": [{"name": "open", "request_rate": None}]}
    )
    assert cleared.stage_workload("open").request_rate is None


def test_staged_hash_tracks_stages_but_not_their_gate_or_timeout():
    wl = parse_workload(STAGED)
    assert wl.hash != parse_workload(BASE).hash
    assert parse_workload(wl.to_dict()).hash == wl.hash  # round trip
    swapped = {**STAGED, "stages": list(reversed(STAGED["stages"]))}
    assert parse_workload(swapped).hash != wl.hash  # the order is what runs
    gated = {
        **STAGED,
        "stages": [
            {**STAGED["stages"][0], "gate": {"max_regression_pct": 10}, "timeout_s": 60},
            STAGED["stages"][1],
        ],
    }
    assert parse_workload(gated).hash == wl.hash
    more = {**STAGED, "stages": [{**STAGED["stages"][0], "trials": 5}, STAGED["stages"][1]]}
    assert parse_workload(more).hash != wl.hash


def test_overrides_replace_the_key_in_every_stage():
    wl = parse_workload(
        {**STAGED, "stages": [{"name": "a", "trials": 9}, {"name": "b", "concurrency": 2}]}
    )
    quick = wl.with_overrides(trials=2, concurrency=8)
    assert [(w.trials, w.concurrency) for _, w in quick.stage_workloads()] == [(2, 8), (2, 8)]
    assert quick.hash != wl.hash and quick.stage_names == ["a", "b"]


@pytest.mark.parametrize(
    ("stages", "field", "words"),
    [
        ([], "stages", "non-empty list"),
        ({"name": "a"}, "stages", "non-empty list"),
        (["a"], "stages[0]", "must be a mapping"),
        ([{"concurrency": 1}], "stages[0].name", "must be a letter"),
        ([{"name": "two words"}], "stages[0].name", "must be a letter"),
        ([{"name": "stage:1"}], "stages[0].name", "must be a letter"),
        ([{"name": "a"}, {"name": "a"}], "stages[1].name", "names another stage"),
        ([{"name": "a", "api": "chat"}], "stages[0].api", "unknown key"),
        ([{"name": "a"}, {"name": "b", "concurrency": 0}], "stages[1].concurrency", ">= 1"),
        ([{"name": "a", "slo": {"ttft_ms": -1}}], "stages[0].slo.ttft_ms", "> 0.0"),
        ([{"name": "a", "gate": []}], "stages[0].gate", "must be a mapping"),
        ([{"name": "a", "gate": {"limit": 5}}], "stages[0].gate.limit", "unknown key"),
        (
            [{"name": "a", "gate": {"max_regression_pct": -1}}],
            "stages[0].gate.max_regression_pct",
            ">= 0.0",
        ),
        ([{"name": "a", "gate": {"critical": "ttft_ms"}}], "stages[0].gate.critical", "list"),
        ([{"name": "a", "gate": {"metrics": []}}], "stages[0].gate.metrics", "list"),
        (
            [{"name": "a", "gate": {"thresholds": {"ttft_ms": "x"}}}],
            "stages[0].gate.thresholds.ttft_ms",
            "must be a number",
        ),
        ([{"name": "a", "gate": {"latency_stat": "p42"}}], "stages[0].gate.latency_stat", "one of"),
    ],
)
def test_malformed_stage_error_names_the_stage_and_field(stages, field, words):
    with pytest.raises(WorkloadError) as err:
        parse_workload({**BASE, "stages": stages})
    assert err.value.field == field
    assert f"'{field}'" in str(err.value) and words in str(err.value)


def test_stage_gate_is_kept_for_the_judge():
    wl = parse_workload(
        {
            **BASE,
            "stages": [
                {
                    "name": "slo",
                    "gate": {
                        "max_regression_pct": 10,
                        "critical": ["ttft_ms"],
                        "thresholds": {"ttft_ms": 20},
                        "latency_stat": "p99",
                    },
                }
            ],
        }
    )
    gate = wl.stages[0].gate
    assert gate == {
        "max_regression_pct": 10.0,
        "critical": ["ttft_ms"],
        "thresholds": {"ttft_ms": 20.0},
        "latency_stat": "p99",
    }
    assert wl.to_dict()["stages"][0]["gate"] == gate


def test_latency_stats_match_the_judge():
    from benchgate import rules, workload

    assert workload.LATENCY_STATS == rules.LATENCY_STATS


def test_shipped_staged_demo_is_small_and_has_two_loads():
    wl = load_workload("demo-staged", search_dirs=[REPO / "workloads"])
    loads = [(name, w.concurrency, w.trials) for name, w in wl.stage_workloads()]
    assert loads == [("single", 1, 8), ("busy", 4, 8)]
    # 8 trials per stage: with alpha split over two stages, 8 pairs are the
    # fewest whose signed-rank bound is not the extreme pair (side by side).
    from benchgate import ranks

    def tail_rank(n: int) -> int:  # the bound is the k-th smallest Walsh average
        counts = ranks._signed_rank_counts(n)
        return max(k for k in range(len(counts)) if sum(counts[:k]) / 2**n <= 0.025)

    assert tail_rank(6) == 1 and tail_rank(8) == 4
    requests = sum(w.warmup + w.trials * w.num_requests for _, w in wl.stage_workloads())
    assert requests <= 200


def test_a_bench_with_sample_lengths_asks_each_request_for_its_answer(tmp_path):
    # Through the real client against the fake server, which generates what
    # max_tokens asks for: the records carry each sample's own length.
    from benchgate.bench import run_benchmark
    from benchgate.testing.fakeserver import FakeConfig, serve_in_thread

    lines = [{"prompt": f"question {i}", "output_tokens": n} for i, n in enumerate((3, 5, 9))]
    (tmp_path / "s.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    wl = parse_workload(
        {
            **BASE,
            "output_len": 8,
            "warmup": 0,
            "trials": 1,
            "num_requests": 6,
            "prompts": {"source": "jsonl", "path": "s.jsonl", "output_lengths": "sample"},
        },
        base_dir=str(tmp_path),
    )
    with serve_in_thread(FakeConfig(ttft_s=0.001, itl_s=0.001)) as srv:
        result = run_benchmark(srv.base_url, wl)
    assert result.all_valid
    got = sorted(r["output_tokens"] for t in result.trials for r in t.requests)
    assert got == [3, 3, 5, 5, 8, 8]  # 9 capped at output_len
