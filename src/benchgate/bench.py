"""Run a workload against a server: discover, warm up, measure trials.

``run_benchmark`` is what the CLI, the Ansible module and the roles call.

Target-side code: keep it Python 3.9 compatible.
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import aiohttp

from . import __version__
from .client import FetchError, RequestRecord, fetch, make_client, run_requests
from .hostprobe import ServiceProbe
from .metrics import Snapshot, diff, scrape
from .results import (
    Result,
    StageResult,
    Target,
    Trial,
    WorkloadInfo,
    build_trial,
    summarize,
    utc_now,
)
from .tokenfit import TokenizeError, fit_prompts
from .workload import Prompt, Workload, WorkloadError, build_prompts, workload_from_any


class BenchmarkError(RuntimeError):
    """The benchmark could not start (server unreachable, no model, bad workload)."""


@dataclass
class Progress:
    """A progress event: ``phase`` is ``discover``, ``stage`` (a staged
    workload's next stage begins: ``trial`` is its index, ``total`` the number
    of stages), ``warmup``, ``trial``, ``trial-done`` (with the trial's output
    tok/s) or ``done``. ``stage`` names the stage (None when unstaged); trial
    indexes and totals count within it."""

    phase: str
    trial: int  # 0-based trial index (within the stage); -1 outside trials
    done: int
    total: int
    record: RequestRecord | None = None
    tokens_per_s: float | None = None
    stage: str | None = None


ProgressFn = Callable[[Progress], None]


def _root_url(base_url: str) -> str:
    url = base_url.rstrip("/")
    return url[:-3] if url.endswith("/v1") else url


async def discover(
    client: aiohttp.ClientSession, base_url: str, api_key: str | None
) -> tuple[str, str | None]:
    """(first served model id, server version or None)."""
    root = _root_url(base_url)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        status, text = await fetch(client, f"{root}/v1/models", headers=headers, timeout_s=30.0)
    except FetchError as exc:
        raise BenchmarkError(f"cannot reach {root}/v1/models: {exc}") from exc
    if status != 200:
        raise BenchmarkError(f"{root}/v1/models answered HTTP {status}")
    try:
        models = [m["id"] for m in json.loads(text)["data"]]
    except (ValueError, KeyError, TypeError) as exc:
        raise BenchmarkError(f"{root}/v1/models: unexpected answer {text[:200]!r}") from exc
    if not models:
        raise BenchmarkError(f"{root}/v1/models lists no model")
    return models[0], await server_version(client, base_url)


async def server_version(client: aiohttp.ClientSession, base_url: str) -> str | None:
    try:
        status, text = await fetch(client, f"{_root_url(base_url)}/version", timeout_s=10.0)
        if status == 200:
            version = json.loads(text).get("version")
            return str(version) if version is not None else None
    except (FetchError, ValueError, AttributeError):
        pass
    return None


def _counting(
    report: ProgressFn, phase: str, trial: int, total: int, stage: str | None = None
) -> Callable[[RequestRecord], None]:
    done = [0]

    def on_done(rec: RequestRecord) -> None:
        done[0] += 1
        report(Progress(phase, trial, done[0], total, rec, stage=stage))

    return on_done


async def _fit_synthetic(
    client: aiohttp.ClientSession,
    base_url: str,
    model: str,
    workload: Workload,
    api_key: str | None,
    warm_prompts: list[Prompt],
    trial_prompts: list[list[Prompt]],
) -> tuple[list[Prompt], list[list[Prompt]], dict[str, Any]]:
    """Warm-up and trial prompts fitted to ``input_len`` tokens by the server's tokenizer."""
    flat = warm_prompts + [p for prompts in trial_prompts for p in prompts]
    try:
        fitted, report = await fit_prompts(
            client,
            _root_url(base_url),
            model,
            flat,
            workload.input_len,
            workload.prompts.seed,
            api_key,
            parallel=min(8, workload.concurrency),
        )
    except TokenizeError as exc:
        raise BenchmarkError(
            f"cannot fit the synthetic prompts to {workload.input_len} tokens: {exc}"
        ) from exc
    n_warm = len(warm_prompts)
    n = workload.num_requests
    trials = [fitted[n_warm + i * n : n_warm + (i + 1) * n] for i in range(len(trial_prompts))]
    return fitted[:n_warm], trials, report.to_dict()


