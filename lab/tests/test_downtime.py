"""lab/experiments/downtime.py against the fake server, stopped and restarted to make a real gap."""

from __future__ import annotations

import io
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from _load import load_file
from benchgate.testing.fakeserver import FakeConfig, serve_in_thread

SCRIPT = Path(__file__).resolve().parents[2] / "lab" / "experiments" / "downtime.py"
INTERVAL = 0.05
# Scheduling slack on a busy 2-core machine, on top of one poll interval.
SLACK = 0.35


def load() -> ModuleType:
    return load_file(SCRIPT, "benchgate_downtime", register=True)  # dataclasses


downtime = load()


def wait_for(predicate: Any, timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return
        time.sleep(0.01)
    raise AssertionError("condition not met in time")


def run_with_gap(
    mod: ModuleType, *, completion: bool, down_s: float
) -> tuple[dict[str, Any], float, float]:
    """Monitor in a thread; the server serves, stops for ``down_s``, serves again."""
    with serve_in_thread(FakeConfig(model="tiny")) as srv:
        port = srv.port
        prober = mod.Prober(f"http://127.0.0.1:{port}/health", 1.0, "tiny" if completion else None)
        monitor = mod.Monitor(prober, INTERVAL, log=io.StringIO())
        thread = threading.Thread(target=monitor.run, daemon=True)
        thread.start()
        wait_for(lambda: monitor.polls >= 5)
        assert monitor.failed_polls == 0
        stopping = time.monotonic()
    stopped = time.monotonic()  # the listening socket is closed by now
    time.sleep(down_s)
    with serve_in_thread(FakeConfig(model="tiny"), port=port):
        restarted = time.monotonic()
        polls_up = monitor.polls
        wait_for(lambda: monitor.polls >= polls_up + 5 and monitor._up)
        monitor.stop.set()
        thread.join(10)
    assert not thread.is_alive()
    return monitor.result(), restarted - stopped, restarted - stopping


@pytest.mark.parametrize("completion", [False, True], ids=["health", "completion"])
def test_measured_outage_matches_the_injected_gap(completion: bool) -> None:
    result, shortest, longest = run_with_gap(downtime, completion=completion, down_s=1.0)
    assert result["schema"] == "benchgate.downtime/1"
    assert result["mode"] == ("completion" if completion else "health")
    assert result["url"].endswith("/v1/completions" if completion else "/health")
    assert len(result["outages"]) == 1, result["outages"]
    out = result["outages"][0]
    # Within one poll interval (plus scheduling slack) of the real gap.
    assert shortest - INTERVAL - SLACK <= out["seconds"] <= longest + INTERVAL + SLACK, (
        out,
        shortest,
        longest,
    )
    assert out["max_seconds"] >= out["seconds"]
    assert out["first_error"] == "connection refused"
    assert out["errors"] == {"connection refused": out["polls"]}
    assert out["ongoing"] is False and out["end"] is not None
    assert result["longest_outage_s"] == out["seconds"]
    assert result["longest_outage"] == out
    assert result["up_at_start"] is True and result["up_at_end"] is True
    assert result["failed_polls"] == out["polls"] >= 3
    assert result["polls"] > result["failed_polls"]


def test_http_errors_and_bad_completions_count_as_down() -> None:
    with serve_in_thread(FakeConfig(fault="http_500")) as srv:
        prober = downtime.Prober(f"{srv.base_url}/health", 1.0, model="fake")
        assert prober.probe() == "HTTP 500"
    with serve_in_thread(FakeConfig(api_key="sekret")) as srv:
        assert downtime.Prober(srv.base_url, 1.0, model="fake").probe() == "HTTP 401"
        ok = downtime.Prober(srv.base_url, 1.0, model="fake", api_key="sekret")
        assert ok.probe() is None
        assert downtime.Prober(f"{srv.base_url}/health", 1.0).probe() is None
        assert downtime.Prober(f"{srv.base_url}/nope", 1.0).probe() == "HTTP 404"


def test_a_hanging_server_is_a_timeout() -> None:
    # Listens (the kernel completes the handshake) but never answers.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        port = sock.getsockname()[1]
        started = time.monotonic()
        reason = downtime.Prober(f"http://127.0.0.1:{port}", 0.3, model="fake").probe()
        assert reason == "timeout after 0.3 s"
        assert time.monotonic() - started < 2.0


def test_down_from_the_start_and_still_down_at_the_end(tmp_path: Path) -> None:
    with serve_in_thread(FakeConfig()) as srv:
        port = srv.port
    out = tmp_path / "down.json"
    prober = downtime.Prober(f"http://127.0.0.1:{port}/health", 0.5)
    monitor = downtime.Monitor(prober, INTERVAL, duration=0.5, output=str(out), log=None)
    result = monitor.run()
    assert result["up_at_start"] is False and result["up_at_end"] is False
    assert result["stopped_by"] == "duration"
    (outage,) = result["outages"]
    assert outage["ongoing"] is True and outage["end"] is None
    assert outage["max_seconds"] is None  # never seen up: no upper bound
    assert 0.3 <= outage["seconds"] <= 0.5 + SLACK
    assert json.loads(out.read_text()) == json.loads(json.dumps(result))


def test_cli_stops_on_sigterm_and_writes_the_json(tmp_path: Path) -> None:
    out = tmp_path / "downtime.json"
    pid_file = tmp_path / "downtime.pid"
    with serve_in_thread(FakeConfig(model="tiny")) as srv:
        port = srv.port
        proc = subprocess.Popen(
            [
                sys.executable,
                str(SCRIPT),
                "--completion",
                "--model",
                "tiny",
                "--url",
                f"http://127.0.0.1:{port}",
                "--interval",
                str(INTERVAL),
                "--output",
                str(out),
                "--pid-file",
                str(pid_file),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            wait_for(out.exists, 30)  # written at the first change of state: UP
            stopping = time.monotonic()
        except BaseException:
            proc.kill()
            raise
    stopped = time.monotonic()
    time.sleep(0.8)
    with serve_in_thread(FakeConfig(model="tiny"), port=port):
        restarted = time.monotonic()
        wait_for(lambda: json.loads(out.read_text())["up_at_end"] is True, 30)
        assert int(pid_file.read_text()) == proc.pid
        os.kill(proc.pid, signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=10)
    assert proc.returncode == 0, stderr
    result = json.loads(stdout)
    assert result == json.loads(out.read_text())
    assert result["stopped_by"] == "SIGTERM"
    assert result["url"] == f"http://127.0.0.1:{port}/v1/completions"
    (outage,) = result["outages"]
    # A separate process, which a busy machine may start polling late: looser
    # bounds than above (the in-process tests pin the precision).
    assert restarted - stopped - 0.5 <= outage["seconds"] <= restarted - stopping + 1.0
    assert "DOWN: connection refused" in stderr and "UP again after" in stderr
    assert not pid_file.exists()


def test_completions_url_keeps_host_and_port() -> None:
    assert (
        downtime.completions_url("http://127.0.0.1:8000/health")
        == "http://127.0.0.1:8000/v1/completions"
    )
    assert downtime.completions_url("http://h:1/v1/completions") == "http://h:1/v1/completions"
