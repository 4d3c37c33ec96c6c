#!/usr/bin/env python3
"""Measure how long a vLLM service is unavailable (during an upgrade or a rollback).

Polls a URL every ``--interval`` seconds (default 0.2) with a short timeout
until Ctrl-C / SIGTERM or ``--duration`` and records every outage window: a
run of failed polls between two successful ones (or the start / end of the
measurement).

* health mode (default): ``GET --url`` (``http://127.0.0.1:8000/health``) must
  answer 2xx;
* ``--completion``: ``POST <scheme://host:port>/v1/completions`` with a
  1-token request for ``--model`` must answer 2xx with a JSON body that holds
  ``choices``: the service really serves, not only listens.

An outage's ``seconds`` run from the moment the first failed poll was sent to
the moment the first successful poll after it was answered; ``max_seconds``
from the last successful poll before it (answered) to that same moment: the
service was unavailable for at least about ``seconds - interval`` and at most
``max_seconds``. Each outage keeps the first error (``connection refused``,
``timeout after 1 s``, ``HTTP 503``, ...) and a count per error.

The result (``benchgate.downtime/1`` JSON) is printed at the end and, with
``--output``, written there after every change of state and at the end, so a
killed monitor still leaves what it saw. Standard library only: copy the file
to a host (``python3`` 3.9+) and run it there::

    python3 downtime.py --completion --model tiny --output /root/downtime.json
    python3 downtime.py --url http://127.0.0.1:8000/health --duration 600
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

SCHEMA = "benchgate.downtime/1"
DEFAULT_URL = "http://127.0.0.1:8000/health"


def iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, timezone.utc).isoformat(timespec="milliseconds")


def completions_url(url: str) -> str:
    """``scheme://host:port/v1/completions`` of any URL on the server."""
    parts = urllib.parse.urlsplit(url)
    if parts.path.rstrip("/").endswith("/v1/completions"):
        return url
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, "/v1/completions", "", ""))


def _reason(exc: BaseException, timeout: float) -> str:
    """A short, stable description of why a poll failed."""
    if isinstance(exc, urllib.error.HTTPError):
        return f"HTTP {exc.code}"
    if isinstance(exc, urllib.error.URLError):
        exc = exc.reason if isinstance(exc.reason, BaseException) else exc
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return f"timeout after {timeout:g} s"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, ConnectionResetError):
        return "connection reset"
    if isinstance(exc, (ConnectionError, OSError)) and getattr(exc, "strerror", None):
        return str(exc.strerror).lower()
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"[:200]