async def _run_stage(
    client: aiohttp.ClientSession,
    base_url: str,
    model: str,
    workload: Workload,
    api_key: str | None,
    report: ProgressFn,
    stage: str | None,
    prompt_offset: int,
    first_index: int,
) -> tuple[list[Trial], dict[str, Any] | None]:
    """Warm up and measure one stage (the whole workload when unstaged).

    ``prompt_offset``: prompts used by the stages before, so no stage reuses
    another's (no prefix-cache hits); ``first_index``: the index of this
    stage's first trial in the whole result.
    """
    warm_prompts = (
        build_prompts(workload, workload.warmup, offset=prompt_offset) if workload.warmup else []
    )
    n = workload.num_requests
    trial_prompts = [
        build_prompts(workload, n, offset=prompt_offset + workload.warmup + i * n)
        for i in range(workload.trials)
    ]
    prompt_fit = None
    if workload.prompts.source == "synthetic":
        warm_prompts, trial_prompts, prompt_fit = await _fit_synthetic(
            client, base_url, model, workload, api_key, warm_prompts, trial_prompts
        )
    if warm_prompts:
        report(Progress("warmup", -1, 0, len(warm_prompts), stage=stage))
        await run_requests(
            client,
            base_url,
            model,
            workload,
            warm_prompts,
            api_key,
            _counting(report, "warmup", -1, len(warm_prompts), stage),
        )
    trials: list[Trial] = []
    for i, prompts in enumerate(trial_prompts):
        on_done = _counting(report, "trial", i, len(prompts), stage)
        report(Progress("trial", i, 0, len(prompts), stage=stage))
        before: Snapshot = await scrape(client, base_url)
        run = await run_requests(
            client,
            base_url,
            model,
            workload,
            prompts,
            api_key,
            on_done,
            seed=workload.prompts.seed + first_index + i,
        )
        after: Snapshot = await scrape(client, base_url)
        server = diff(before, after).to_dict()
        trial = build_trial(
            first_index + i,
            run.records,
            run.duration_s,
            run.started_at,
            workload.max_error_rate,
            server,
            slo=workload.slo,
        )
        trial.stage = stage
        trials.append(trial)
        tok_s = trial.metrics.output_tokens_per_s if trial.metrics else None
        report(Progress("trial-done", i, i + 1, workload.trials, tokens_per_s=tok_s, stage=stage))
    return trials, prompt_fit


def _stage_params(workload: Workload) -> dict[str, Any]:
    """What a stage's entry in the result says about its load."""
    data = workload.to_dict()
    data.pop("description", None)
    return data


async def run_benchmark_async(
    base_url: str,
    workload: Workload,
    model: str | None = None,
    api_key: str | None = None,
    progress: ProgressFn | None = None,
) -> Result:
    def report(event: Progress) -> None:
        if progress is not None:
            progress(event)

    stages = workload.stage_workloads()
    # Build every prompt first: a bad prompt file fails before any load is sent.
    for _, stage_wl in stages:
        build_prompts(stage_wl, 1)
    concurrency = max(stage_wl.concurrency for _, stage_wl in stages)
    timeout_s = max(stage_wl.timeout_s for _, stage_wl in stages)
    client = make_client(concurrency + 2, timeout_s)
    trials: list[Trial] = []
    stage_results: list[StageResult] = []
    prompt_fit = None
    async with client:
        report(Progress("discover", -1, 0, 1))
        if model is None:
            model, version = await discover(client, base_url, api_key)
        else:
            version = await server_version(client, base_url)
        offset = 0
        for index, (name, stage_wl) in enumerate(stages):
            if name is not None:
                report(Progress("stage", index, 0, len(stages), stage=name))
            stage_trials, fit = await _run_stage(
                client, base_url, model, stage_wl, api_key, report, name, offset, len(trials)
            )
            offset += stage_wl.warmup + stage_wl.trials * stage_wl.num_requests
            trials += stage_trials
            if index == 0:
                prompt_fit = fit
            if name is not None:
                stage_results.append(
                    StageResult(name, _stage_params(stage_wl), summarize(stage_trials), fit)
                )
    report(Progress("done", -1, len(trials), len(trials)))
    return Result(
        target=Target(base_url=base_url, model=model, server_version=version),
        workload=WorkloadInfo(
            name=workload.name,
            version=workload.version,
            hash=workload.hash,
            params=workload.to_dict(),
        ),
        trials=trials,
        summary=summarize(trials),
        created_at=utc_now(),
        prompt_fit=prompt_fit,
        client={
            "name": "benchgate",
            "version": __version__,
            "python": platform.python_version(),
            "aiohttp": aiohttp.__version__,
        },
        stages=stage_results or None,
    )


