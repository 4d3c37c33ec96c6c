"""A synthetic OpenAI-compatible streaming server (aiohttp) for tests and benchmarks.

It streams ``/v1/completions`` and ``/v1/chat/completions`` like vLLM (one SSE
event per token, a usage chunk, ``data: [DONE]``) with a configurable time to
first token and inter-token latency, on an absolute schedule so the timing a
client measures is the timing configured.  Faults can be injected on every
N-th request: HTTP 500, a stream cut mid-response, malformed SSE, an error
event, a slow response (to trigger timeouts), or a complete stream without a
token.  ``fast`` mode streams as fast as the event loop allows (for
client-ceiling benchmarks): bursts of ``FAST_BURST`` events, one write each.

With ``tokenize`` set it serves vLLM's ``POST /tokenize`` with a toy
tokenizer (``fake_token_count``: BOS, one token per word, two for words of
more than six characters), and counts prompt tokens the same way.

It also serves ``/v1/models``, ``/health``, ``/version``, a vLLM-style
``/metrics`` (whose counters follow what it generated) and ``/fake/timings``
(when each streamed request's handler started and its first token was
written, ``time.perf_counter()``).

Run standalone::

    python -m benchgate.testing.fakeserver --port 8199 --ttft-ms 50 --itl-ms 10
    python -m benchgate.testing.fakeserver --port 8199 --fast
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import selectors
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

FAULTS = ("http_500", "cut", "malformed", "error_event", "slow", "no_tokens")


@dataclass
class FakeConfig:
    model: str = "fake"
    version: str = "0.0.0+fake"
    ttft_s: float = 0.05
    itl_s: float = 0.01
    output_len: int | None = None  # None: the request's max_tokens
    default_max_tokens: int = 16
    fast: bool = False  # no delays at all
    fault: str | None = None  # one of FAULTS
    fault_every: int = 1  # the fault hits requests 1*N, 2*N, ... (1 = every request)
    cut_after: int = 3  # tokens streamed before a "cut"
    slow_s: float = 30.0  # delay before the first token of a "slow" request
    spec_decode: bool = False  # expose speculative decoding counters
    metrics_mode: str = "ok"  # "ok", "missing" (404) or "garbled"
    api_key: str | None = None  # require this Bearer token
    tokenize: str | None = None  # None: no /tokenize (404); "ok"; "error" (HTTP 500)


@dataclass
class FakeState:
    requests: int = 0
    running: int = 0
    max_running: int = 0  # the most streams open at once
    peers: set[Any] = field(default_factory=set)  # client (host, port) of every request
    generation_tokens: int = 0
    prompt_tokens: int = 0
    success: int = 0
    ttft_sum: float = 0.0
    ttft_count: int = 0
    tokenize_calls: int = 0
    spec_drafts: int = 0
    spec_accepted_per_pos: list[int] = field(default_factory=lambda: [0, 0, 0])
    # perf_counter() when each streamed request's first token was written (in order).
    first_token_at: list[float] = field(default_factory=list)
    # perf_counter() when the handler of each streamed request started (in order).
    # perf_counter is CLOCK_MONOTONIC on Linux: comparable across processes.
    handler_start_at: list[float] = field(default_factory=list)


SPEC_K = 3
SPEC_ACCEPT = (0.6, 0.3, 0.1)  # share of drafts accepted at each position


class FakeServer:
    """``async with FakeServer(FakeConfig(...)) as srv: srv.base_url``"""

    def __init__(
        self, config: FakeConfig | None = None, host: str = "127.0.0.1", port: int = 0
    ) -> None:
        self.config = config or FakeConfig()
        self.state = FakeState()
        self.host = host
        self.port = port
        self.app = make_app(self)
        self._runner: web.AppRunner | None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def start(self) -> None:
        self._runner = web.AppRunner(
            self.app, access_log=None, handle_signals=False, shutdown_timeout=0.5
        )
        await self._runner.setup()
        # A listen backlog above the default 128: hundreds of clients connect at once.
        site = web.TCPSite(self._runner, self.host, self.port, backlog=1024)
        await site.start()
        self.port = self._runner.addresses[0][1]

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.stop()

    # ------------------------------------------------------------------ metrics

    def metrics_text(self) -> str:
        s = self.state
        labels = f'engine="0",model_name="{self.config.model}"'
        lines = []

        def metric(name: str, kind: str, value: float, extra: str = "") -> None:
            lines.append(f"# HELP {name} fake {name}")
            lines.append(f"# TYPE {name} {kind}")
            sample = f"{name}_total" if kind == "counter" else name
            lbl = labels + ("," + extra if extra else "")
            lines.append(f"{sample}{{{lbl}}} {float(value)}")

        metric("vllm:num_requests_running", "gauge", s.running)
        lines.append("# HELP fake:max_requests_running the most streams open at once")
        lines.append("# TYPE fake:max_requests_running gauge")
        lines.append(f"fake:max_requests_running {float(s.max_running)}")
        metric("vllm:num_requests_waiting", "gauge", 0)
        metric("vllm:kv_cache_usage_perc", "gauge", min(1.0, s.running / 100.0))
        metric("vllm:prompt_tokens", "counter", s.prompt_tokens)
        metric("vllm:generation_tokens", "counter", s.generation_tokens)
        metric("vllm:request_success", "counter", s.success, 'finished_reason="length"')
        lines.append("# HELP vllm:time_to_first_token_seconds fake")
        lines.append("# TYPE vllm:time_to_first_token_seconds histogram")
        lines.append(
            f'vllm:time_to_first_token_seconds_bucket{{{labels},le="+Inf"}} {float(s.ttft_count)}'
        )
        lines.append(f"vllm:time_to_first_token_seconds_count{{{labels}}} {float(s.ttft_count)}")
        lines.append(f"vllm:time_to_first_token_seconds_sum{{{labels}}} {s.ttft_sum}")
        if self.config.spec_decode:
            accepted = sum(s.spec_accepted_per_pos)
            metric("vllm:spec_decode_num_drafts", "counter", s.spec_drafts)
            metric("vllm:spec_decode_num_draft_tokens", "counter", s.spec_drafts * SPEC_K)
            metric("vllm:spec_decode_num_accepted_tokens", "counter", accepted)
            lines.append("# HELP vllm:spec_decode_num_accepted_tokens_per_pos fake")
            lines.append("# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter")
            for pos, value in enumerate(s.spec_accepted_per_pos):
                lines.append(
                    "vllm:spec_decode_num_accepted_tokens_per_pos_total"
                    f'{{{labels},position="{pos}"}} {float(value)}'
                )
        return "\n".join(lines) + "\n"

    def count_tokens(self, n: int) -> None:
        self.state.generation_tokens += n
        if self.config.spec_decode:
            drafts = (n + 1) // 2
            self.state.spec_drafts += drafts
            for pos, share in enumerate(SPEC_ACCEPT):
                self.state.spec_accepted_per_pos[pos] += int(drafts * share)


def _event(obj: Any) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


FAST_BURST = 8  # tokens per write (and per event-loop turn) in fast mode


async def _stream_fast(
    server: FakeServer,
    resp: web.StreamResponse,
    n_out: int,
    plain: bytes,
    last: bytes,
    st: float,
) -> None:
    """Fast mode: the token events in bursts of FAST_BURST, one write per burst.

    Every event is still its own SSE event, as vLLM sends them; only the
    server's own cost shrinks (one write and one send() per burst instead of
    per token), so that a client-ceiling benchmark measures the client and
    not this server.  The server yields to the event loop before each burst.
    """
    for start in range(0, n_out, FAST_BURST):
        await asyncio.sleep(0)
        if start == 0:
            now = time.perf_counter()
            server.state.ttft_sum += now - st
            server.state.ttft_count += 1
            server.state.first_token_at.append(now)
        k = min(FAST_BURST, n_out - start)
        if start + k < n_out:
            await resp.write(plain * k)
        else:
            await resp.write(plain * (k - 1) + last)
    server.count_tokens(n_out)
    server.state.success += 1


def fake_token_count(text: str) -> int:
    """The toy tokenizer of ``/tokenize``: BOS + 1 per word, 2 for words over 6 characters."""
    return 1 + sum(2 if len(word) > 6 else 1 for word in text.split())


def make_app(server: FakeServer) -> web.Application:
    app = web.Application()

    def authorized(request: web.Request) -> bool:
        key = server.config.api_key
        return not key or request.headers.get("Authorization") == f"Bearer {key}"

    async def health(request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def version(request: web.Request) -> web.Response:
        return web.json_response({"version": server.config.version})

    async def models(request: web.Request) -> web.Response:
        if not authorized(request):
            return web.json_response({"error": "unauthorized"}, status=401)
        return web.json_response(
            {
                "object": "list",
                "data": [{"id": server.config.model, "object": "model", "max_model_len": 4096}],
            }
        )

    async def metrics(request: web.Request) -> web.Response:
        mode = server.config.metrics_mode
        if mode == "missing":
            return web.Response(status=404, text="Not Found")
        if mode == "garbled":
            return web.Response(text='vllm:generation_tokens_total{engine="0" 12 oops\n\x00{{{')
        return web.Response(text=server.metrics_text(), content_type="text/plain")

    async def generate(request: web.Request) -> web.StreamResponse:
        cfg = server.config
        st = time.perf_counter()
        if not authorized(request):
            return web.json_response({"error": "unauthorized"}, status=401)
        body = await request.json()
        chat = request.path.endswith("/chat/completions")
        server.state.requests += 1
        nth = server.state.requests
        if request.transport is not None:
            server.state.peers.add(request.transport.get_extra_info("peername"))
        fault = cfg.fault if cfg.fault and nth % max(1, cfg.fault_every) == 0 else None
        if fault == "http_500":
            return web.json_response({"error": "injected fault"}, status=500)
        n_out = cfg.output_len or int(body.get("max_tokens") or cfg.default_max_tokens)
        if chat:
            prompt = " ".join(str(m.get("content", "")) for m in body.get("messages", []))
        else:
            prompt = str(body.get("prompt", ""))
        n_prompt = fake_token_count(prompt) if cfg.tokenize else max(1, len(prompt.split()))
        if not body.get("stream"):
            server.state.prompt_tokens += n_prompt
            server.count_tokens(n_out)
            server.state.success += 1
            text = " tok" * n_out
            choice: dict[str, Any] = (
                {"index": 0, "message": {"role": "assistant", "content": text}}
                if chat
                else {"index": 0, "text": text}
            )
            choice["finish_reason"] = "length"
            return web.json_response(
                {
                    "id": f"fake-{nth}",
                    "model": cfg.model,
                    "choices": [choice],
                    "usage": {"prompt_tokens": n_prompt, "completion_tokens": n_out},
                }
            )
        server.state.handler_start_at.append(st)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        server.state.prompt_tokens += n_prompt
        server.state.running += 1
        server.state.max_running = max(server.state.max_running, server.state.running)
        rid = f"fake-{nth}"
        obj_name = "chat.completion.chunk" if chat else "text_completion"

        def token_chunk(last: bool) -> dict[str, Any]:
            c: dict[str, Any] = (
                {"index": 0, "delta": {"content": " tok"}} if chat else {"index": 0, "text": " tok"}
            )
            c["finish_reason"] = "length" if last else None
            return {"id": rid, "object": obj_name, "model": cfg.model, "choices": [c]}

        plain = _event(token_chunk(False))
        usage = {
            "prompt_tokens": n_prompt,
            "completion_tokens": n_out,
            "total_tokens": n_prompt + n_out,
        }
        usage_event = _event({"id": rid, "object": obj_name, "choices": [], "usage": usage})
        try:
            if chat:
                role = {"index": 0, "delta": {"role": "assistant", "content": ""}}
                await resp.write(_event({"id": rid, "object": obj_name, "choices": [role]}))
            if fault == "no_tokens":
                # A complete stream (usage, [DONE]) that never carried a token.
                await resp.write(usage_event + b"data: [DONE]\n\n")
                await resp.write_eof()
                return resp
            if cfg.fast and fault is None:
                await _stream_fast(server, resp, n_out, plain, _event(token_chunk(True)), st)
                await resp.write(usage_event + b"data: [DONE]\n\n")
                await resp.write_eof()
                return resp
            for i in range(n_out):
                if fault == "slow" and i == 0:
                    await asyncio.sleep(cfg.slow_s)
                if cfg.fast:
                    if i % 8 == 0:
                        await asyncio.sleep(0)
                else:
                    delay = st + cfg.ttft_s + i * cfg.itl_s - time.perf_counter()
                    if delay > 0:
                        await asyncio.sleep(delay)
                if i == 0:
                    server.state.ttft_sum += time.perf_counter() - st
                    server.state.ttft_count += 1
                    first_token_at = time.perf_counter()
                if fault == "cut" and i == cfg.cut_after:
                    server.count_tokens(i)
                    if request.transport is not None:
                        request.transport.close()
                    return resp
                if fault == "malformed" and i == cfg.cut_after:
                    await resp.write(b"data: {this is not json\n\n")
                    continue
                if fault == "error_event" and i == cfg.cut_after:
                    await resp.write(_event({"error": {"message": "injected", "code": 500}}))
                    break
                await resp.write(plain if i < n_out - 1 else _event(token_chunk(True)))
                if i == 0:
                    server.state.first_token_at.append(first_token_at)
            else:
                server.count_tokens(n_out)
                server.state.success += 1
                await resp.write(usage_event)
                await resp.write(b"data: [DONE]\n\n")
            await resp.write_eof()
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            server.state.running -= 1
        return resp

    async def tokenize(request: web.Request) -> web.Response:
        mode = server.config.tokenize
        if mode is None:
            return web.Response(status=404, text="Not Found")
        if not authorized(request):
            return web.json_response({"error": "unauthorized"}, status=401)
        server.state.tokenize_calls += 1
        if mode == "error":
            return web.json_response({"error": "injected tokenizer fault"}, status=500)
        body = await request.json()
        count = fake_token_count(str(body.get("prompt", "")))
        return web.json_response(
            {"count": count, "max_model_len": 4096, "tokens": list(range(count))}
        )

    async def timings(request: web.Request) -> web.Response:
        s = server.state
        return web.json_response(
            {"handler_start": s.handler_start_at, "first_token": s.first_token_at}
        )

    app.router.add_get("/fake/timings", timings)
    app.router.add_get("/health", health)
    app.router.add_get("/version", version)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/metrics", metrics)
    app.router.add_post("/tokenize", tokenize)
    app.router.add_post("/v1/completions", generate)
    app.router.add_post("/v1/chat/completions", generate)
    return app


@contextlib.contextmanager
def serve_in_thread(
    config: FakeConfig | None = None, host: str = "127.0.0.1", port: int = 0
) -> Iterator[FakeServer]:
    """Run a FakeServer on its own event loop in a daemon thread (for sync callers)."""
    loop = asyncio.new_event_loop()
    server = FakeServer(config, host, port)
    started = threading.Event()

    def run() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(server.start())
        started.set()
        loop.run_forever()

    thread = threading.Thread(target=run, name="fakeserver", daemon=True)
    thread.start()
    if not started.wait(10):
        raise RuntimeError("fake server did not start within 10 s")
    try:
        yield server
    finally:
        asyncio.run_coroutine_threadsafe(server.stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8199)
    parser.add_argument("--model", default="fake")
    parser.add_argument("--ttft-ms", type=float, default=50.0)
    parser.add_argument("--itl-ms", type=float, default=10.0)
    parser.add_argument("--output-len", type=int, default=None)
    parser.add_argument("--fast", action="store_true", help="no delays: as fast as possible")
    parser.add_argument("--fault", choices=FAULTS, default=None)
    parser.add_argument("--fault-every", type=int, default=1)
    parser.add_argument("--spec-decode", action="store_true")
    args = parser.parse_args(argv)
    server = FakeServer(
        FakeConfig(
            model=args.model,
            ttft_s=args.ttft_ms / 1000.0,
            itl_s=args.itl_ms / 1000.0,
            output_len=args.output_len,
            fast=args.fast,
            fault=args.fault,
            fault_every=args.fault_every,
            spec_decode=args.spec_decode,
        ),
        host=args.host,
        port=args.port,
    )
    # With delays, a select() loop: its timeouts have microsecond resolution,
    # where epoll rounds every wait up to the next millisecond (which would make
    # the injected TTFT and ITL up to 1 ms late).  Fast mode has no timers.
    loop = None if args.fast else asyncio.SelectorEventLoop(selectors.SelectSelector())
    web.run_app(
        server.app,
        host=args.host,
        port=args.port,
        access_log=None,
        print=None,
        backlog=1024,
        loop=loop,
    )


if __name__ == "__main__":
    main()
