"""``benchgate bench``: measure a running server with a workload, print and save the result.

Exit status: 0 every trial valid, 1 could not run (unreachable server, bad
workload or figures), 2 ran, but at least one trial is invalid.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from .numfmt import MISSING, number

EXIT_OK = 0
EXIT_ERROR = 1  # could not run (unreachable server, bad workload)
EXIT_INVALID = 2  # ran, but at least one trial is invalid


def register(subparsers: Any) -> None:
    """Add ``bench`` to an ``add_subparsers()`` object (sets ``_run`` and ``command_name``)."""
    help_text = "benchmark a running server with a workload, print and save the result"
    p = subparsers.add_parser("bench", help=help_text, description=help_text)
    p.add_argument("--base-url", required=True, help="server URL, e.g. http://127.0.0.1:8000")
    p.add_argument(
        "--workload", required=True, help="workload file, or a name looked up in workloads/"
    )
    p.add_argument("--model", help="model name to request (default: first of GET /v1/models)")
    p.add_argument("--concurrency", type=int, help="override: requests in flight")
    p.add_argument("--num-requests", type=int, help="override: requests per trial")
    p.add_argument("--trials", type=int, help="override: number of trials")
    p.add_argument("--input-len", type=int, help="override: approximate prompt tokens")
    p.add_argument("--output-len", type=int, help="override: output tokens (max_tokens)")
    p.add_argument("--warmup", type=int, help="override: warm-up requests")
    p.add_argument("--request-rate", type=float, help="override: requests/s (Poisson)")
    p.add_argument("--timeout", type=float, help="override: per-request timeout in seconds")
    p.add_argument(
        "--api-key-file", type=Path, help="file holding the API key (sent as a Bearer token)"
    )
    p.add_argument("--output", "-o", type=Path, help="write the result JSON here")
    p.add_argument("--no-requests", action="store_true", help="leave per-request records out")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bar, no table")
    slo = p.add_argument_group("goodput (override the workload's slo: per-request objectives)")
    slo.add_argument("--slo-ttft-ms", type=float, help="TTFT objective in ms")
    slo.add_argument("--slo-tpot-ms", type=float, help="TPOT objective in ms")
    slo.add_argument("--slo-e2el-ms", type=float, help="end-to-end latency objective in ms")
    host = p.add_argument_group("host figures (roofline, service memory, cold start)")
    host.add_argument("--model-dir", help="served model folder (safetensors) for the roofline")
    host.add_argument(
        "--tensor-parallel-size", "--tp", type=int, default=1, help="server's TP size (1)"
    )
    host.add_argument(
        "--bandwidth-gbs",
        type=float,
        help="GPU memory bandwidth in GB/s (default: nvidia-smi's GPU in the datasheet table)",
    )
    host.add_argument(
        "--calibration",
        type=Path,
        help="take the bandwidth from a calibration JSON (bandwidth_gbs.read_gbs)",
    )
    host.add_argument("--service-unit", help="server's systemd unit, e.g. vllm.service")
    host.add_argument("--service-pid", type=int, help="server's main pid (instead of the unit)")
    host.add_argument(
        "--cold-start-file",
        help="readiness record (default /run/benchgate/<unit>.ready.json)",
    )
    p.set_defaults(_run=run, command_name="bench")


def summary_rows(result: Any, summary: Any = None) -> list[tuple[str, str, str, str]]:
    """(metric, per-trial values, median, better) rows for the summary table
    (of ``summary``, a stage's, when given; else the result's)."""
    rows = []
    for name, metric in (summary or result.summary).metrics.items():
        per_trial = " ".join(number(v, 2 if abs(v) < 10 else 1) for v in metric.samples)
        median = metric.median
        rows.append(
            (
                name,
                per_trial,
                number(median, 2 if median is not None and abs(median) < 10 else 1),
                metric.better,
            )
        )
    return rows


def _mib(value: float | None) -> str:
    return number(None if value is None else value / 2**20, 0, " MiB")


def prompt_fit_line(fit: dict[str, Any] | None) -> str | None:
    """How synthetic prompts were sized, in one line; None for other prompt sources."""
    if not fit:
        return None
    if fit.get("method") == "server_tokenizer":
        spread = (
            ""
            if fit["min_tokens"] == fit["max_tokens"]
            else f", {fit['min_tokens']}-{fit['max_tokens']} tokens"
        )
        return (
            f"prompts: fitted to {fit['target_tokens']} tokens by the server's tokenizer "
            f"({fit['exact']}/{fit['prompts']} exact{spread})"
        )
    return (
        f"prompts: about {fit['target_tokens']} tokens each (one word per token; "
        f"not fitted: {fit.get('reason')})"
    )


def host_lines(result: Any) -> list[str]:
    """One line each for the roofline, the service memory and the cold start."""
    lines = []
    roof = result.roofline
    if roof is not None:
        if roof.get("decode_bound_tokens_per_s") is not None:
            eff = roof.get("efficiency_pct")
            measured = (
                f"measured {number(roof['measured_tokens_per_s'])} tok/s per stream "
                f"(1000/TPOT median, concurrency {roof.get('concurrency')}) = "
                f"{number(eff)}% of it"
                if eff is not None
                else str(roof.get("reason"))
            )
            lines.append(
                f"roofline: {number(roof['weight_bytes'] / 1e9, 2)} GB of weights / TP "
                f"{roof['tensor_parallel_size']} at {number(roof['bandwidth_gbs'], 0)} GB/s "
                f"({roof['bandwidth_source']}) -> at most "
                f"{number(roof['decode_bound_tokens_per_s'])} tok/s single-stream; {measured}"
            )
        else:
            lines.append(f"roofline: not available: {roof.get('reason')}")
    mem = result.service_memory
    if mem is not None:
        if mem.get("available"):
            parts = []
            for label in ("before", "after"):
                sample = mem.get(label) or {}
                text = (
                    f"{label} RSS {_mib(sample.get('rss_bytes'))} "
                    f"({sample.get('pids', 0)} processes)"
                )
                if sample.get("cgroup_memory_current_bytes") is not None:
                    text += f", cgroup {_mib(sample['cgroup_memory_current_bytes'])}"
                gpus = sample.get("gpus")
                if gpus:
                    used = sum(g["memory_used_mib"] for g in gpus)
                    total = sum(g["memory_total_mib"] for g in gpus)
                    text += f", GPU {number(used, 0)}/{number(total, 0)} MiB"
                parts.append(text)
            lines.append(f"service memory (pid {mem.get('pid')}): " + "; ".join(parts))
            if mem.get("gpu_reason"):
                lines.append(f"GPU memory: not available: {mem['gpu_reason']}")
        else:
            lines.append(f"service memory: not available: {mem.get('reason')}")
    cold = result.cold_start
    if cold is not None:
        if cold.get("available"):
            bound = " (upper bound: already up at the first poll)" if cold["upper_bound"] else ""
            lines.append(
                f"cold start: /health 200 after {number(cold['healthy_s'], 1)} s, first "
                f"completion after {number(cold['first_completion_s'], 1)} s{bound}"
            )
        else:
            lines.append(f"cold start: not available: {cold.get('reason')}")
    return lines


def _print_result(result: Any, console: Any) -> None:
    from rich.table import Table

    wl = result.workload
    tgt = result.target
    console.print(
        f"[bold]{tgt.base_url}[/] model [bold]{tgt.model}[/] "
        f"vLLM {tgt.server_version or '?'} | workload [bold]{wl.name}[/] v{wl.version} "
        f"({wl.hash[:12]})"
    )
    trials = Table(title="Trials")
    staged = bool(result.stages)
    cols = ["#", "ok", "req", "fail", "dur s", "tok/s", "srv tok/s", "diff%", "TTFT", "TPOT"]
    if staged:
        cols.insert(1, "stage")
    has_slo = any(t.metrics is not None and t.metrics.goodput is not None for t in result.trials)
    if has_slo:
        cols += ["SLO met", "goodput"]
    for col in cols:
        trials.add_column(col, justify="right")
    for t in result.trials:
        m = t.metrics
        a = t.agreement
        extra = []
        if has_slo:
            extra = [
                str(m.slo_met) if m and m.slo_met is not None else MISSING,
                number(m.goodput if m else None, 2),
            ]
        trials.add_row(
            str(t.index),
            *([t.stage or "-"] if staged else []),
            "yes" if t.valid else "[red]NO[/]",
            str(t.num_requests),
            str(t.failed),
            number(t.duration_s, 2),
            number(m.output_tokens_per_s if m else None),
            number(a.server_generation_tokens_per_s if a else None),
            number(a.tokens_per_s_diff_pct if a else None, 2),
            number(m.ttft_ms.median if m and m.ttft_ms else None, 1),
            number(m.tpot_ms.median if m and m.tpot_ms else None, 2),
            *extra,
        )
    console.print(trials)
    console.print("TTFT, TPOT: medians in ms; diff%: client tok/s vs the server's counter")
    fit_line = prompt_fit_line(result.prompt_fit)
    if fit_line:
        console.print(fit_line)
    if has_slo:
        objectives = (result.workload.params.get("slo") or {}).items()
        slo = ", ".join(f"{k} <= {v:g}" for k, v in objectives)
        console.print(f"goodput: requests/s meeting every SLO ({slo})")
    for t in result.trials:
        if not t.valid:
            console.print(f"[red]trial {t.index} invalid[/]: {t.invalid_reason}")
    from .table import load_words

    # A staged result has one summary per stage: the stages' figures together mean nothing.
    summaries = (
        [
            (
                f"Stage {stage.name} ({load_words(stage.params)}): summary over "
                f"{stage.summary.valid_trials} valid trial(s)",
                stage.summary,
            )
            for stage in result.stages
        ]
        if staged
        else [(f"Summary over {result.summary.valid_trials} valid trial(s)", result.summary)]
    )
    for title, summary in summaries:
        table = Table(title=title)
        table.add_column("metric")
        table.add_column("per trial", justify="right")
        table.add_column("median", justify="right")
        table.add_column("better")
        for row in summary_rows(result, summary):
            table.add_row(*row)
        console.print(table)
    for line in host_lines(result):
        console.print(line, highlight=False, markup=False)
    for t in result.trials:
        spec = t.server.get("spec_decode") if t.server.get("ok") else None
        if spec:
            per_pos = ", ".join(f"{v:.0%}" for v in spec["per_position_acceptance"])
            console.print(
                f"trial {t.index}: speculative acceptance {number(spec['acceptance_rate'], 3)}, "
                f"mean acceptance length {number(spec['mean_acceptance_length'], 2)}, "
                f"per position [{per_pos}]"
            )
        if not t.server.get("ok"):
            console.print(
                f"trial {t.index}: server metrics: {t.server.get('error')} "
                f"({t.server.get('detail')})"
            )


def _slo_override(args: argparse.Namespace) -> dict[str, float] | None:
    slo = {
        key: value
        for key, value in (
            ("ttft_ms", args.slo_ttft_ms),
            ("tpot_ms", args.slo_tpot_ms),
            ("e2el_ms", args.slo_e2el_ms),
        )
        if value is not None
    }
    return slo or None


def _probe(args: argparse.Namespace) -> Any:
    """The host probe for ``benchgate bench``; raises ValueError for bad figures."""
    from .hostprobe import ServiceProbe, bandwidth_from_calibration

    if args.tensor_parallel_size < 1:
        raise ValueError(f"--tensor-parallel-size must be >= 1, got {args.tensor_parallel_size}")
    bandwidth = args.bandwidth_gbs
    if bandwidth is not None and bandwidth <= 0:
        raise ValueError(f"--bandwidth-gbs must be > 0, got {bandwidth}")
    if args.calibration is not None:
        if bandwidth is not None:
            raise ValueError("give --bandwidth-gbs or --calibration, not both")
        try:
            bandwidth = bandwidth_from_calibration(args.calibration)
        except (OSError, ValueError) as exc:
            raise ValueError(f"--calibration: {exc}") from exc
    return ServiceProbe(
        unit=args.service_unit,
        pid=args.service_pid,
        model_dir=args.model_dir,
        tensor_parallel_size=args.tensor_parallel_size,
        bandwidth_gbs=bandwidth,
        cold_start_file=args.cold_start_file,
    )


def run(args: argparse.Namespace) -> int:
    """Run ``benchgate bench``; the exit status."""
    from .bench import BenchmarkError, Progress, run_benchmark
    from .workload import WorkloadError, load_workload

    err = sys.stderr
    try:
        probe = _probe(args)
    except ValueError as exc:
        print(f"benchgate bench: {exc}", file=err)
        return EXIT_ERROR
    try:
        workload = load_workload(args.workload).with_overrides(
            concurrency=args.concurrency,
            num_requests=args.num_requests,
            trials=args.trials,
            input_len=args.input_len,
            output_len=args.output_len,
            warmup=args.warmup,
            request_rate=args.request_rate,
            timeout_s=args.timeout,
            slo=_slo_override(args),
        )
    except WorkloadError as exc:
        print(f"benchgate bench: {exc}", file=err)
        return EXIT_ERROR
    api_key = None
    if args.api_key_file:
        try:
            api_key = args.api_key_file.read_text(encoding="utf-8").strip()
        except OSError as exc:
            print(f"benchgate bench: cannot read --api-key-file: {exc}", file=err)
            return EXIT_ERROR

    console = None
    bar: Any = None
    tasks: dict[str, Any] = {}
    if not args.quiet:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            TextColumn,
            TimeElapsedColumn,
        )
        from rich.progress import Progress as Bar

        console = Console(stderr=False)
        bar = Bar(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[errors]} errors"),
            TimeElapsedColumn(),
            console=console,
            transient=False,
        )

    errors: dict[str, int] = {}
    stage_trials = {name: wl.trials for name, wl in workload.stage_workloads()}

    def progress(ev: Progress) -> None:
        if bar is None or ev.phase in ("discover", "stage", "done", "trial-done"):
            return
        key = (
            "warm-up"
            if ev.phase == "warmup"
            else f"trial {ev.trial + 1}/{stage_trials.get(ev.stage, workload.trials)}"
        )
        if ev.stage is not None:
            key = f"{ev.stage}: {key}"
        if key not in tasks:
            tasks[key] = bar.add_task(key, total=ev.total, errors=0)
            errors[key] = 0
        if ev.record is not None and not ev.record.ok:
            errors[key] += 1
        bar.update(tasks[key], completed=ev.done, errors=errors[key])

    try:
        if bar is not None:
            with bar:
                result = run_benchmark(
                    args.base_url, workload, args.model, api_key, progress, probe=probe
                )
        else:
            result = run_benchmark(args.base_url, workload, args.model, api_key, probe=probe)
    except BenchmarkError as exc:
        print(f"benchgate bench: {exc}", file=err)
        return EXIT_ERROR
    except WorkloadError as exc:
        print(f"benchgate bench: {exc}", file=err)
        return EXIT_ERROR
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        data = result.to_dict(include_requests=not args.no_requests)
        args.output.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    if console is not None:
        _print_result(result, console)
        if args.output:
            console.print(f"result written to {args.output}")
    return EXIT_OK if result.all_valid else EXIT_INVALID
