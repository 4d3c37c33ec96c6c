#!/usr/bin/env python3
"""Issue 34, point 1: where does the speculative arm's start-to-start spread
come from? On the device machine, detached from the call that starts it.

    python3 lab/gpu/spread.py --batches 39,40,41,... [--pyspy 43,44] [--deadline EPOCH]

A batch named `roles` runs `device.sh launch 51 roles bench stop 51` in turn
(issue 34, point 5: the product's modules measure a role-installed server).

For each batch of experiment.py in turn (one server each): launch it, wait
for /health, time a fixed single-thread loop on every vCPU (is one vCPU slower
than another right now?), then bench it at concurrency 1 and 64
(workloads/spread-c1.yml, spread-c64.yml) while sampling, every 0.5 s,

- every thread of the engine process (the one holding GPU memory) and of the
  API server: CPU ticks, last CPU, run and run-queue wait (schedstat),
  involuntary context switches;
- /proc/stat (steal, and the whole machine's busy time);
- nvidia-smi every 200 ms: GPU busy %, SM and memory clocks, power;
- for the batches in --pyspy, a py-spy profile of the engine process during
  the c1 bench (non-blocking, 50 Hz, per thread, collapsed stacks);

then stop the server (its /metrics counters first) and keep its log. Every
argv still comes from experiment.py (benchgate.serve.build_serve_argv).
Results per start under $BG/results/spread/sNN-<name>/; DONE when finished.
Run from a copy under /tmp (device.sh `spread`), never from the working tree.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import experiment as ex  # noqa: E402

OUT = ex.BG / "results" / "spread"
TICK = os.sysconf("SC_CLK_TCK")
PYSPY = ex.BG / "pyspy" / "py-spy"


def log(msg: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {msg}", flush=True)


def children(pid: int) -> list[int]:
    """All descendants of pid (from /proc/*/stat's ppid)."""
    parent: dict[int, int] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            raw = Path(f"/proc/{d}/stat").read_text()
        except OSError:
            continue
        rest = raw[raw.rfind(")") + 2 :].split()
        parent[int(d)] = int(rest[1])
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        kids = [c for c, pp in parent.items() if pp == p]
        out += kids
        todo += kids
    return out


def gpu_pids() -> dict[int, int]:
    try:
        r = subprocess.run(
            ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
        )
    except OSError:
        return {}
    pids = {}
    for ln in r.stdout.splitlines():
        parts = [x.strip() for x in ln.split(",")]
        if len(parts) == 2 and parts[0].isdigit():
            pids[int(parts[0])] = int(parts[1]) if parts[1].isdigit() else 0
    return pids


def engine_of(api: int) -> tuple[int | None, str]:
    """The engine-core process among the API server's descendants."""
    kids = children(api)
    gp = gpu_pids()
    for k in kids:
        try:
            comm = Path(f"/proc/{k}/comm").read_text().strip()
            cmd = (
                Path(f"/proc/{k}/cmdline")
                .read_bytes()
                .replace(b"\0", b" ")
                .decode(errors="replace")
            )
        except OSError:
            continue
        if comm.startswith("VLLM::Engine") or "EngineCore" in cmd:
            return k, f"comm {comm}"
    mine = [k for k in kids if k in gp]
    if mine:
        return max(mine, key=lambda k: gp[k]), "gpu memory"

    def rss(k: int) -> int:
        try:
            for ln in Path(f"/proc/{k}/status").read_text().splitlines():
                if ln.startswith("VmRSS"):
                    return int(ln.split()[1])
        except OSError:
            pass
        return 0

    return (max(kids, key=rss), "largest RSS") if kids else (None, "none")


def thread_snapshot(pid: int) -> dict[str, list]:
    """tid -> [ticks, last cpu, run ns, wait ns, involuntary switches]."""
    snap: dict[str, list] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return snap
    for tid in tids:
        base = f"/proc/{pid}/task/{tid}"
        try:
            raw = Path(f"{base}/stat").read_text()
            rest = raw[raw.rfind(")") + 2 :].split()
            ticks = int(rest[11]) + int(rest[12])  # utime + stime
            cpu = int(rest[36])
            sched = Path(f"{base}/schedstat").read_text().split()
            nvcsw = 0
            for ln in Path(f"{base}/status").read_text().splitlines():
                if ln.startswith("nonvoluntary_ctxt_switches"):
                    nvcsw = int(ln.split()[1])
            snap[tid] = [ticks, cpu, int(sched[0]), int(sched[1]), nvcsw]
        except (OSError, ValueError, IndexError):
            continue
    return snap


def thread_names(pid: int) -> dict[str, str]:
    names = {}
    with contextlib.suppress(OSError):
        for tid in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError):
                names[tid] = Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()
    return names


def proc_stat() -> dict[str, list[int]]:
    out = {}
    for ln in Path("/proc/stat").read_text().splitlines():
        if ln.startswith("cpu"):
            f = ln.split()
            out[f[0]] = [int(x) for x in f[1:9]]  # user nice system idle iowait irq softirq steal
    return out


class Sampler:
    def __init__(self, pids: dict[str, int], period: float = 0.5) -> None:
        self.pids, self.period = pids, period
        self.samples: list[dict] = []
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            t = time.time()
            self.samples.append(
                {
                    "t": round(t, 3),
                    "stat": proc_stat(),
                    "threads": {k: thread_snapshot(p) for k, p in self.pids.items()},
                }
            )
            self._stop.wait(max(0.0, self.period - (time.time() - t)))

    def __enter__(self) -> Sampler:
        self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join()


def cpu_probe(n_loops: int = 1_500_000) -> dict[str, float]:
    """Seconds for a fixed pure-Python loop pinned to each vCPU in turn."""
    out = {}
    old = os.sched_getaffinity(0)
    for cpu in sorted(old):
        os.sched_setaffinity(0, {cpu})
        t0 = time.perf_counter()
        x = 0
        for i in range(n_loops):
            x += i * i
        out[str(cpu)] = round(time.perf_counter() - t0, 5)
    os.sched_setaffinity(0, old)
    return out


def run_start(n: int, batch: str, pyspy: bool, loads: tuple[str, ...] = ("sc1", "sc64")) -> dict:
    name = ex.BATCHES[batch][0]
    d = OUT / f"s{n:02d}-{name}"
    d.mkdir(parents=True, exist_ok=True)
    log(f"start {n} (batch {batch}) {name}: launch")
    ex.launch(batch)
    st0 = ex._state(name)
    ok = ex.wait_ready([name], 420)[name]
    st = ex._state(name)
    rec: dict = {"n": n, "batch": batch, "name": name, "ready_s": st.get("ready_s"), "ok": ok}
    rec["argv"] = st0["argv"]
    if ok:
        api = st["pid"]
        engine, how = engine_of(api)
        rec.update(api_pid=api, engine_pid=engine, engine_found_by=how, gpu_apps=gpu_pids())
        rec["processes"] = {
            str(k): Path(f"/proc/{k}/comm").read_text().strip()
            for k in children(api)
            if Path(f"/proc/{k}/comm").exists()
        }
        pids = {"api": api}
        if engine:
            pids["engine"] = engine
        rec["thread_names"] = {k: thread_names(p) for k, p in pids.items()}
        rec["cpu_probe_s"] = cpu_probe()
        for load in loads:
            smi_f = d / f"smi-{load}.csv"
            smi = subprocess.Popen(
                [
                    "nvidia-smi",
                    "--query-gpu=timestamp,utilization.gpu,clocks.sm,clocks.mem,power.draw,temperature.gpu",
                    "--format=csv,noheader,nounits",
                    "-lms",
                    "200",
                ],
                stdout=open(smi_f, "w"),  # noqa: SIM115
                stderr=subprocess.DEVNULL,
            )
            spy = None
            if pyspy and load == "sc1" and engine and PYSPY.exists():
                spy = subprocess.Popen(
                    [
                        str(PYSPY),
                        "record",
                        "-p",
                        str(engine),
                        "-r",
                        "50",
                        "--nonblocking",
                        "--threads",
                        "-f",
                        "raw",
                        "-d",
                        "25",
                        "-o",
                        str(d / "pyspy-engine-sc1.txt"),
                    ],
                    stdout=open(d / "pyspy.log", "w"),  # noqa: SIM115
                    stderr=subprocess.STDOUT,
                )
            t0 = time.time()
            with Sampler(pids) as s:
                rc = ex.bench(name, load, f"-s{n:02d}")
            rec[f"bench_{load}"] = {"rc": rc, "t0": t0, "t1": time.time()}
            smi.terminate()
            if spy:  # py-spy writes its profile on SIGINT, so a short bench costs no wait
                spy.send_signal(signal.SIGINT)
                try:
                    spy.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    spy.terminate()
            with gzip.open(d / f"samples-{load}.json.gz", "wt") as f:
                json.dump(s.samples, f)
            res = ex.BG / "results" / f"{name}-{load}-s{n:02d}.json"
            if res.exists():
                shutil.move(str(res), d / f"bench-{load}.json")
    ex.stop([name])
    for src, dst in ((f"{name}.metrics.txt", "metrics.txt"),):
        p = ex.BG / "results" / src
        if p.exists():
            shutil.move(str(p), d / dst)
    lg = ex.BG / "logs" / f"{name}.log"
    if lg.exists():
        with open(lg, "rb") as fi, gzip.open(d / "server.log.gz", "wb") as fo:
            shutil.copyfileobj(fi, fo)
    (d / "start.json").write_text(json.dumps(rec, indent=1))
    log(f"start {n} {name}: done (ready {rec.get('ready_s')} s)")
    return rec


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batches", required=True, help="comma-separated experiment.py batches")
    p.add_argument("--pyspy", default="", help="batches whose c1 bench is profiled")
    p.add_argument("--deadline", type=float, help="epoch s: launch no start after deadline-170")
    p.add_argument("--first", type=int, default=1, help="number of the first start")
    p.add_argument(
        "--loads", default="sc1,sc64", help="experiment.py workloads each start runs, in order"
    )
    p.add_argument("--skip", default="", help="server:load pairs not measured (v26-d4b-k3:sc2,...)")
    a = p.parse_args()
    skip = {tuple(pair.split(":", 1)) for pair in a.skip.split(",") if ":" in pair}
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "DONE").unlink(missing_ok=True)
    prof = set(filter(None, a.pyspy.split(",")))
    for i, b in enumerate(a.batches.split(",")):
        if a.deadline and time.time() > a.deadline - 170:
            log(f"deadline: batch {b} and later not started")
            break
        if b == "roles":  # issue 34, point 5: the product's modules on batch 51 (roles.yml)
            log("roles: launch 51, roles bench, stop 51")
            done = subprocess.run(
                ["bash", "lab/gpu/device.sh", "launch", "51", "roles", "bench", "stop", "51"],
                capture_output=True,
                text=True,
            )
            (OUT / "roles.log").write_text(done.stdout + done.stderr)
            log(f"roles: rc {done.returncode}")
            continue
        try:
            name = ex.BATCHES[b][0]
            loads = tuple(x for x in a.loads.split(",") if (name, x) not in skip)
            run_start(a.first + i, b, b in prof, loads)
        except Exception as e:  # keep going: the next start is still worth having
            log(f"start {a.first + i} batch {b} FAILED: {e!r}")
            name = ex.BATCHES[b][0]
            try:
                ex.stop([name])
            except Exception as e2:  # noqa: BLE001
                log(f"stop failed: {e2!r}")
    (OUT / "DONE").write_text(time.strftime("%H:%M:%S\n"))
    log("DONE")
    return 0


if __name__ == "__main__":
    sys.exit(main())