@dataclass
class Prober:
    """One poll: ``probe()`` returns None when the service answered, else the reason."""

    url: str
    timeout: float
    model: str | None = None  # set: completion mode
    api_key: str | None = None
    _opener: urllib.request.OpenerDirector = field(init=False, repr=False)

    def __post_init__(self) -> None:
        # Never through a proxy: the service is local to this host.
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    @property
    def target(self) -> str:
        return completions_url(self.url) if self.model else self.url

    def _request(self) -> urllib.request.Request:
        headers = {"User-Agent": "benchgate-downtime", "Connection": "close"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        if not self.model:
            return urllib.request.Request(self.url, headers=headers, method="GET")
        body = {
            "model": self.model,
            "prompt": "Hello",
            "max_tokens": 1,
            "temperature": 0.0,
            "stream": False,
        }
        headers["Content-Type"] = "application/json"
        return urllib.request.Request(
            self.target, data=json.dumps(body).encode(), headers=headers, method="POST"
        )

    def probe(self) -> str | None:
        try:
            with self._opener.open(self._request(), timeout=self.timeout) as resp:
                data = resp.read()
                status = resp.status
        except Exception as exc:  # every failure is an answer: the service is not serving
            return _reason(exc, self.timeout)
        if not 200 <= status < 300:
            return f"HTTP {status}"
        if self.model:
            try:
                body = json.loads(data)
            except ValueError:
                return "completion: not JSON"
            if not isinstance(body, dict) or not body.get("choices"):
                return "completion: no choices"
        return None


@dataclass
class Outage:
    start: float  # epoch: the first failed poll was sent
    start_s: float  # seconds since the monitor started
    first_error: str
    after_ok: float | None  # epoch: the last successful poll before it was answered
    polls: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    end: float | None = None  # epoch: the first successful poll after it was answered
    end_s: float | None = None

    def to_dict(self, now: float) -> dict[str, Any]:
        end = self.end if self.end is not None else now
        return {
            "start": iso(self.start),
            "end": iso(self.end) if self.end is not None else None,
            "start_s": round(self.start_s, 3),
            "end_s": round(self.end_s, 3) if self.end_s is not None else None,
            "seconds": round(end - self.start, 3),
            "max_seconds": round(end - self.after_ok, 3) if self.after_ok is not None else None,
            "ongoing": self.end is None,
            "polls": self.polls,
            "first_error": self.first_error,
            "errors": dict(self.errors),
        }


@dataclass
class Monitor:
    """The poll loop and what it saw."""

    prober: Prober
    interval: float
    duration: float | None = None
    output: str | None = None
    log: Any = sys.stderr
    stop: threading.Event = field(default_factory=threading.Event)
    # Set by a signal handler, which must not take the Event's lock: the main
    # thread may hold it (inside stop.wait) when the signal arrives, and the
    # handler would then wait on it forever.
    signalled: bool = False
    stopped_by: str = "duration"
    polls: int = 0
    failed_polls: int = 0
    outages: list[Outage] = field(default_factory=list)
    started: float = 0.0
    _t0: float = 0.0  # monotonic start
    _last_ok: float | None = None  # epoch of the last successful answer
    _up: bool | None = None
    up_at_start: bool | None = None

    def _now(self) -> tuple[float, float]:
        """(epoch, seconds since start) from one monotonic reading."""
        mono = time.monotonic()
        return self.started + (mono - self._t0), mono - self._t0

    def _say(self, text: str) -> None:
        if self.log is not None:
            stamp = datetime.now(timezone.utc).strftime("%H:%M:%S.%f")[:-3]
            print(f"{stamp} {text}", file=self.log, flush=True)

    def result(self) -> dict[str, Any]:
        now, elapsed = self._now()
        outages = [o.to_dict(now) for o in self.outages]
        longest = max(outages, key=lambda o: o["seconds"], default=None)
        return {
            "schema": SCHEMA,
            "url": self.prober.target,
            "mode": "completion" if self.prober.model else "health",
            "model": self.prober.model,
            "interval_s": self.interval,
            "timeout_s": self.prober.timeout,
            "started_at": iso(self.started),
            "ended_at": iso(now),
            "duration_s": round(elapsed, 3),
            "stopped_by": self.stopped_by,
            "polls": self.polls,
            "failed_polls": self.failed_polls,
            "up_at_start": self.up_at_start,
            "up_at_end": self._up,
            "outages": outages,
            "longest_outage_s": longest["seconds"] if longest else 0.0,
            "longest_outage": longest,
            "total_outage_s": round(sum(o["seconds"] for o in outages), 3),
        }

    def write(self, result: dict[str, Any] | None = None) -> None:
        if not self.output:
            return
        tmp = f"{self.output}.tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(result if result is not None else self.result(), fh, indent=2)
            fh.write("\n")
        os.replace(tmp, self.output)

    def poll_once(self) -> None:
        sent, sent_s = self._now()
        error = self.prober.probe()
        answered, answered_s = self._now()
        self.polls += 1
        if error is None:
            if self._up is False and self.outages:
                out = self.outages[-1]
                out.end, out.end_s = answered, answered_s
                self._say(f"UP again after {answered - out.start:.2f} s ({out.polls} failed polls)")
            elif self._up is None:
                self._say(f"UP: {self.prober.target} answers")
            changed = self._up is not True
            self._up, self._last_ok = True, answered
        else:
            self.failed_polls += 1
            changed = self._up is not False
            if changed:
                self.outages.append(Outage(sent, sent_s, error, self._last_ok))
                self._say(f"DOWN: {error}")
            out = self.outages[-1]
            out.polls += 1
            out.errors[error] = out.errors.get(error, 0) + 1
            self._up = False
        if self.up_at_start is None:
            self.up_at_start = self._up
        if changed:
            self.write()

    def run(self) -> dict[str, Any]:
        self.started, self._t0 = time.time(), time.monotonic()
        next_at = self._t0
        while not (self.signalled or self.stop.is_set()):
            if self.duration is not None and time.monotonic() - self._t0 >= self.duration:
                break
            self.poll_once()
            next_at = max(next_at + self.interval, time.monotonic())
            wait = next_at - time.monotonic()
            if self.duration is not None:
                wait = min(wait, self._t0 + self.duration - time.monotonic())
            if wait > 0:
                self.stop.wait(wait)
        result = self.result()
        self.write(result)
        return result


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", default=DEFAULT_URL, help=f"what to poll (default: {DEFAULT_URL})")
    p.add_argument(
        "--completion",
        action="store_true",
        help="POST a 1-token /v1/completions on the --url's server instead of a GET",
    )
    p.add_argument("--model", help="model name for --completion (the served model name)")
    p.add_argument("--api-key-file", help="file holding the API key (sent as a Bearer token)")
    p.add_argument("--interval", type=float, default=0.2, help="seconds between polls (0.2)")
    p.add_argument(
        "--timeout", type=float, help="seconds per poll (default: 1 for health, 5 for completion)"
    )
    p.add_argument("--duration", type=float, help="stop after this many seconds (default: never)")
    p.add_argument("--output", "-o", help="write the JSON here (also after every change)")
    p.add_argument("--pid-file", help="write this process's pid here (to stop it with SIGTERM)")
    p.add_argument("--quiet", "-q", action="store_true", help="no UP/DOWN lines on stderr")
    args = p.parse_args(argv)
    if args.completion and not args.model:
        p.error("--completion needs --model (the served model name)")
    if args.interval <= 0:
        p.error("--interval must be positive")
    if args.timeout is not None and args.timeout <= 0:
        p.error("--timeout must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    api_key = None
    if args.api_key_file:
        with open(args.api_key_file, encoding="utf-8") as fh:
            api_key = fh.read().strip() or None
    timeout = args.timeout if args.timeout is not None else (5.0 if args.completion else 1.0)
    prober = Prober(args.url, timeout, args.model if args.completion else None, api_key)
    monitor = Monitor(
        prober,
        args.interval,
        args.duration,
        args.output,
        None if args.quiet else sys.stderr,
    )

    def on_signal(signum: int, _frame: Any) -> None:
        # No monitor.stop.set() here (see Monitor.signalled): the loop sees the
        # flag within one --interval.
        monitor.stopped_by = signal.Signals(signum).name
        monitor.signalled = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    if args.pid_file:
        with open(args.pid_file, "w", encoding="utf-8") as fh:
            fh.write(f"{os.getpid()}\n")
    try:
        result = monitor.run()
    finally:
        if args.pid_file:
            with contextlib.suppress(OSError):
                os.unlink(args.pid_file)
    print(json.dumps(result, indent=2))
    longest = result["longest_outage_s"]
    monitor._say(
        f"{result['polls']} polls, {len(result['outages'])} outage(s), longest {longest:.2f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
