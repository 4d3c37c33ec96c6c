"""Fault injection at the client and the judge (issue 7), in seconds.

A real server process (benchgate's fake vLLM) is killed (SIGKILL) or hung
(SIGSTOP) in the middle of a benchmark, at a chosen request of a chosen trial;
the judge must then not pass the candidate, and the ledger must hold no PASS.
The same faults against real vLLM during playbooks/upgrade.yml are in
molecule/upgrade_regression/faults.yml; docs/faults.md lists them all.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from benchgate import gate as bg_gate
from benchgate import ledger, rules
from benchgate.bench import Progress, run_benchmark

TRIALS = 5
# Trials of 8 short requests against the fake server vary by several percent
# when the machine is busy: judge with a 25% limit, so the control below
# passes under load. A spoiled trial makes a verdict short of PASS whatever
# the limit (the invalid-trials rule), which is what the fault tests check.
SPECS = rules.make_specs(max_regression_pct=25.0)


def workload(trials: int = TRIALS, timeout_s: float = 10.0) -> dict[str, Any]:
    return {
        "schema": "benchgate.workload/1",
        "name": "faults",
        "version": 1,
        "input_len": 16,
        "output_len": 8,
        "concurrency": 4,
        "num_requests": 8,
        "warmup": 2,
        "trials": trials,
        "max_error_rate": 0.0,
        "timeout_s": timeout_s,
        "prompts": {"source": "synthetic", "seed": 1},
    }


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Server:
    """The fake server as a separate process, so that it can be killed or stopped."""

    def __init__(self) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "benchgate.testing.fakeserver",
                "--port",
                str(self.port),
                "--ttft-ms",
                "20",
                "--itl-ms",
                "2",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=1) as resp:
                    if resp.status == 200:
                        return
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the fake server did not start") from None
                time.sleep(0.1)

    def signal_at(self, sig: int, trial: int, done: int) -> Any:
        """A progress hook that sends ``sig`` once ``done`` requests of ``trial`` finished."""
        sent: list[Progress] = []

        def hook(event: Progress) -> None:
            if not sent and event.phase == "trial" and event.trial == trial and event.done >= done:
                os.kill(self.proc.pid, sig)
                sent.append(event)

        hook.sent = sent  # type: ignore[attr-defined]
        return hook

    def close(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)  # works on a stopped process too
        self.proc.wait(timeout=10)


@pytest.fixture
def server() -> Iterator[Server]:
    srv = Server()
    try:
        yield srv
    finally:
        srv.close()


@pytest.fixture(scope="module")
def baseline() -> Iterator[dict[str, Any]]:
    srv = Server()
    try:
        yield run_benchmark(srv.url, workload()).to_dict()
    finally:
        srv.close()


def test_five_valid_trials_like_the_baseline_pass(baseline: dict[str, Any]):
    """The control: five valid trials are enough to pass, so the verdicts below
    come from the trials the faults spoiled."""
    verdict = rules.judge_results(baseline, baseline, SPECS)
    assert verdict.verdict == rules.PASS, verdict.reasons


def _invalid(result: dict[str, Any]) -> list[int]:
    return [t["index"] for t in result["trials"] if not t["valid"]]


def test_server_killed_mid_benchmark_is_not_passed(
    server: Server, baseline: dict[str, Any], tmp_path: Path
):
    hook = server.signal_at(signal.SIGKILL, trial=1, done=2)
    candidate = run_benchmark(server.url, workload(), progress=hook).to_dict()
    assert hook.sent, "the server was never killed"
    # Trial 0 ran before the kill; trial 1 lost its requests in flight, the
    # later trials every request (connection refused).
    assert _invalid(candidate) == list(range(1, TRIALS))
    verdict = rules.judge_results(baseline, candidate, SPECS)
    assert verdict.verdict == rules.INCONCLUSIVE
    assert "too few valid trials (baseline 5, candidate 1" in verdict.reasons[0]
    assert f"dropped 0 baseline, {TRIALS - 1} candidate" in verdict.reasons[0]

    # Through the gate, as the module judges for playbooks/upgrade.yml: no PASS in the ledger.
    db = tmp_path / "ledger.sqlite"
    judged = bg_gate.run_gate(
        baseline,
        candidate,
        ledger=str(db),
        host="h1",
        release="0.32.0",
        baseline_release="0.31.0",
    )
    assert not judged.verdict.passed
    assert [v.verdict for v in ledger.history(db)] == ["INCONCLUSIVE"]


def test_server_hung_mid_benchmark_is_not_passed(server: Server, baseline: dict[str, Any]):
    # SIGSTOP in the last of 3 trials: the kernel still accepts connections,
    # nothing answers, every request from then on times out after timeout_s
    # (and each /metrics scrape after its own 10 s). Two valid trials are one
    # short of the judge's minimum; a client that counted the hung trial as
    # valid would let the judge decide on three.
    hook = server.signal_at(signal.SIGSTOP, trial=2, done=2)
    started = time.monotonic()
    hung = workload(trials=3, timeout_s=1.0)
    candidate = run_benchmark(server.url, hung, progress=hook).to_dict()
    assert hook.sent, "the server was never stopped"
    assert time.monotonic() - started < 60, "the client waited past its timeouts"
    assert _invalid(candidate) == [2]
    verdict = rules.judge_results(baseline, candidate, SPECS)
    assert verdict.verdict == rules.INCONCLUSIVE
    assert "too few valid trials (baseline 5, candidate 2" in verdict.reasons[0]


def _synthetic(values: list[float], invalid: tuple[int, ...] = ()) -> dict[str, Any]:
    return {
        "trials": [
            {
                "index": i,
                "valid": i not in invalid,
                "metrics": {
                    "output_tokens_per_s": v,
                    "ttft_ms": {"median": 50.0},
                    "tpot_ms": {"median": 10.0},
                },
            }
            for i, v in enumerate(values)
        ]
    }


def test_server_killed_in_its_last_trials_is_not_passed():
    # The first five trials as fast as the baseline, then the crash: requests
    # refused, trials invalid (what test_server_killed_mid_benchmark_is_not_passed
    # sees live when the kill comes early).
    baseline = _synthetic([300.0, 301.0, 299.0, 302.0, 300.0, 298.0, 301.0, 300.0])
    candidate = _synthetic([301.0, 300.0, 302.0, 299.0, 300.0, 0.5, 0.1, 0.1], invalid=(5, 6, 7))
    verdict = rules.judge_results(baseline, candidate, SPECS)
    assert verdict.verdict != rules.PASS, verdict.reasons
