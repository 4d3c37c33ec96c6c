#!/usr/bin/env python3
"""Issue 18's experiment on the H200 device machine: CUDA vLLM, two releases,
speculative decoding on and off, measured with `benchgate bench`.

    python3 lab/gpu/experiment.py plan                 # the servers and their argv
    python3 lab/gpu/experiment.py launch BATCH         # start a batch's servers, return
    python3 lab/gpu/experiment.py measure BATCH [--stop] [--then-launch NEXT]

Every `vllm serve` command line comes from benchgate's own argv builder
(benchgate.serve.build_serve_argv, the one the systemd unit's ExecStart= uses
through the vllm_serve_argv filter). The servers of one batch start together
on the one GPU (own sessions, so they outlive the call that started them
while the machine stays warm), each with a fixed KV cache
(--kv-cache-memory-bytes: no memory profiling that other servers could
disturb); they are measured one after another, never at the same time.

State under $BG (default /tmp/bg): releases in vllm-<v>/ (bin/vllm wrapper),
dependencies in deps/, models in models/, logs/, results/.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterable
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

from benchgate import serve  # noqa: E402

BG = Path(os.environ.get("BG", "/tmp/bg"))
GIB = 2**30
# The field report's per-position acceptance (Qwen3-14B target, Qwen3-4B draft).
REPORT_RATES = [0.793, 0.651, 0.550, 0.453, 0.386]
NEW, OLD = "0.26.0", "0.24.0"
WORKLOADS = {
    "c1": REPO / "lab/gpu/workloads/h200-c1.yml",
    "c64": REPO / "lab/gpu/workloads/h200-c64.yml",
    # issue 34's spread experiment (spread.py): 5 trials at c1, 3 at c64
    "sc1": REPO / "lab/gpu/workloads/spread-c1.yml",
    "sc64": REPO / "lab/gpu/workloads/spread-c64.yml",
    # issue 36: the threshold of a schedule that drafts with one request only
    "sc2": REPO / "lab/gpu/workloads/spread-c2.yml",
    # issues 36 and 34 (point 2): c64 with 5 trials, enough for the A/B's bound
    "ac64": REPO / "lab/gpu/workloads/ab-c64.yml",
}


def _server(
    release: str,
    draft: str | None,
    k: int,
    port: int,
    repeats: int = 1,
    extra: list[str] | None = None,
    schedule: list[list[int]] | None = None,
    quant: str | None = None,
    draft_quant: bool = True,
) -> dict:
    spec = None
    extra = [*(extra or []), *(["--quantization", quant] if quant else [])]
    if draft:
        spec = {
            "method": "draft_model",
            "model": str(BG / "models" / draft),
            "num_speculative_tokens": k,
            "rejection_sample_method": "synthetic",
            "synthetic_acceptance_rates": REPORT_RATES[:k],
        }
        if schedule:
            spec["num_speculative_tokens_per_batch_size"] = schedule
        if quant and draft_quant:  # the draft quantised online as the target
            spec["quantization"] = quant
    return {
        "release": release,
        "draft": draft,
        "k": k if draft else 0,
        "port": port,
        "speculative": spec,
        "repeats": repeats,
        "extra": extra,
    }


SERVERS = {
    "v26-off": _server(NEW, None, 0, 8001, repeats=2),
    "v26-d4b-k1": _server(NEW, "qwen3-4b", 1, 8002),
    "v26-d4b-k3": _server(NEW, "qwen3-4b", 3, 8003),
    "v26-d4b-k5": _server(NEW, "qwen3-4b", 5, 8004),
    "v26-d06b-k3": _server(NEW, "qwen3-0.6b", 3, 8005),
    "v24-off": _server(OLD, None, 0, 8011, repeats=2),
    "v24-d4b-k3": _server(OLD, "qwen3-4b", 3, 8013),
    "v24-d4b-k1": _server(OLD, "qwen3-4b", 1, 8012),
    "v26-off-restart": _server(NEW, None, 0, 8021),
    "v26-d4b-k2": _server(NEW, "qwen3-4b", 2, 8006),
    "v26-d4b-k4": _server(NEW, "qwen3-4b", 4, 8007),
    "v26-d06b-k5": _server(NEW, "qwen3-0.6b", 5, 8008),
    "v26-d06b-k1": _server(NEW, "qwen3-0.6b", 1, 8009),
    "v24-d06b-k3": _server(OLD, "qwen3-0.6b", 3, 8014),
    # 2026-12-05, third session: the 0.24.0 arms still missing, and a second
    # run on one server of the two 0.26.0 arms that beat plain at c1 there
    "v24-d4b-k2": _server(OLD, "qwen3-4b", 2, 8015),
    "v24-d4b-k4": _server(OLD, "qwen3-4b", 4, 8016),
    "v24-d4b-k5": _server(OLD, "qwen3-4b", 5, 8017),
    "v24-d06b-k1": _server(OLD, "qwen3-0.6b", 1, 8018),
    "v24-d06b-k5": _server(OLD, "qwen3-0.6b", 5, 8019),
    "v26-d06b-k1-x2": _server(NEW, "qwen3-0.6b", 1, 8022, repeats=2),
    "v26-d4b-k2-x2": _server(NEW, "qwen3-4b", 2, 8023, repeats=2),
    # issue 34 (2026-12-06 evening): the 0.6B k=3 arm with async scheduling,
    # which 0.26.0 turns off by default for draft_model ("Async scheduling not
    # supported with draft_model-based speculative decoding and will be
    # disabled") but accepts when asked (vllm/config/vllm.py lists draft_model
    # among the methods allowed with --async-scheduling)
    "v26-d06b-k3-async": _server(NEW, "qwen3-0.6b", 3, 8025, extra=["--async-scheduling"]),
    # issue 36 (prepared 2026-12-06, not run): the 4B draft at k=3 (faster than
    # plain at one stream, slower at 64 on an H100) and its composed schedule,
    # drafting with one request only; 0.26.0's wheel declares the key
    "v26-d4b-k3-upto1": _server(NEW, "qwen3-4b", 3, 8026, schedule=[[1, 1, 3], [2, 2, 0]]),
    # issue 34, point 5 (2026-12-07): plain decoding served from the release
    # that the vllm_install role installed (lab/gpu/roles.yml), not the lab's
    "r26-off": {**_server(NEW, None, 0, 8030), "root": str(BG / "opt-vllm")},
    # Why is the composed arm 34-36% slower than plain where it drafts nothing
    # (2026-12-07, lab/notes/2026-12-07-gpu-ab-twice.md)? vLLM lowered its CUDA
    # graphs to PIECEWISE and named VLLM_USE_V2_MODEL_RUNNER=1 for full ones; the
    # static arm kept FULL_AND_PIECEWISE. Prepared, not run: the schedule on the
    # V2 model runner, and the static arm with PIECEWISE graphs forced.
    "v26-d4b-k3-upto1-v2": {
        **_server(NEW, "qwen3-4b", 3, 8027, schedule=[[1, 1, 3], [2, 2, 0]]),
        "env": {"VLLM_USE_V2_MODEL_RUNNER": "1"},
    },
    "v26-d4b-k3-pw": _server(
        NEW, "qwen3-4b", 3, 8028, extra=["--compilation-config", '{"cudagraph_mode":"PIECEWISE"}']
    ),
    # issue 34, point 4: the field report's own configuration, target and 4B
    # draft in FP8 (online quantisation of the dummy weights), plain and k=3,
    # with --max-num-batched-tokens 2048 and 8192. Not "without the flag": vllm
    # serve's default is 8192 on a GPU of 70 GiB or more (not an A100) and 2048
    # below (engine/arg_utils.py, get_batch_defaults, 0.24.0 and 0.26.0), so the
    # report's 4 x L4 (24 GB) ran 2048 by default and 8192 with the flag, while
    # on an H100 or H200 the flag alone would change nothing.
    # 2026-12-07 afternoon: both releases refused the online-quantised draft
    # ("hf_overrides must be a dict for get_quant_config", at engine start), so
    # two more drafts (2026-12-07 evening): `d4b16`, the draft in bf16 beside
    # the FP8 target, and `d4bq`, the draft written as an FP8 checkpoint (its
    # config.json has Qwen3-4B-FP8's quantization_config, block 128 x 128:
    # make_models.py's qwen3-4b-fp8), which vLLM loads as quantised without
    # being asked, as it would the report's pre-quantised draft.
    **{
        f"v{r[2:4]}-fp8-{arm}{tag}": _server(
            r, draft, 3 if draft else 0, port, extra=mnbt, quant="fp8", draft_quant=online
        )
        for r, base in ((NEW, 8040), (OLD, 8050))
        for i, (arm, draft, online) in enumerate(
            (
                ("off", None, False),
                ("d4b-k3", "qwen3-4b", True),
                ("d4b16-k3", "qwen3-4b", False),
                ("d4bq-k3", "qwen3-4b-fp8", False),
            )
        )
        for j, (tag, mnbt) in enumerate(
            (
                ("-2048", ["--max-num-batched-tokens", "2048"]),
                ("-8192", ["--max-num-batched-tokens", "8192"]),
            )
        )
        for port in (base + 2 * i + j,)
    },
}


def _one_each(first: int, names: Iterable[str]) -> dict[str, list[str]]:
    """Batches of one server each, numbered from ``first``."""
    return {str(first + n): [name] for n, name in enumerate(names)}


# At most three 14B-shaped servers at once (about 35-45 GiB each of 139 GiB).
# Batches 1-3 ran on 2026-12-04, batches 4-6 on 2026-12-05: the arms still
# missing, each release's plain server measured again in the same session
# (the A/B and the upgrade gate compare within one machine); batch 4 holds
# 0.26.0 alone because 0.24.0 is installed while it starts. Batches 7-9: the
# third session (2026-12-05 afternoon), batch 7 again 0.26.0 alone.
BATCHES = {
    "1": ["v26-off", "v26-d4b-k1", "v26-d4b-k3"],
    "2": ["v26-d4b-k5", "v26-d06b-k3", "v24-off"],
    "3": ["v24-d4b-k3", "v26-off-restart", "v24-d4b-k1"],
    "4": ["v26-off", "v26-d4b-k2", "v26-d4b-k4"],
    "5": ["v24-off", "v24-d4b-k1", "v26-d06b-k5"],
    "6": ["v26-d06b-k1", "v26-d06b-k3", "v24-d06b-k3"],
    "7": ["v26-off", "v26-d06b-k1-x2", "v26-d4b-k2-x2"],
    "8": ["v24-off", "v24-d4b-k2", "v24-d4b-k4"],
    "9": ["v24-d4b-k5", "v24-d06b-k1", "v24-d06b-k5"],
    # what fits the third session's device time after the machine refused to
    # start six times: the 4B draft's missing k on 0.24.0 (plain from 12-05)
    "10": ["v24-d4b-k2", "v24-d4b-k4", "v24-d4b-k5"],
    # an H100 (80 GB) came instead of the H200: one 14B server at a time
    "11": ["v24-off"],
    "12": ["v24-d4b-k2"],
    "13": ["v24-d4b-k4"],
    "14": ["v24-d4b-k5"],
    # one H100 (2026-12-05 evening), one server per batch: both plain servers
    # (the upgrade verdict on one GPU), then 0.24.0's 0.6B draft at k=1 and 5
    "15": ["v26-off"],
    "16": ["v24-off"],
    "17": ["v24-d06b-k1"],
    "18": ["v24-d06b-k5"],
    # the same evening's spare device time: 0.26.0's 0.6B draft at k=1 beside
    # 0.24.0's (batch 17) on an H100
    "19": ["v26-d06b-k1"],
    # one H100 (2026-12-05 night), one server per batch: 0.26.0's plain server
    # (the A/B's `off` in the same lease), then the 0.26.0 arms that 0.24.0 has
    # on the H100 (4B draft k=2/4/5, 0.6B draft k=5; 0.6B k=1 is batch 19)
    "20": ["v26-off"],
    "21": ["v26-d4b-k2"],
    "22": ["v26-d4b-k4"],
    "23": ["v26-d4b-k5"],
    "24": ["v26-d06b-k5"],
    # one H100 (2026-12-06), one server per batch: the arms neither release
    # has on the H100 (4B draft k=1 and k=3, then 0.6B k=3), each release's
    # plain server in the same lease; 0.26.0 first (0.24.0 arrives meanwhile)
    "25": ["v26-off"],
    "26": ["v26-d4b-k1"],
    "27": ["v26-d4b-k3"],
    "28": ["v24-off"],
    "29": ["v24-d4b-k1"],
    "30": ["v24-d4b-k3"],
    "31": ["v26-d06b-k3"],
    "32": ["v24-d06b-k3"],
    # prepared for the next H100 lease: the 0.6B draft's arms of one release in
    # one lease (k=1/3/5 ran in three leases, so no A/B compared them), then
    # 0.24.0's 0.6B k=3 (batch 32) with its plain server
    "33": ["v26-off"],
    "34": ["v26-d06b-k1"],
    "35": ["v26-d06b-k3"],
    "36": ["v26-d06b-k5"],
    "37": ["v24-off"],
    "38": ["v24-d06b-k3"],
    # issue 34, point 1 (spread.py): one server per batch, each started,
    # measured and stopped in turn: plain, the 0.6B k=3 arm, the same arm with
    # async scheduling, three times round (off, arm, async, off, arm, ...)
    "39": ["v26-off"],
    "40": ["v26-d06b-k3"],
    "41": ["v26-d06b-k3-async"],
    "42": ["v26-off"],
    "43": ["v26-d06b-k3"],
    "44": ["v26-d06b-k3-async"],
    "45": ["v26-off"],
    "46": ["v26-d06b-k3"],
    "47": ["v26-d06b-k3-async"],
    # issue 36 (prepared, not run): plain, the 4B k=3 arm and its schedule, each
    # at c1, c2 (the threshold) and c64: spread.py --batches 48,49,50 --loads sc1,sc2,sc64
    "48": ["v26-off"],
    "49": ["v26-d4b-k3"],
    "50": ["v26-d4b-k3-upto1"],
    # issue 34, point 5: the roles' release, measured by the modules (roles.yml)
    "51": ["r26-off"],
    # the composed arm's CUDA graphs (prepared 2026-12-07, not run): with 48-50
    # in one lease, spread.py --batches 48,49,50,60,61 --loads sc1,sc2,ac64
    "60": ["v26-d4b-k3-upto1-v2"],
    "61": ["v26-d4b-k3-pw"],
    # issue 34, point 4, the drafts that vLLM can load (2026-12-07 evening): the
    # bf16 draft (62, 63) and the FP8-checkpoint draft (64, 65) beside the FP8
    # target at 8192, then the same at 2048 (66-69)
    **_one_each(
        62,
        (
            f"v{v}-fp8-{arm}-{tag}"
            for tag in ("8192", "2048")
            for arm in ("d4b16-k3", "d4bq-k3")
            for v in ("26", "24")
        ),
    ),
    # issue 34, point 4: one server each, 0.26.0 then 0.24.0
    **_one_each(
        52,
        (
            f"v{v}-fp8-{arm}{tag}"
            for v in ("26", "24")
            for arm in ("off", "d4b-k3")
            for tag in ("-2048", "-8192")
        ),
    ),
}


def argv_of(name: str) -> list[str]:
    s = SERVERS[name]
    kv = 6 * GIB if s["speculative"] else 4 * GIB
    vllm = f"{s['root']}/current/bin/vllm" if "root" in s else f"{BG}/vllm-{s['release']}/bin/vllm"
    return serve.build_serve_argv(
        vllm,
        str(BG / "models" / "qwen3-14b"),
        served_model_name="qwen3-14b",
        host="127.0.0.1",
        port=s["port"],
        max_model_len=1024,
        dtype="bfloat16",
        speculative=s["speculative"],
        extra_args=[
            "--load-format",
            "dummy",
            "--gpu-memory-utilization",
            "0.2",
            "--kv-cache-memory-bytes",
            str(kv),
            "--max-num-seqs",
            "64",
            "--seed",
            "0",
            *s.get("extra", []),
        ],
    )


def env_of(name: str) -> dict[str, str]:
    s = SERVERS[name]
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)  # a role-installed release brings its own packages
    env.update(
        **({} if "root" in s else {"PYTHONPATH": f"{BG}/vllm-{s['release']}:{BG}/deps"}),
        VLLM_USE_FLASHINFER_SAMPLER="0",  # flashinfer is not carried
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        VLLM_NO_USAGE_STATS="1",
        DO_NOT_TRACK="1",
        PYTHONUNBUFFERED="1",
    )
    env.update(s.get("env", {}))
    return env


def launch(batch: str) -> None:
    (BG / "logs").mkdir(parents=True, exist_ok=True)
    (BG / "results").mkdir(parents=True, exist_ok=True)
    for name in BATCHES[batch]:
        argv = argv_of(name)
        log = open(BG / "logs" / f"{name}.log", "w")  # noqa: SIM115 (the child keeps it)
        proc = subprocess.Popen(
            argv,
            env=env_of(name),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        state = {
            "name": name,
            "pid": proc.pid,
            "argv": argv,
            "launched": time.time(),
            **SERVERS[name],
        }
        (BG / "results" / f"{name}.server.json").write_text(json.dumps(state, indent=1))
        print(f"launched {name} pid {proc.pid}: {' '.join(argv)}", flush=True)


def _state(name: str) -> dict:
    return json.loads((BG / "results" / f"{name}.server.json").read_text())


def _alive(pid: int) -> bool:
    """Running, not a zombie: a server that spread.py launched and that died stays
    a zombie until reaped, and kill(pid, 0) still succeeds (2026-12-07: the FP8
    draft's server was waited for 420 s after its engine had stopped)."""
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state not in ("Z", "X")


def _get(url: str, timeout: float = 5.0) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 (localhost)
            return resp.read().decode()
    except OSError:
        return None


def wait_ready(names: list[str], limit_s: float) -> dict[str, bool]:
    t_end = time.time() + limit_s
    ready: dict[str, bool] = {}
    while time.time() < t_end and len(ready) < len(names):
        for name in names:
            if name in ready:
                continue
            st = _state(name)
            if _get(f"http://127.0.0.1:{st['port']}/health") is not None:
                st["ready_s"] = round(time.time() - st["launched"], 1)
                (BG / "results" / f"{name}.server.json").write_text(json.dumps(st, indent=1))
                print(f"{name} ready after {st['ready_s']} s", flush=True)
                ready[name] = True
            elif not _alive(st["pid"]):
                print(f"{name} DIED; log tail:", flush=True)
                lines = (BG / "logs" / f"{name}.log").read_text(errors="replace").splitlines()
                print("\n".join(lines[-25:]), flush=True)
                ready[name] = False
        time.sleep(2)
    for name in names:
        if name not in ready:
            print(f"{name} not ready within {limit_s:.0f} s", flush=True)
            ready[name] = False
    return ready


def bench(name: str, load: str, tag: str) -> int:
    st = _state(name)
    out = BG / "results" / f"{name}-{load}{tag}.json"
    cmd = [
        sys.executable,
        "-m",
        "benchgate.cli",
        "bench",
        "--base-url",
        f"http://127.0.0.1:{st['port']}",
        "--workload",
        str(WORKLOADS[load]),
        "--output",
        str(out),
        "--quiet",
    ]
    t0 = time.time()
    env = dict(os.environ, PYTHONPATH=str(REPO / "src"))
    rc = subprocess.run(cmd, env=env, timeout=300).returncode
    summary = ""
    if out.exists():
        data = json.loads(out.read_text())
        m = (data.get("summary") or {}).get("metrics", {})
        tps = (m.get("output_tokens_per_s") or {}).get("median")
        tpot = (m.get("tpot_ms.median") or {}).get("median")
        summary = f"tok/s {tps:.1f} tpot {tpot:.2f} ms" if tps and tpot else ""
    print(f"bench {name} {load}{tag}: rc {rc} in {time.time() - t0:.0f} s {summary}", flush=True)
    return rc


def stop(names: list[str]) -> None:
    for name in names:
        st = _state(name)
        metrics = _get(f"http://127.0.0.1:{st['port']}/metrics")
        if metrics:
            keep = [
                ln
                for ln in metrics.splitlines()
                if ln.startswith("vllm:spec_decode")
                or ln.startswith("vllm:generation_tokens_total")
            ]
            (BG / "results" / f"{name}.metrics.txt").write_text("\n".join(keep) + "\n")
        if _alive(st["pid"]):
            with contextlib.suppress(OSError):
                os.killpg(st["pid"], signal.SIGTERM)
    for name in names:
        pid = _state(name)["pid"]
        for _ in range(30):
            if not _alive(pid):
                break
            time.sleep(0.5)
        else:
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)
    time.sleep(2)