def run_benchmark(
    base_url: str,
    workload: Workload | str | Path | Mapping[str, Any],
    model: str | None = None,
    api_key: str | None = None,
    progress: ProgressFn | None = None,
    probe: ServiceProbe | None = None,
) -> Result:
    """Benchmark ``base_url`` with ``workload`` (a Workload, a file path or name, or a dict).

    With ``probe`` the service's memory is sampled before the warm-up and after
    the last trial, and the result gets its ``roofline``, ``service_memory``
    and ``cold_start`` blocks (without, they stay null).

    Raises :class:`BenchmarkError` when the benchmark cannot start and
    :class:`benchgate.workload.WorkloadError` for a bad workload.  Failed
    requests do not raise: they make trials invalid.
    """
    wl = workload_from_any(workload)
    if probe is not None:
        probe.sample("before", utc_now())
    result = asyncio.run(run_benchmark_async(base_url, wl, model, api_key, progress))
    if probe is not None:
        probe.sample("after", utc_now())
        attach_host_figures(result, probe, wl)
    return result


def attach_host_figures(result: Result, probe: ServiceProbe, workload: Workload) -> None:
    """Fill the result's roofline, service_memory and cold_start from ``probe``.

    A staged result is held against the roofline with its stage of the fewest
    streams (the bound is a single-stream one; mixing stages means nothing).
    """
    summary, concurrency = result.summary, workload.concurrency
    if result.stages:
        stage = min(result.stages, key=lambda s: int(s.params.get("concurrency") or 0))
        summary, concurrency = stage.summary, int(stage.params["concurrency"])
    tpot = summary.metrics.get("tpot_ms.median")
    figures = probe.report(tpot.median if tpot is not None else None, concurrency)
    result.roofline = figures["roofline"]
    result.service_memory = figures["service_memory"]
    result.cold_start = figures["cold_start"]


# --------------------------------------------------------------- Ansible module glue

MODULE_OVERRIDES = (
    "concurrency",
    "num_requests",
    "trials",
    "input_len",
    "output_len",
    "warmup",
    "slo",
)


def probe_from_module_params(params: Mapping[str, Any]) -> ServiceProbe:
    """The host probe the module's parameters describe (checks values; reads nothing)."""
    tp = params.get("tensor_parallel_size")
    tp = 1 if tp is None else int(tp)
    if tp < 1:
        raise BenchmarkError(f"tensor_parallel_size must be >= 1, got {tp}")
    bandwidth = params.get("bandwidth_gbs")
    if bandwidth is not None and float(bandwidth) < 0:
        raise BenchmarkError(f"bandwidth_gbs must be >= 0 (0 = look the GPU up), got {bandwidth}")
    pid = params.get("service_pid")
    if pid is not None and int(pid) <= 0:
        raise BenchmarkError(f"service_pid must be a process id, got {pid}")
    return ServiceProbe(
        unit=params.get("service_unit") or None,
        pid=int(pid) if pid is not None else None,
        model_dir=params.get("model_dir") or None,
        tensor_parallel_size=tp,
        bandwidth_gbs=float(bandwidth) if bandwidth else None,
        cold_start_file=params.get("cold_start_file") or None,
    )


def parse_cpu_list(text: str) -> set[int]:
    """CPU numbers of a cpulist such as ``"0"``, ``"2-15"`` or ``"0,2-3"``.

    The syntax of taskset(1) and systemd's ``CPUAffinity=`` (commas or spaces).
    Raises ValueError with the part that is wrong.
    """
    cpus: set[int] = set()
    for part in re.split(r"[,\s]+", text.strip()):
        match = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not match:
            raise ValueError(f"{part!r} is not a CPU number or range (e.g. 0, 2-15, 0,2-3)")
        first = int(match.group(1))
        last = int(match.group(2) or first)
        if last < first:
            raise ValueError(f"{part!r}: the range ends before it starts")
        cpus.update(range(first, last + 1))
    return cpus


