"""Issue 20: a long measurement says what it is doing, as log lines in the host's journal."""

from __future__ import annotations

from benchgate.bench import Progress, progress_logger


def test_each_trial_logs_its_figure_and_the_median_so_far() -> None:
    lines: list[str] = []
    on_event = progress_logger("gpu-01 baseline", lines.append)
    on_event(Progress("discover", -1, 0, 1))
    on_event(Progress("warmup", -1, 0, 16))
    on_event(Progress("warmup", -1, 5, 16))  # per-request events are not logged
    on_event(Progress("trial", 0, 0, 32))
    on_event(Progress("trial-done", 0, 1, 3, tokens_per_s=700.0))
    on_event(Progress("trial-done", 1, 2, 3, tokens_per_s=None))
    on_event(Progress("trial-done", 2, 3, 3, tokens_per_s=720.0))
    assert lines == [
        "benchgate gpu-01 baseline: warm-up, 16 requests",
        "benchgate gpu-01 baseline: trial 1/3: 700.0 output tok/s (median so far 700.0)",
        "benchgate gpu-01 baseline: trial 2/3: invalid (median so far 700.0)",
        "benchgate gpu-01 baseline: trial 3/3: 720.0 output tok/s (median so far 710.0)",
    ]
