"""Fit synthetic prompts to an exact token count with the served model's tokenizer.

A synthetic workload asks for prompts of ``input_len`` tokens.  The words they
are made of are about one token each, but only the model's tokenizer can say
how many tokens a prompt is.  Before any load is sent, each synthetic prompt is
tokenized by the server under test (vLLM's ``POST /tokenize``) and words are
added or removed until the count is exact.  The count is the one the server
reports as ``prompt_tokens`` for a completions request: special tokens (BOS)
included, as ``vllm bench serve --dataset-name random`` counts its input length.
For the chat API the same text is sent as the user message, so the chat
template adds its tokens on top (as in vLLM's benchmark).

A server without ``/tokenize`` (404/405) keeps the word-count prompts; the
result's ``prompt_fit`` block says which happened, so a comparison can tell.

Target-side code: keep it Python 3.9 compatible.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import aiohttp

from .client import connect_url
from .workload import SYNTHETIC_WORDS, Prompt

TOKENIZE_TIMEOUT_S = 30.0
# /tokenize calls per prompt at most; most prompts need two to four.
MAX_REQUESTS = 16

METHOD_TOKENIZER = "server_tokenizer"
METHOD_WORDS = "words"


class TokenizeError(RuntimeError):
    """``/tokenize`` failed in a way that is not "this server has none"."""


class TokenizeUnsupported(TokenizeError):
    """The server has no ``/tokenize`` endpoint."""


@dataclass
class FitReport:
    """What the ``prompt_fit`` block of a result says."""

    method: str  # server_tokenizer | words
    target_tokens: int
    prompts: int
    exact: int  # prompts whose count is exactly target_tokens
    min_tokens: int | None  # counted by the server; None with method "words"
    max_tokens: int | None
    reason: str | None = None  # why "words" (e.g. "POST /tokenize: HTTP 404")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


async def count_tokens(
    client: aiohttp.ClientSession,
    root_url: str,
    model: str,
    text: str,
    headers: dict[str, str],
) -> int:
    """The server's token count of ``text`` as a completions prompt."""
    url = f"{root_url}/tokenize"
    try:
        async with client.post(
            connect_url(url),
            json={"model": model, "prompt": text},
            headers=headers,
            timeout=aiohttp.ClientTimeout(total=TOKENIZE_TIMEOUT_S),
        ) as resp:
            status = resp.status
            body = await resp.read()
    except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
        raise TokenizeError(f"POST {url}: {type(exc).__name__}: {exc}") from exc
    if status in (404, 405):
        raise TokenizeUnsupported(f"POST {url}: HTTP {status}")
    if status != 200:
        snippet = body[:200].decode("utf-8", "replace")
        raise TokenizeError(f"POST {url}: HTTP {status}: {snippet}")
    try:
        count = json.loads(body)["count"]
    except (ValueError, KeyError, TypeError) as exc:
        raise TokenizeError(f"POST {url}: unexpected answer {body[:200]!r}") from exc
    if isinstance(count, bool) or not isinstance(count, int):
        raise TokenizeError(f"POST {url}: count is not an integer: {count!r}")
    return count


async def fit_prompt(
    client: aiohttp.ClientSession,
    root_url: str,
    model: str,
    prompt: Prompt,
    target: int,
    rng: random.Random,
    headers: dict[str, str],
) -> tuple[Prompt, int]:
    """``prompt`` with words added or removed until it is ``target`` tokens.

    Words are one to three tokens each, so each step drops or adds about as
    many words as tokens are off (scaled by the prompt's tokens per word);
    an overshoot is dropped again and refilled with other (random) words.
    Returns the prompt and its final count, ``!= target`` only when
    ``MAX_REQUESTS`` did not reach it or the target is below BOS + one word.
    """
    words = prompt.text.split()
    count = await count_tokens(client, root_url, model, " ".join(words), headers)
    for _ in range(MAX_REQUESTS - 1):
        missing = target - count
        if missing == 0:
            break
        per_word = max(1.0, count / len(words))
        step = max(1, int(abs(missing) / per_word))
        if missing > 0:
            words.extend(rng.choice(SYNTHETIC_WORDS) for _ in range(step))
        else:
            keep = max(1, len(words) - step)
            if keep == len(words):
                break
            del words[keep:]
        count = await count_tokens(client, root_url, model, " ".join(words), headers)
    return Prompt(text=" ".join(words), approx_tokens=count), count


async def fit_prompts(
    client: aiohttp.ClientSession,
    root_url: str,
    model: str,
    prompts: Sequence[Prompt],
    target: int,
    seed: int,
    api_key: str | None = None,
    parallel: int = 8,
) -> tuple[list[Prompt], FitReport]:
    """Fit every prompt to ``target`` tokens; deterministic for ``seed``.

    The first prompt is fitted alone: a server without ``/tokenize`` answers
    404 once and every prompt is returned unchanged with method ``words``.
    Any other ``/tokenize`` failure raises :class:`TokenizeError`: a prompt
    set that is half fitted would not be the workload that was asked for.
    """
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    if not prompts:
        return [], FitReport(METHOD_TOKENIZER, target, 0, 0, None, None)
    gate = asyncio.Semaphore(max(1, parallel))

    async def one(index: int) -> tuple[Prompt, int]:
        # Words added to prompt i come from their own seeded stream, so the
        # fitted prompts do not depend on the order the answers arrive in.
        rng = random.Random(seed * 1_000_003 + index)
        async with gate:
            return await fit_prompt(client, root_url, model, prompts[index], target, rng, headers)

    try:
        first = await one(0)
    except TokenizeUnsupported as exc:
        report = FitReport(METHOD_WORDS, target, len(prompts), 0, None, None, reason=str(exc))
        return list(prompts), report
    rest = await asyncio.gather(*(one(i) for i in range(1, len(prompts))))
    fitted = [first, *rest]
    counts = [count for _, count in fitted]
    report = FitReport(
        METHOD_TOKENIZER,
        target,
        len(fitted),
        sum(1 for c in counts if c == target),
        min(counts),
        max(counts),
    )
    return [p for p, _ in fitted], report