def pin_client(cpu_list: str) -> set[int]:
    """Run this process (the benchmark client) on these CPUs only.

    On a small host the client and the server fight over the same cores and
    the trials spread by 10-20% (docs/benchmarks.md, "Noise at the source"):
    giving the client its own cores takes that out of the measurement.
    """
    try:
        cpus = parse_cpu_list(cpu_list)
    except ValueError as exc:
        raise BenchmarkError(f"cpu_affinity: {exc}") from None
    allowed = os.sched_getaffinity(0)
    if not cpus <= allowed:
        raise BenchmarkError(
            f"cpu_affinity {cpu_list!r} names CPUs this host does not give the client "
            f"({sorted(cpus - allowed)}; allowed: {sorted(allowed)}): set "
            "vllm_benchmark_cpu_affinity to CPUs that exist, or empty for no pinning"
        )
    os.sched_setaffinity(0, cpus)
    return cpus


def workload_from_module_params(params: Mapping[str, Any]) -> Workload:
    """The workload the ``vllm_benchmark`` module's parameters describe."""
    workload = workload_from_any(params["workload"])
    overrides = {key: params.get(key) for key in MODULE_OVERRIDES}
    if params.get("timeout") is not None:
        overrides["timeout_s"] = float(params["timeout"])
    return workload.with_overrides(**overrides)


def progress_logger(label: str, log: Callable[[str], None]) -> ProgressFn:
    """Progress as log lines: warm-up, then each trial's tok/s and the median so far.

    The module hands ``AnsibleModule.log``: the lines land in the host's
    journal (``journalctl -t ansible-vllm_benchmark -f`` follows a run).
    A staged workload logs each stage's start, and the median restarts with it.
    """
    seen: list[float] = []

    def on_event(ev: Progress) -> None:
        where = label if ev.stage is None else f"{label}, stage {ev.stage}"
        if ev.phase == "stage":
            seen.clear()
            log(f"benchgate {label}: stage {ev.trial + 1}/{ev.total}: {ev.stage}")
        elif ev.phase == "warmup" and ev.done == 0:
            log(f"benchgate {where}: warm-up, {ev.total} requests")
        elif ev.phase == "trial-done":
            if ev.tokens_per_s is not None:
                seen.append(ev.tokens_per_s)
            so_far = sorted(seen)
            median = (
                (so_far[(len(so_far) - 1) // 2] + so_far[len(so_far) // 2]) / 2 if so_far else None
            )
            now = "invalid" if ev.tokens_per_s is None else f"{ev.tokens_per_s:.1f} output tok/s"
            tail = "" if median is None else f" (median so far {median:.1f})"
            log(f"benchgate {where}: trial {ev.done}/{ev.total}: {now}{tail}")

    return on_event


def module_run(
    params: Mapping[str, Any], check_mode: bool, log: Callable[[str], None] | None = None
) -> dict[str, Any]:
    """Everything the ``vllm_benchmark`` module does, minus Ansible.

    Returns the keyword arguments for ``exit_json``; raises BenchmarkError or
    WorkloadError (the module turns them into ``fail_json``).  Check mode
    validates the workload and sends no load. ``log`` gets a line per trial.
    """
    workload = workload_from_module_params(params)
    probe = probe_from_module_params(params)
    if params.get("cpu_affinity"):
        pin_client(params["cpu_affinity"])
    base = {
        "changed": False,
        "workload": {"name": workload.name, "version": workload.version, "hash": workload.hash},
    }
    if check_mode:
        build_prompts(workload, 1)  # a missing prompt file fails in check mode too
        base.update(skipped=True, msg="check mode: workload is valid; no load sent")
        return base
    progress = progress_logger(params.get("label") or "measurement", log) if log else None
    result = run_benchmark(
        params["base_url"],
        workload,
        params.get("model"),
        params.get("api_key"),
        progress,
        probe=probe,
    )
    data = result.to_dict()
    output_path = params.get("output_path")
    if output_path:
        path = Path(output_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
        os.replace(tmp, path)
    valid = result.summary.valid_trials
    base.update(
        msg=f"{valid}/{len(result.trials)} valid trials",
        all_valid=result.all_valid,
        valid_trials=valid,
        summary=data["summary"],
        target=data["target"],
        roofline=data["roofline"],
        service_memory=data["service_memory"],
        cold_start=data["cold_start"],
        output_path=output_path,
        result=data if params.get("include_requests") else result.to_dict(include_requests=False),
    )
    return base


__all__ = [
    "BenchmarkError",
    "Progress",
    "WorkloadError",
    "attach_host_figures",
    "module_run",
    "parse_cpu_list",
    "pin_client",
    "progress_logger",
    "probe_from_module_params",
    "run_benchmark",
    "run_benchmark_async",
    "workload_from_module_params",
]
