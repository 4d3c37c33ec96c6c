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
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, replace
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
    side: str | None = None  # side by side: "candidate" or "reference"


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


async def _stage_prompts(
    client: aiohttp.ClientSession,
    base_url: str,
    model: str,
    workload: Workload,
    api_key: str | None,
    prompt_offset: int,
) -> tuple[list[Prompt], list[list[Prompt]], dict[str, Any] | None]:
    """One stage's warm-up and per-trial prompts (fitted by ``base_url``'s
    tokenizer when synthetic). ``prompt_offset``: prompts used by the stages
    before, so no stage reuses another's (no prefix-cache hits)."""
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
    return warm_prompts, trial_prompts, prompt_fit


async def _warm_up(
    client: aiohttp.ClientSession,
    base_url: str,
    model: str,
    workload: Workload,
    api_key: str | None,
    report: ProgressFn,
    stage: str | None,
    warm_prompts: list[Prompt],
) -> None:
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


async def _measure_trial(
    client: aiohttp.ClientSession,
    base_url: str,
    model: str,
    workload: Workload,
    api_key: str | None,
    report: ProgressFn,
    stage: str | None,
    prompts: list[Prompt],
    i: int,
    index: int,
) -> Trial:
    """Trial ``i`` of a stage (``index`` in the whole result), with /metrics before and after."""
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
        seed=workload.prompts.seed + index,
    )
    after: Snapshot = await scrape(client, base_url)
    trial = build_trial(
        index,
        run.records,
        run.duration_s,
        run.started_at,
        workload.max_error_rate,
        diff(before, after).to_dict(),
        slo=workload.slo,
    )
    trial.stage = stage
    tok_s = trial.metrics.output_tokens_per_s if trial.metrics else None
    report(Progress("trial-done", i, i + 1, workload.trials, tokens_per_s=tok_s, stage=stage))
    return trial


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

    ``first_index``: the index of this stage's first trial in the whole result.
    """
    warm, trial_prompts, prompt_fit = await _stage_prompts(
        client, base_url, model, workload, api_key, prompt_offset
    )
    await _warm_up(client, base_url, model, workload, api_key, report, stage, warm)
    trials = [
        await _measure_trial(
            client, base_url, model, workload, api_key, report, stage, prompts, i, first_index + i
        )
        for i, prompts in enumerate(trial_prompts)
    ]
    return trials, prompt_fit


def _stage_params(workload: Workload) -> dict[str, Any]:
    """What a stage's entry in the result says about its load."""
    data = workload.to_dict()
    data.pop("description", None)
    return data


def _make_result(
    base_url: str,
    model: str,
    version: str | None,
    workload: Workload,
    trials: list[Trial],
    stage_results: list[StageResult],
    prompt_fit: dict[str, Any] | None,
) -> Result:
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


def _prepare(workload: Workload) -> tuple[list[tuple[str | None, Workload]], aiohttp.ClientSession]:
    stages = workload.stage_workloads()
    # Build every prompt first: a bad prompt file fails before any load is sent.
    for _, stage_wl in stages:
        build_prompts(stage_wl, 1)
    concurrency = max(stage_wl.concurrency for _, stage_wl in stages)
    timeout_s = max(stage_wl.timeout_s for _, stage_wl in stages)
    return stages, make_client(concurrency + 2, timeout_s)


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

    stages, client = _prepare(workload)
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
    return _make_result(base_url, model, version, workload, trials, stage_results, prompt_fit)


