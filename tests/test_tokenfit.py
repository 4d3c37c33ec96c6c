"""Synthetic prompts fitted to input_len tokens by the server's tokenizer."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from benchgate.bench import BenchmarkError, run_benchmark
from benchgate.cli_bench import prompt_fit_line
from benchgate.testing.fakeserver import FakeConfig, FakeServer, fake_token_count, serve_in_thread
from benchgate.tokenfit import METHOD_TOKENIZER, METHOD_WORDS, fit_prompts
from benchgate.workload import build_prompts, parse_workload


def workload(**changes):
    data = {
        "name": "fit",
        "version": 1,
        "input_len": 24,
        "output_len": 4,
        "concurrency": 4,
        "num_requests": 8,
        "trials": 2,
        "warmup": 2,
    }
    data.update(changes)
    return parse_workload(data)


def fast(**changes):
    return FakeConfig(ttft_s=0.001, itl_s=0.001, **changes)


def test_every_prompt_the_server_sees_is_exactly_input_len_tokens():
    wl = workload()
    # The toy tokenizer counts BOS and two tokens for long words: the raw
    # word prompts are all longer than 24 tokens, so fitting must change them.
    raw = build_prompts(wl, 18)
    assert all(fake_token_count(p.text) > 24 for p in raw)
    with serve_in_thread(fast(tokenize="ok")) as srv:
        result = run_benchmark(srv.base_url, wl)
    assert result.all_valid
    fit = result.prompt_fit
    assert fit is not None and fit["method"] == METHOD_TOKENIZER
    assert fit["prompts"] == 2 + 2 * 8
    assert fit["exact"] == fit["prompts"]
    assert fit["min_tokens"] == fit["max_tokens"] == 24
    for trial in result.trials:
        # prompt_tokens are the server's usage figures, counted by its tokenizer.
        assert [r["prompt_tokens"] for r in trial.requests] == [24] * 8
        assert trial.prompt_tokens == 24 * 8


def test_fitting_is_deterministic_and_keeps_prompts_distinct():
    wl = workload(input_len=40)
    prompts = build_prompts(wl, 12)

    async def fit_twice():
        async with FakeServer(fast(tokenize="ok")) as srv, aiohttp.ClientSession() as client:
            one = await fit_prompts(client, srv.base_url, "fake", prompts, 40, seed=7)
            two = await fit_prompts(client, srv.base_url, "fake", prompts, 40, seed=7)
            return one, two

    (first, report), (second, _) = asyncio.run(fit_twice())
    assert [p.text for p in first] == [p.text for p in second]
    assert len({p.text for p in first}) == len(first)
    assert report.exact == 12
    assert all(fake_token_count(p.text) == 40 for p in first)


def test_a_server_without_tokenize_keeps_the_word_prompts_and_says_so():
    wl = workload()
    with serve_in_thread(fast()) as srv:
        result = run_benchmark(srv.base_url, wl)
    assert result.all_valid
    fit = result.prompt_fit
    assert fit is not None and fit["method"] == METHOD_WORDS
    assert "HTTP 404" in fit["reason"]
    assert fit["exact"] == 0 and fit["min_tokens"] is None
    # The word prompts were sent unchanged: input_len words each.
    assert [r["prompt_tokens"] for r in result.trials[0].requests] == [24] * 8
    line = prompt_fit_line(fit)
    assert line is not None and "not fitted" in line and "404" in line


def test_a_failing_tokenizer_stops_the_benchmark_before_any_load():
    with serve_in_thread(fast(tokenize="error")) as srv:
        with pytest.raises(BenchmarkError, match=r"fit the synthetic prompts.*HTTP 500"):
            run_benchmark(srv.base_url, workload())
        assert srv.state.tokenize_calls >= 1
        assert srv.state.requests == 0


def test_the_api_key_is_sent_to_tokenize():
    with serve_in_thread(fast(tokenize="ok", api_key="s3cret")) as srv:
        result = run_benchmark(srv.base_url, workload(), api_key="s3cret")
    assert result.all_valid
    assert result.prompt_fit is not None and result.prompt_fit["exact"] == 18


def test_prompt_files_are_not_fitted(tmp_path):
    (tmp_path / "prompts.txt").write_text("one prompt\n\nanother prompt here\n")
    wl = parse_workload(
        {
            "name": "file",
            "version": 1,
            "input_len": 8,
            "output_len": 2,
            "concurrency": 1,
            "num_requests": 2,
            "trials": 1,
            "prompts": {"source": "file", "path": "prompts.txt"},
        },
        base_dir=str(tmp_path),
    )
    with serve_in_thread(fast(tokenize="ok")) as srv:
        result = run_benchmark(srv.base_url, wl)
        assert srv.state.tokenize_calls == 0
    assert result.all_valid and result.prompt_fit is None
    assert prompt_fit_line(None) is None


def test_an_unreachable_target_is_reported_not_hidden():
    # BOS + one word is the shortest prompt: 1 token cannot be reached.
    with serve_in_thread(fast(tokenize="ok")) as srv:
        result = run_benchmark(srv.base_url, workload(input_len=1, warmup=0, trials=1))
    fit = result.prompt_fit
    assert fit is not None and fit["method"] == METHOD_TOKENIZER
    assert fit["exact"] == 0 and fit["min_tokens"] >= 2
    line = prompt_fit_line(fit)
    assert line is not None and "0/8 exact" in line