def measure(
    batch: str, do_stop: bool, then: str | None, limit_s: float, max_repeats: int | None = None
) -> None:
    names = BATCHES[batch]
    ready = wait_ready(names, limit_s)
    subprocess.run(["nvidia-smi", "--query-gpu=memory.used,memory.total", "--format=csv"])
    for name in names:
        if not ready[name]:
            continue
        repeats = SERVERS[name]["repeats"]
        if max_repeats is not None:
            repeats = min(repeats, max_repeats)
        for rep in range(repeats):
            tag = "" if rep == 0 else f"-r{rep + 1}"
            for load in ("c1", "c64"):
                bench(name, load, tag)
    if do_stop:
        stop(names)
    if then:
        launch(then)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("plan")
    lp = sub.add_parser("launch")
    lp.add_argument("batch", choices=sorted(BATCHES))
    mp = sub.add_parser("measure")
    mp.add_argument("batch", choices=sorted(BATCHES))
    mp.add_argument("--stop", action="store_true")
    mp.add_argument("--then-launch", choices=sorted(BATCHES))
    mp.add_argument("--ready-limit", type=float, default=360.0)
    mp.add_argument(
        "--max-repeats", type=int, help="at most this many runs per server (plain has 2)"
    )
    sp = sub.add_parser("stop")
    sp.add_argument("batch", choices=sorted(BATCHES))
    args = p.parse_args()
    if args.cmd == "plan":
        for batch, names in BATCHES.items():
            for name in names:
                print(f"batch {batch} {name}: {' '.join(argv_of(name))}")
    elif args.cmd == "launch":
        launch(args.batch)
    elif args.cmd == "measure":
        measure(args.batch, args.stop, args.then_launch, args.ready_limit, args.max_repeats)
    elif args.cmd == "stop":
        stop(BATCHES[args.batch])
    return 0


if __name__ == "__main__":
    sys.exit(main())