async def run_side_by_side_async(
    base_url: str,
    reference_url: str,
    workload: Workload,
    model: str | None = None,
    api_key: str | None = None,
    progress: ProgressFn | None = None,
) -> tuple[Result, Result]:
    """Measure two servers of the same model with their trials alternating.

    ``base_url`` (the candidate) and ``reference_url`` (e.g. the release that
    served before, started beside it) get the same prompts, stage by stage:
    both warm up, then trial i runs on one and then the other, in the order
    reference-candidate, candidate-reference, ... (ABBA), so a level of the
    machine that drifts over minutes lands on both sides instead of on one
    (lab/notes/benchmarks.md, "Side by side"). Returns (candidate, reference);
    both carry ``interleaved`` with one shared id, which the gate reads.
    """

    def report(event: Progress) -> None:
        if progress is not None:
            progress(event)

    def reporter(side: str) -> ProgressFn:
        return lambda event: report(replace(event, side=side))

    stages, client = _prepare(workload)
    urls = {"candidate": base_url, "reference": reference_url}
    reports = {side: reporter(side) for side in urls}
    trials: dict[str, list[Trial]] = {"candidate": [], "reference": []}
    stage_results: dict[str, list[StageResult]] = {"candidate": [], "reference": []}
    prompt_fit = None
    async with client:
        report(Progress("discover", -1, 0, 1))
        if model is None:
            model, version = await discover(client, base_url, api_key)
        else:
            version = await server_version(client, base_url)
        ref_model, ref_version = await discover(client, reference_url, api_key)
        if ref_model != model:
            raise BenchmarkError(
                f"{reference_url} serves {ref_model!r}, {base_url} serves {model!r}: "
                "side by side needs the same model on both"
            )
        versions = {"candidate": version, "reference": ref_version}
        offset = 0
        for index, (name, stage_wl) in enumerate(stages):
            if name is not None:
                report(Progress("stage", index, 0, len(stages), stage=name))
            warm, trial_prompts, fit = await _stage_prompts(
                client, base_url, model, stage_wl, api_key, offset
            )
            for side in ("reference", "candidate"):
                await _warm_up(
                    client, urls[side], model, stage_wl, api_key, reports[side], name, warm
                )
            first = len(trials["candidate"])
            stage_trials: dict[str, list[Trial]] = {"candidate": [], "reference": []}
            for i, prompts in enumerate(trial_prompts):
                order = ("reference", "candidate") if i % 2 == 0 else ("candidate", "reference")
                for side in order:
                    trial = await _measure_trial(
                        client,
                        urls[side],
                        model,
                        stage_wl,
                        api_key,
                        reports[side],
                        name,
                        prompts,
                        i,
                        first + i,
                    )
                    stage_trials[side].append(trial)
            offset += stage_wl.warmup + stage_wl.trials * stage_wl.num_requests
            if index == 0:
                prompt_fit = fit
            for side in urls:
                trials[side] += stage_trials[side]
                if name is not None:
                    stage_results[side].append(
                        StageResult(
                            name, _stage_params(stage_wl), summarize(stage_trials[side]), fit
                        )
                    )
    report(Progress("done", -1, len(trials["candidate"]), len(trials["candidate"])))
    pair_id = uuid.uuid4().hex
    results = {}
    for side, other in (("candidate", "reference"), ("reference", "candidate")):
        result = _make_result(
            urls[side],
            model,
            versions[side],
            workload,
            trials[side],
            stage_results[side],
            prompt_fit,
        )
        result.interleaved = {"id": pair_id, "side": side, "with": urls[other], "order": "ABBA"}
        results[side] = result
    return results["candidate"], results["reference"]


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
    result.server_config = probe.server_config()


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
        log_file=params.get("service_log") or None,
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
    the trials spread by 10-20% (lab/notes/benchmarks.md, "Noise at the source"):
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
    seen: dict[str | None, list[float]] = {}

    def on_event(ev: Progress) -> None:
        where = label if ev.stage is None else f"{label}, stage {ev.stage}"
        if ev.side is not None:
            where = f"{where}, {ev.side}"
        if ev.phase == "stage":
            seen.clear()
            log(f"benchgate {label}: stage {ev.trial + 1}/{ev.total}: {ev.stage}")
        elif ev.phase == "warmup" and ev.done == 0:
            log(f"benchgate {where}: warm-up, {ev.total} requests")
        elif ev.phase == "trial-done":
            side = seen.setdefault(ev.side, [])
            if ev.tokens_per_s is not None:
                side.append(ev.tokens_per_s)
            so_far = sorted(side)
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
    reference_url = params.get("reference_base_url")
    reference = None
    if reference_url:
        probe.sample("before", utc_now())
        result, reference = asyncio.run(
            run_side_by_side_async(
                params["base_url"],
                reference_url,
                workload,
                params.get("model"),
                params.get("api_key"),
                progress,
            )
        )
        probe.sample("after", utc_now())
        attach_host_figures(result, probe, workload)
    else:
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
        _write_json(Path(output_path), data)
        if reference is not None:
            _write_json(reference_path(Path(output_path)), reference.to_dict())
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
    if reference is not None:
        base["reference_result"] = (
            reference.to_dict()
            if params.get("include_requests")
            else reference.to_dict(include_requests=False)
        )
        ref_valid = reference.summary.valid_trials
        base["msg"] = f"{base['msg']}; reference {ref_valid}/{len(reference.trials)} valid trials"
    return base


def reference_path(output_path: Path) -> Path:
    """Where a side-by-side run writes its reference's result, beside the candidate's."""
    return output_path.with_name(f"{output_path.stem}-reference{output_path.suffix}")


def _write_json(path: Path, data: Mapping[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, path)


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
    "reference_path",
    "run_benchmark",
    "run_benchmark_async",
    "run_side_by_side_async",
    "workload_from_module_params",
]
