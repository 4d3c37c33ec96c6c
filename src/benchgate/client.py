"""Async streaming client for OpenAI-compatible servers (vLLM), on aiohttp.

Each request streams (``stream: true`` with ``include_usage``) and yields a
:class:`RequestRecord`: when it started, time to first token, the gaps
between streamed chunks, end-to-end latency, token counts from the final usage
chunk, or the reason it failed.  Timing follows vLLM's
``vllm/benchmarks/serve.py``: TTFT is the first chunk that carries a choice,
each later chunk adds one inter-token latency, and the end-to-end latency ends
at the last such chunk.  One difference: TTFT and end-to-end latency count
from the moment the request goes to the socket (an aiohttp trace hook), not
from before the client built it, so that the client's own queueing at high
concurrency is not read as the server's latency.

Target-side code: keep it Python 3.9 compatible.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import time
import types
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Callable, cast
from urllib.parse import unquote

import aiohttp

from .workload import Prompt, Workload

# aiohttp >= 3.10: a connect timeout is its own class (a ServerTimeoutError).
_CONNECT_TIMEOUT: type[BaseException] = getattr(aiohttp, "ConnectionTimeoutError", OSError)

# Error reasons (the keys of ``errors_by_reason`` in results).
ERROR_CONNECT = "connect_error"  # refused, reset or closed before a response
ERROR_TIMEOUT = "timeout"  # no data within the timeout, or the request took too long
ERROR_STREAM_CUT = "stream_cut"  # the stream ended before ``data: [DONE]``
ERROR_MALFORMED = "malformed_sse"  # a line that is not SSE, or data that is not JSON
ERROR_SERVER = "server_error"  # the stream carried an error object
ERROR_NO_TOKENS = "no_tokens"  # a complete stream without a single token
ERROR_OTHER = "client_error"


def http_error(status: int) -> str:
    return f"http_{status}"


@dataclass
class RequestRecord:
    index: int
    start_s: float  # seconds since the start of the trial
    # time.perf_counter() just before the request's body went to the socket
    # (before building it, until then): TTFT and e2el count from here.  Not in results.
    sent_at: float = 0.0
    ttft_s: float | None = None
    e2el_s: float | None = None
    itl_s: list[float] = field(default_factory=list)
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    chunks: int = 0  # streamed chunks that carried a token
    usage_reported: bool = False
    error: str | None = None
    detail: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    def fail(self, reason: str, detail: str | None = None) -> None:
        if self.error is None:
            self.error = reason
            self.detail = detail[:300] if detail else detail


@dataclass
class RunOutput:
    records: list[RequestRecord]
    duration_s: float
    started_at: float  # wall clock (epoch seconds)


def endpoint_url(base_url: str, api: str) -> str:
    base = base_url.rstrip("/")
    if base.endswith("/v1"):
        base = base[:-3]
    return f"{base}/v1/chat/completions" if api == "chat" else f"{base}/v1/completions"


# An IPv6 zone in a URL's host, written %25 as RFC 6874 wants it:
# http://[fe80::1%25eth0]:8000/...
_URL_ZONE = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://\[[0-9A-Fa-f:.]+)%25([^\]]+)\]")


def connect_url(url: str) -> str:
    """``url`` as aiohttp opens it: an IPv6 zone ``%25eth0`` becomes ``%eth0``.

    URLs are written as RFC 6874 says (``http://[fe80::1%25eth0]:8000``,
    :func:`benchgate.serve.base_url`), but aiohttp (3.14, yarl 1.25) hands
    the host to the socket as written and ``fe80::1%25eth0`` is no address;
    with the zone unescaped it connects. Every other URL is returned as it is.
    """
    match = _URL_ZONE.match(url)
    if match is None:
        return url
    return f"{match.group(1)}%{unquote(match.group(2))}]{url[match.end() :]}"


def build_payload(workload: Workload, model: str, prompt: Prompt) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "model": model,
        "max_tokens": prompt.max_tokens or workload.output_len,
        "temperature": workload.temperature,
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": workload.ignore_eos,
    }
    if workload.api == "chat":
        payload["messages"] = [{"role": "user", "content": prompt.text}]
    else:
        payload["prompt"] = prompt.text
    return payload


def auth_headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def _chunk_has_token(choice: Any, chat: bool) -> bool:
    if not isinstance(choice, dict):
        return False
    if not chat:
        # Like vLLM's benchmark: every completion chunk with a choice is one
        # step, even when its text is empty (a partial UTF-8 sequence).
        return True
    delta = choice.get("delta")
    if not isinstance(delta, dict):
        return False
    # The first chat chunk carries only the role; it is not a token.
    return bool(
        delta.get("content")
        or delta.get("reasoning_content")
        or delta.get("reasoning")
        or delta.get("tool_calls")
    )


# The C scanner behind json.loads, called directly: (value, end) of the JSON
# value at an index, without json.loads's per-call layers (encoding
# detection, whitespace regexes).  Raises StopIteration or ValueError.
_scan_json: Callable[[str, int], tuple[Any, int]] = cast(Any, json.JSONDecoder()).scan_once


class _Stream:
    """The SSE parser of one response, fed blocks of bytes as they arrive.

    Every event in one block was received at the same moment, so one
    timestamp (taken right after the read returned) serves all of them: that
    is both cheaper and closer to the arrival time than a clock read per event
    after the events before it were parsed.  The first token of a block gets
    the gap since the previous block (or the TTFT), the others an ITL of 0.

    A block is cut at its last event boundary (a blank line) and decoded
    once.  The common event, one ``data: {json}`` line, takes a fast path:
    one JSON scan in place.  Anything else (comments, other fields, CRLF
    line ends, ``[DONE]``, errors) goes through :meth:`_line`, which checks
    every line.
    """

    __slots__ = ("chat", "done", "last", "pending", "rec", "st")

    def __init__(self, rec: RequestRecord, st: float, chat: bool) -> None:
        self.rec = rec
        self.st = st
        self.last = st
        self.chat = chat
        self.done = False
        self.pending = b""

    def feed(self, block: bytes, now: float) -> bool:
        """Parse the complete events in ``block``; False when the request failed."""
        if self.done:
            return True  # nothing counts after [DONE]; the body is read to its end
        if self.pending:
            block = self.pending + block
        crlf = b"\r" in block
        cut = block.rfind(b"\n") if crlf else block.rfind(b"\n\n")
        if cut < 0:
            self.pending = block
            return True
        self.pending = block[cut + 1 :] if crlf else block[cut + 2 :]
        try:
            text = block[:cut].decode("utf-8")
        except UnicodeDecodeError as exc:
            self.rec.fail(ERROR_MALFORMED, f"not UTF-8: {exc}")
            return False
        if crlf:
            return self._lines(text.split("\n"), now)
        chat = self.chat
        scan = _scan_json
        tokens = 0
        for event in text.split("\n\n"):
            if event.startswith("data: "):
                try:
                    obj, end = scan(event, 6)
                except (StopIteration, ValueError):
                    end = -1
                if end == len(event) and type(obj) is dict:
                    choices = obj.get("choices")
                    if choices:
                        if type(choices) is list and (
                            not chat or _chunk_has_token(choices[0], chat)
                        ):
                            tokens += 1
                        usage = obj.get("usage")
                        if usage:
                            self._usage(usage)
                        continue
                    if "error" not in obj:
                        usage = obj.get("usage")
                        if usage:
                            self._usage(usage)
                        continue
            # Not the common shape: line by line, with the tokens so far recorded first.
            if tokens:
                self._tokens(tokens, now)
                tokens = 0
            if not self._lines(event.split("\n"), now):
                return False
            if self.done:
                return True
        if tokens:
            self._tokens(tokens, now)
        return True

    def _tokens(self, k: int, now: float) -> None:
        """Record ``k`` token chunks that arrived at ``now``."""
        rec = self.rec
        if rec.chunks:
            rec.itl_s.append(now - self.last)
        else:
            rec.ttft_s = now - self.st
        if k > 1:
            rec.itl_s.extend([0.0] * (k - 1))
        self.last = now
        rec.chunks += k

    def _usage(self, usage: Any) -> None:
        if type(usage) is dict:
            rec = self.rec
            if isinstance(usage.get("completion_tokens"), int):
                rec.output_tokens = usage["completion_tokens"]
                rec.usage_reported = True
            if isinstance(usage.get("prompt_tokens"), int):
                rec.prompt_tokens = usage["prompt_tokens"]

    def _lines(self, lines: list[str], now: float) -> bool:
        """The general path: every line checked; False when the request failed."""
        rec = self.rec
        for line in lines:
            if self.done:
                return True
            if line.startswith("data:"):
                data = line[5:].strip()
                if data == "[DONE]":
                    self.done = True
                    continue
                try:
                    obj = json.loads(data)
                except ValueError:
                    rec.fail(ERROR_MALFORMED, f"data is not JSON: {data[:80]!r}")
                    return False
                if type(obj) is not dict:
                    rec.fail(ERROR_MALFORMED, f"data is not an object: {data[:80]!r}")
                    return False
                choices = obj.get("choices")
                if choices:
                    if type(choices) is list and _chunk_has_token(choices[0], self.chat):
                        self._tokens(1, now)
                elif "error" in obj:
                    rec.fail(ERROR_SERVER, json.dumps(obj["error"])[:300])
                    return False
                self._usage(obj.get("usage"))
            elif not line or line[0] in ":\r":
                continue  # blank separator or SSE comment (ping)
            elif line.split(":", 1)[0].strip() not in ("event", "id", "retry"):
                rec.fail(ERROR_MALFORMED, f"not an SSE line: {line[:80]!r}")
                return False
        return True

    def finish(self) -> None:
        """The body ended: classify what arrived."""
        rec = self.rec
        if not self.done and self.pending.strip() in (b"data: [DONE]", b"data:[DONE]"):
            self.done = True  # the last line lacked its newline
        if not self.done:
            rec.fail(ERROR_STREAM_CUT, "stream ended without data: [DONE]")
        elif rec.chunks == 0:
            rec.fail(ERROR_NO_TOKENS, "stream completed without a token")
        else:
            rec.e2el_s = self.last - self.st
            if rec.output_tokens is None:
                rec.output_tokens = rec.chunks


async def _stream_into(
    client: aiohttp.ClientSession,
    url: str,
    payload: dict[str, Any],
    headers: dict[str, str],
    rec: RequestRecord,
) -> None:
    got_response = False
    body = json.dumps(payload).encode()
    hdrs = {"Content-Type": "application/json"}
    hdrs.update(headers)
    try:
        # _on_body_sent sets rec.sent_at as the body goes to the socket.
        async with client.post(
            connect_url(url), data=body, headers=hdrs, trace_request_ctx={"record": rec}
        ) as resp:
            got_response = True
            if resp.status != 200:
                text = await resp.read()
                rec.fail(http_error(resp.status), text.decode("utf-8", "replace"))
                return
            parser = _Stream(rec, rec.sent_at, "messages" in payload)
            content = resp.content
            clock = time.perf_counter
            # Read to the end of the body (not just to [DONE]): a fully read
            # response puts its connection back into the pool.  readany()
            # returns everything buffered so far, so a burst of events costs
            # one read and one split.
            while True:
                block = await content.readany()
                if not block:
                    break
                if not parser.feed(block, clock()):
                    return
            parser.finish()
    except aiohttp.ServerTimeoutError as exc:
        # aiohttp >= 3.10 tells a connect timeout from a read timeout.
        if isinstance(exc, _CONNECT_TIMEOUT):
            rec.fail(ERROR_CONNECT, f"connect timeout: {exc}")
        else:
            rec.fail(ERROR_TIMEOUT, f"{type(exc).__name__}: no data within the read timeout")
    except aiohttp.ClientConnectorError as exc:
        rec.fail(ERROR_CONNECT, str(exc))
    except (
        aiohttp.ClientPayloadError,
        aiohttp.ServerDisconnectedError,
        aiohttp.ClientOSError,
    ) as exc:
        reason = ERROR_STREAM_CUT if got_response else ERROR_CONNECT
        rec.fail(reason, f"{type(exc).__name__}: {exc}")
    except aiohttp.ClientError as exc:
        rec.fail(ERROR_OTHER, f"{type(exc).__name__}: {exc}")


async def send_request(
    client: aiohttp.ClientSession,
    url: str,
    payload: dict[str, Any],
    headers: dict[str, str],
    index: int = 0,
    t0: float | None = None,
    timeout_s: float | None = None,
) -> RequestRecord:
    """Send one streaming request; never raises for network or protocol errors."""
    st = time.perf_counter()
    rec = RequestRecord(index=index, start_s=st - (t0 if t0 is not None else st), sent_at=st)
    coro = _stream_into(client, url, payload, headers, rec)
    try:
        if timeout_s is None:
            await coro
        else:
            await asyncio.wait_for(coro, timeout_s)
    except asyncio.TimeoutError:
        rec.fail(ERROR_TIMEOUT, f"request took longer than {timeout_s:g} s")
    if not rec.ok:
        rec.e2el_s = None
    return rec


async def _on_body_sent(
    session: aiohttp.ClientSession,
    ctx: types.SimpleNamespace,
    params: aiohttp.TraceRequestChunkSentParams,
) -> None:
    """aiohttp calls this just before it hands a body chunk to the socket.

    TTFT and end-to-end latency count from here, not from before the
    request was built: what the client spends building the request and
    waiting for its event loop (at high concurrency, the other requests sent
    in the same step) is the client's time, not the server's.  (vLLM's
    benchmark counts it.)  The body is one chunk; the last one counts.
    """
    record = (ctx.trace_request_ctx or {}).get("record")
    if record is not None:
        record.sent_at = time.perf_counter()


def make_client(
    concurrency: int, timeout_s: float, connect_timeout_s: float = 10.0
) -> aiohttp.ClientSession:
    """One client per benchmark: its connection pool is warmed by the warm-up.

    Call it inside the event loop that uses it.  ``timeout_s`` bounds the
    wait for each read (no data for that long is a timeout) and the connect
    (at most ``connect_timeout_s``); :func:`send_request` bounds the whole
    request.
    """
    connector = aiohttp.TCPConnector(limit=concurrency, limit_per_host=0)
    sent = aiohttp.TraceConfig()
    sent.on_request_chunk_sent.append(_on_body_sent)
    timeout = aiohttp.ClientTimeout(
        total=None,
        connect=None,
        sock_connect=min(connect_timeout_s, timeout_s),
        sock_read=timeout_s,
    )
    # identity and no decompression layer: the stream is parsed as it arrives.
    return aiohttp.ClientSession(
        connector=connector,
        timeout=timeout,
        headers={"Accept-Encoding": "identity"},
        auto_decompress=False,
        trust_env=False,
        trace_configs=[sent],
    )


class FetchError(Exception):
    """A GET that got no HTTP answer (refused, timed out, cut)."""


async def fetch(
    client: aiohttp.ClientSession,
    url: str,
    headers: dict[str, str] | None = None,
    timeout_s: float = 10.0,
) -> tuple[int, str]:
    """GET ``url``: (status, body text).  Raises :class:`FetchError`."""
    try:
        async with client.get(
            connect_url(url), headers=headers, timeout=aiohttp.ClientTimeout(total=timeout_s)
        ) as resp:
            body = await resp.read()
            return resp.status, body.decode("utf-8", "replace")
    except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
        raise FetchError(f"{type(exc).__name__}: {exc}") from exc


def arrival_offsets(n: int, rate: float | None, burstiness: float, seed: int) -> list[float]:
    """Seconds after the start at which each request is sent.

    ``rate`` None: all at once (the concurrency limit paces them).  Otherwise
    gamma-distributed gaps with shape ``burstiness`` and mean ``1/rate``
    (burstiness 1 = Poisson process), as in vLLM's benchmark.
    """
    if rate is None:
        return [0.0] * n
    rng = random.Random(seed)
    theta = 1.0 / (rate * burstiness)
    t = 0.0
    offsets = []
    for _ in range(n):
        offsets.append(t)
        t += rng.gammavariate(burstiness, theta)
    return offsets


async def run_requests(
    client: aiohttp.ClientSession,
    base_url: str,
    model: str,
    workload: Workload,
    prompts: Sequence[Prompt],
    api_key: str | None = None,
    on_done: Callable[[RequestRecord], None] | None = None,
    seed: int = 0,
) -> RunOutput:
    """Send one request per prompt with the workload's concurrency (and rate)."""
    url = endpoint_url(base_url, workload.api)
    headers = auth_headers(api_key)
    n = len(prompts)
    records: list[RequestRecord | None] = [None] * n
    t0 = time.perf_counter()
    started_at = time.time()

    async def one(i: int) -> None:
        rec = await send_request(
            client,
            url,
            build_payload(workload, model, prompts[i]),
            headers,
            index=i,
            t0=t0,
            timeout_s=workload.timeout_s,
        )
        records[i] = rec
        if on_done is not None:
            on_done(rec)

    if workload.request_rate is None:
        queue = iter(range(n))

        async def worker() -> None:
            for i in queue:
                await one(i)

        await asyncio.gather(*(worker() for _ in range(min(workload.concurrency, n))))
    else:
        offsets = arrival_offsets(n, workload.request_rate, workload.burstiness, seed)
        sem = asyncio.Semaphore(workload.concurrency)

        async def scheduled(i: int) -> None:
            delay = t0 + offsets[i] - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            async with sem:
                await one(i)

        await asyncio.gather(*(scheduled(i) for i in range(n)))
    duration = time.perf_counter() - t0
    return RunOutput(
        records=[r for r in records if r is not None], duration_s=duration, started_at=started_at
    )
