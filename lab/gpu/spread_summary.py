#!/usr/bin/env python3
"""Here: summarise spread.py's results (issue 34, point 1).

    python3 lab/gpu/spread_summary.py /tmp/spread/spread lab/calibration/h100-vllm-6

Reads every start folder sNN-<name>/ (bench-sc1.json, bench-sc64.json,
samples-*.json.gz, smi-*.csv, start.json, pyspy-engine-sc1.txt,
server.log.gz) and writes into OUT:

- results/sNN-<name>-<load>.json: the bench results (sc1, sc2, sc64, ac64) without
  per-request records
- results/sNN-<name>.start.json: argv, ready time, processes, vCPU probe, and the
  engine's facts from its log (benchgate.confounds.engine_facts)
- results/sNN-<name>.pyspy.txt.gz: the engine's collapsed stacks, where profiled
- results/host.txt, results/runner.log
- summary.json: per start and per trial: tok/s, acceptance, the engine main
  thread's CPU use and run-queue wait, CPU ms per verify step, GPU busy %,
  SM clock, steal; per arm: the start-to-start spread; the profiles' split
- summary.md: the same as tables
"""

from __future__ import annotations

import gzip
import json
import math
import re
import shutil
import statistics as st
import sys
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
from benchgate import confounds  # noqa: E402

TICK = 100.0
# sc1/sc64: the spread experiment's loads; sc2 and ac64 (c64 with 5 trials): the A/B's
LOADS = ("sc1", "sc2", "sc64", "ac64")
ARM = {"v26-off": "off", "v26-d06b-k3": "arm", "v26-d06b-k3-async": "arm+async"}


def ts(s: str) -> float:
    return datetime.fromisoformat(s).timestamp()


def cv(xs: list[float]) -> float | None:
    return 100 * st.pstdev(xs) / st.mean(xs) if len(xs) > 1 and st.mean(xs) else None


def corr(a: list[float], b: list[float]) -> float | None:
    if len(a) < 3:
        return None
    ma, mb = st.mean(a), st.mean(b)
    sa = math.sqrt(sum((x - ma) ** 2 for x in a))
    sb = math.sqrt(sum((y - mb) ** 2 for y in b))
    return sum((x - ma) * (y - mb) for x, y in zip(a, b)) / (sa * sb) if sa and sb else None


def read_smi(path: Path) -> list[tuple[float, float, float, float, float]]:
    rows = []
    if not path.exists():
        return rows
    for ln in path.read_text().splitlines():
        f = [x.strip() for x in ln.split(",")]
        if len(f) < 5:
            continue
        try:
            t = datetime.strptime(f[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
            rows.append((t, float(f[1]), float(f[2]), float(f[3]), float(f[4])))
        except ValueError:
            continue
    return rows


def window(samples: list[dict], t0: float, t1: float) -> tuple[dict, dict] | None:
    """The samples nearest inside [t0, t1]."""
    inside = [s for s in samples if t0 - 0.3 <= s["t"] <= t1 + 0.3]
    if len(inside) < 2:
        return None
    return inside[0], inside[-1]


def host_use(a: dict, b: dict, engine: str | None) -> dict:
    dt = b["t"] - a["t"]
    out: dict = {"dt_s": round(dt, 2)}
    ca, cb = a["stat"]["cpu"], b["stat"]["cpu"]
    tot = sum(cb) - sum(ca)
    if tot > 0:
        out["steal_pct"] = round(100 * (cb[7] - ca[7]) / tot, 2)
        busy = tot - (cb[3] - ca[3]) - (cb[4] - ca[4])
        out["machine_busy_cores"] = round(busy / TICK / dt, 2)
    for proc in ("engine", "api"):
        ta, tb = a["threads"].get(proc, {}), b["threads"].get(proc, {})
        use = {}
        for tid, vb in tb.items():
            va = ta.get(tid)
            if va:
                use[tid] = {
                    "cpu_pct": 100 * (vb[2] - va[2]) / 1e9 / dt,
                    "wait_pct": 100 * (vb[3] - va[3]) / 1e9 / dt,
                    "nvcsw_per_s": (vb[4] - va[4]) / dt,
                    "cpus": sorted({vb[1], va[1]}),
                }
        if not use:
            continue
        out[f"{proc}_total_cpu_pct"] = round(sum(u["cpu_pct"] for u in use.values()), 1)
        top = sorted(use.items(), key=lambda kv: -kv[1]["cpu_pct"])[:4]
        out[f"{proc}_top_threads"] = [
            {"tid": t, **{k: (round(v, 1) if isinstance(v, float) else v) for k, v in u.items()}}
            for t, u in top
        ]
        if proc == "engine" and engine in use:
            u = use[engine]
            out["main_cpu_pct"] = round(u["cpu_pct"], 1)
            out["main_wait_pct"] = round(u["wait_pct"], 1)
            out["main_nvcsw_per_s"] = round(u["nvcsw_per_s"], 1)
            out["main_run_s"] = (
                b["threads"]["engine"][engine][2] - a["threads"]["engine"][engine][2]
            ) / 1e9
            # CPUs the main thread was seen on over the window
            out["main_cpus_seen"] = sorted(
                {s for s in [a["threads"]["engine"][engine][1], b["threads"]["engine"][engine][1]]}
            )
    return out


def gpu_use(rows: list, t0: float, t1: float) -> dict:
    r = [x for x in rows if t0 <= x[0] <= t1]
    if not r:
        return {}
    return {
        "gpu_busy_pct": round(st.mean(x[1] for x in r), 1),
        "sm_clock_mhz": round(st.mean(x[2] for x in r)),
        "sm_clock_min_max": [min(x[2] for x in r), max(x[2] for x in r)],
        "mem_clock_mhz": round(st.mean(x[3] for x in r)),
        "power_w": round(st.mean(x[4] for x in r), 1),
    }


def one_load(d: Path, load: str, engine: str | None) -> dict | None:
    bf = d / f"bench-{load}.json"
    if not bf.exists():
        return None
    data = json.loads(bf.read_text())
    sp = d / f"samples-{load}.json.gz"
    samples = []
    if sp.exists():
        with gzip.open(sp, "rt") as f:
            samples = json.load(f)
    smi = read_smi(d / f"smi-{load}.csv")
    trials = []
    for tr in data["trials"]:
        t0 = ts(tr["started_at"])
        t1 = t0 + tr["duration_s"]
        rec: dict = {
            "index": tr["index"],
            "tok_s": round(tr["metrics"]["output_tokens_per_s"], 2),
            "ttft_ms": round(tr["metrics"]["ttft_ms"]["mean"], 2),
            "duration_s": round(tr["duration_s"], 3),
        }
        sd = (tr.get("server") or {}).get("spec_decode") or {}
        steps = sd.get("drafts")
        if sd:
            rec["acceptance"] = round(sd.get("acceptance_rate") or 0, 4)
            rec["verify_steps"] = steps
        w = window(samples, t0, t1)
        if w:
            rec.update(host_use(*w, engine))
            # CPU time of the main thread per verify step (speculative) or per
            # decode step (plain; one step per token at c1)
            n = steps or (tr["output_tokens"] / max(1, data["workload"].get("concurrency", 1)))
            rec["ms_per_step"] = round(1000 * tr["duration_s"] / n, 3) if n else None
            # The sample window (0.5 s samples, up to 0.3 s either side of the
            # trial) is not the trial: run time over the window divided by the
            # trial's steps overstates or understates by up to ~20 % on 2.5 s
            # trials. The main thread's CPU rate over the window times the
            # trial's time per step does not depend on the window's length.
            if "main_cpu_pct" in rec and rec["ms_per_step"]:
                rec["main_cpu_ms_per_step"] = round(
                    rec["main_cpu_pct"] / 100 * rec["ms_per_step"], 3
                )
        rec.update(gpu_use(smi, t0, t1))
        trials.append(rec)
    tps = [t["tok_s"] for t in trials]
    whole = window(samples, samples[0]["t"], samples[-1]["t"]) if len(samples) > 1 else None
    out = {
        "median_tok_s": round(st.median(tps), 2),
        "trial_cv_pct": round(cv(tps), 2) if cv(tps) is not None else None,
        "trials": trials,
        "bench": host_use(*whole, engine) if whole else {},
        "gpu": gpu_use(smi, samples[0]["t"], samples[-1]["t"]) if samples else {},
    }
    for key in (
        "main_cpu_pct",
        "main_wait_pct",
        "gpu_busy_pct",
        "sm_clock_mhz",
        "steal_pct",
        "main_cpu_ms_per_step",
        "ms_per_step",
        "engine_total_cpu_pct",
        "api_total_cpu_pct",
        "machine_busy_cores",
    ):
        vals = [t[key] for t in trials if t.get(key) is not None]
        if vals:
            out[f"{key}_median"] = round(st.median(vals), 2)
    return out


CATS = [
    ("draft (propose)", re.compile(r"propose \(.*(llm_base_proposer|draft_model|eagle)")),
    ("target forward", re.compile(r"(_model_forward|execute_model) \(.*gpu_model_runner")),
    ("cuda graph replay", re.compile(r"replay \(")),
    ("piecewise backend", re.compile(r"piecewise_backend|PiecewiseBackend|cuda_graph\.py")),
    (
        "attention metadata build",
        re.compile(r"build_per_group_and_layer_attn_metadata|\.build \(.*attention"),
    ),
    ("sample / rejection", re.compile(r"(sample_tokens|rejection_sampler|_sample) \(")),
    ("scheduler", re.compile(r"schedule \(.*scheduler\.py")),
    ("output processing", re.compile(r"update_from_output|_process_engine_step|process_outputs")),
    (
        "synchronise (.item/.tolist/cpu copy)",
        re.compile(r"(tolist|item|to_cpu|_to_list|synchronize)"),
    ),
]


# Each main-thread sample in exactly one bucket, the first that matches. A
# blocking device-to-host copy or event wait spins on the CPU (CUDA's default
# schedule with one context and 16 vCPUs), so py-spy sees it as a running
# Python line, not as idle: those leaf lines are the GPU wait.
WAIT_LEAF = re.compile(
    r"(synchronize \(|_get_valid_sampled_token_count \(|"
    r"parse_output \(vllm/v1/sample/rejection_sampler\.py:273\))"
)
EXCL = [
    ("draft propose (host)", re.compile(r"propose \(|propose_draft_token_ids \(")),
    ("target forward (host)", re.compile(r"(_model_forward|execute_model) \(.*model_runner")),
    ("sampler / rejection / bookkeeping", re.compile(r"sample_tokens \(|_bookkeeping_sync|ampler")),
    ("scheduler", re.compile(r"schedule \(.*scheduler\.py")),
    ("output processing", re.compile(r"update_from_output|process_outputs|AsyncOutput")),
]


def exclusive_split(main: list[tuple[str, int]]) -> dict:
    n_main = sum(n for _, n in main) or 1
    out = {"GPU wait (blocking copy / event sync)": 0}
    out.update({name: 0 for name, _ in EXCL})
    out["other"] = 0
    for stack, n in main:
        leaf = stack.split(";")[-1]
        if WAIT_LEAF.search(leaf):
            out["GPU wait (blocking copy / event sync)"] += n
            continue
        for name, rx in EXCL:
            if rx.search(stack):
                out[name] += n
                break
        else:
            out["other"] += n
    return {k: round(100 * v / n_main, 1) for k, v in out.items()}


def pyspy_split(path: Path, tid: str) -> dict | None:
    if not path.exists():
        return None
    main, total_by_thread = [], {}
    for ln in path.read_text().splitlines():
        m = re.match(r"thread \((\w+)\)(.*) (\d+)$", ln)
        if not m:
            continue
        t, stack, n = m.group(1), m.group(2), int(m.group(3))
        total_by_thread[t] = total_by_thread.get(t, 0) + n
        if t == tid or (t.startswith("0x") and False):
            main.append((stack, n))
    n_main = sum(n for _, n in main)
    if not n_main:
        return {"threads": total_by_thread, "note": "main thread not found"}
    split = {
        name: round(100 * sum(n for s, n in main if rx.search(s)) / n_main, 1) for name, rx in CATS
    }
    leaf: dict[str, int] = {}
    for s, n in main:
        fr = s.split(";")[-1].strip()
        leaf[fr] = leaf.get(fr, 0) + n
    top = sorted(leaf.items(), key=lambda kv: -kv[1])[:12]
    return {
        "main_samples": n_main,
        "threads_samples": total_by_thread,
        "inclusive_pct": split,
        "exclusive_pct": exclusive_split(main),
        "top_leaf_pct": [[f, round(100 * n / n_main, 1)] for f, n in top],
    }


def log_facts(d: Path) -> dict:
    p = d / "server.log.gz"
    if not p.exists():
        return {}
    with gzip.open(p, "rt", errors="replace") as f:
        txt = f.read()
    keep = []
    for pat in (
        "Asynchronous scheduling is",
        "Async scheduling",
        "Model Runner V2",
        "V1 model runner",
        "cudagraph_mode",
        "Capturing CUDA graphs",
        "Graph capturing finished",
        "init engine",
        "torch.compile takes",
        "Directly load the compiled",
        "speculative",
    ):
        for ln in txt.splitlines():
            if pat in ln:
                keep.append(re.sub(r"\x1b\[[0-9;]*m", "", ln)[-300:])
                break
    return {"log_lines": keep}


def main() -> int:
    src, out = Path(sys.argv[1]), Path(sys.argv[2])
    (out / "results").mkdir(parents=True, exist_ok=True)
    for f in ("host.txt", "runner.log"):
        if (src / f).exists():
            shutil.copy(src / f, out / "results" / f)
    starts = []
    for d in sorted(p for p in src.iterdir() if p.is_dir() and re.match(r"s\d\d-", p.name)):
        sj = d / "start.json"
        if not sj.exists():
            starts.append({"dir": d.name, "note": "no start.json (not finished)"})
            continue
        rec = json.loads(sj.read_text())
        engine = str(rec.get("engine_pid")) if rec.get("engine_pid") else None
        s = {
            "n": rec["n"],
            "name": rec["name"],
            "arm": ARM.get(rec["name"], rec["name"]),
            "ready_s": rec.get("ready_s"),
            "ok": rec.get("ok"),
            "engine_found_by": rec.get("engine_found_by"),
        }
        probe = rec.get("cpu_probe_s") or {}
        if probe:
            v = list(probe.values())
            s["vcpu_probe_ms"] = {
                "min": round(1e3 * min(v), 1),
                "median": round(1e3 * st.median(v), 1),
                "max": round(1e3 * max(v), 1),
            }
        for load in LOADS:
            r = one_load(d, load, engine)
            if r:
                s[load] = r
                b = json.loads((d / f"bench-{load}.json").read_text())
                for tr in b.get("trials", []):
                    tr.pop("requests", None)
                (out / "results" / f"{d.name}-{load}.json").write_text(json.dumps(b, indent=1))
        prof = pyspy_split(d / "pyspy-engine-sc1.txt", engine or "")
        if prof:
            s["pyspy_sc1"] = prof
            # gzipped: the raw stacks are 0.1-0.5 MB a start, and what is
            # tracked travels with every carried part (64 MiB in all)
            with gzip.open(out / "results" / f"{d.name}.pyspy.txt.gz", "wb") as f:
                f.write((d / "pyspy-engine-sc1.txt").read_bytes())
        s.update(log_facts(d))
        if (d / "metrics.txt").exists():
            shutil.copy(d / "metrics.txt", out / "results" / f"{d.name}.metrics.txt")
        keep = {
            k: rec[k]
            for k in (
                "n",
                "batch",
                "name",
                "ready_s",
                "argv",
                "api_pid",
                "engine_pid",
                "engine_found_by",
                "processes",
                "thread_names",
                "cpu_probe_s",
                "gpu_apps",
            )
            if k in rec
        }
        # what vLLM said about itself at start-up, read by the product's parser
        # (the A/B's "differs from off in more than speculation" lines)
        if (d / "server.log.gz").exists():
            with gzip.open(d / "server.log.gz", "rt", errors="replace") as f:
                keep["engine"] = confounds.engine_facts(f.read())
        (out / "results" / f"{d.name}.start.json").write_text(json.dumps(keep, indent=1))
        starts.append(s)
    arms: dict = {}
    for s in starts:
        if "arm" not in s:
            continue
        for load in LOADS:
            if load in s:
                arms.setdefault(s["arm"], {}).setdefault(load, []).append(s[load]["median_tok_s"])
    per_arm = {}
    for arm, loads in arms.items():
        per_arm[arm] = {}
        for load, meds in loads.items():
            per_arm[arm][load] = {
                "starts": len(meds),
                "medians": meds,
                "min": min(meds),
                "max": max(meds),
                "spread_pct": round(100 * (max(meds) / min(meds) - 1), 1),
                "cv_across_starts_pct": round(cv(meds), 2) if cv(meds) is not None else None,
                "mean": round(st.mean(meds), 2),
            }
            later = meds[1:]
            if len(later) > 1:
                # each arm's first start compiled from scratch (ready 80-86 s
                # on 2026-12-06 against 44-54 s for the later ones)
                per_arm[arm][load]["spread_pct_later_starts"] = round(
                    100 * (max(later) / min(later) - 1), 1
                )
    # over all speculative trials at c1: does speed follow GPU busy, main-thread CPU per step?
    # Pooled over both speculative arms the arm itself is a confounder (the
    # async arm is faster and busier), so also within each arm.
    rel = {}
    groups = [("sc1", None), ("sc64", None)] + [
        (load, arm) for arm in arms if arm != "off" for load in ("sc1", "sc64")
    ]
    for load, only in groups:
        tr = [
            t
            for s in starts
            if s.get("arm", "off") != "off" and load in s and (only is None or s["arm"] == only)
            for t in s[load]["trials"]
        ]
        pairs = {}
        for key in (
            "gpu_busy_pct",
            "main_cpu_ms_per_step",
            "main_cpu_pct",
            "main_wait_pct",
            "sm_clock_mhz",
            "steal_pct",
            "acceptance",
        ):
            xs = [(t["tok_s"], t[key]) for t in tr if t.get(key) is not None]
            if len(xs) >= 3:
                c = corr([a for a, _ in xs], [b for _, b in xs])
                pairs[key] = round(c, 3) if c is not None else None
        rel[load if only is None else f"{load}, {only}"] = {
            "trials": len(tr),
            "r_tok_s_with": pairs,
        }
    summary = {"starts": starts, "per_arm": per_arm, "speculative_trials": rel}
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    md = [
        "# Issue 34, point 1: spread across server starts (generated by lab/gpu/spread_summary.py)",
        "",
    ]
    head = [
        "start", "arm", "ready s", "c1 tok/s", "c1 CV %", "c64 tok/s", "c64 CV %",
        "main thread CPU % (c1)", "run-queue wait % (c1)", "main CPU ms/step (c1)",
        "ms/step (c1)", "engine proc CPU % (c1)", "GPU busy % c1 / c64", "SM MHz c1",
        "steal % c1 / c64", "acceptance c1", "vCPU probe ms min/med/max",
    ]  # fmt: skip
    md += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for s in starts:
        if "arm" not in s:
            md.append(f"| {s.get('dir')} | - | not finished |" + " |" * (len(head) - 3))
            continue
        a, b = s.get("sc1", {}), s.get("sc64", {})
        acc = [t.get("acceptance") for t in a.get("trials", []) if t.get("acceptance") is not None]
        pr = s.get("vcpu_probe_ms", {})
        cells = [
            s["n"], s["arm"], s.get("ready_s"), a.get("median_tok_s"), a.get("trial_cv_pct"),
            b.get("median_tok_s"), b.get("trial_cv_pct"), a.get("main_cpu_pct_median"),
            a.get("main_wait_pct_median"), a.get("main_cpu_ms_per_step_median"),
            a.get("ms_per_step_median"), a.get("engine_total_cpu_pct_median"),
            f"{a.get('gpu_busy_pct_median')} / {b.get('gpu_busy_pct_median')}",
            a.get("sm_clock_mhz_median"),
            f"{a.get('steal_pct_median')} / {b.get('steal_pct_median')}",
            round(st.median(acc), 3) if acc else "-",
            f"{pr.get('min')}/{pr.get('median')}/{pr.get('max')}",
        ]  # fmt: skip
        md.append("| " + " | ".join(str(c) for c in cells) + " |")
    md += [
        "",
        "| arm | load | starts | medians | spread (max/min - 1) | CV across starts "
        "| spread without the arm's first start |",
        "|---|---|---|---|---|---|---|",
    ]
    for arm, loads in per_arm.items():
        for load, r in loads.items():
            md.append(
                f"| {arm} | {load} | {r['starts']} | {', '.join(str(x) for x in r['medians'])} | "
                f"{r['spread_pct']} % | {r['cv_across_starts_pct']} % | "
                f"{r.get('spread_pct_later_starts', '-')} % |"
            )
    md += [
        "",
        "Correlation of a speculative trial's tok/s with (over all speculative trials, "
        "then within each arm):",
        "",
    ]
    for load, r in rel.items():
        md.append(
            f"- {load} ({r['trials']} trials): "
            + ", ".join(f"{k} r = {v}" for k, v in r["r_tok_s_with"].items())
        )
    for s in starts:
        if s.get("pyspy_sc1"):
            p = s["pyspy_sc1"]
            md += [
                "",
                f"py-spy, start {s['n']} ({s['arm']}), engine main thread, c1 bench: "
                f"{p.get('main_samples')} samples; inclusive: "
                + ", ".join(f"{k} {v} %" for k, v in (p.get("inclusive_pct") or {}).items()),
            ]
            md += [
                "",
                "exclusive (each sample once): "
                + ", ".join(f"{k} {v} %" for k, v in (p.get("exclusive_pct") or {}).items()),
            ]
            md += [
                "",
                "top leaf frames: "
                + "; ".join(f"{f} {v} %" for f, v in p.get("top_leaf_pct", [])[:8]),
            ]
    for s in starts:
        if s.get("log_lines"):
            md += ["", f"start {s['n']} ({s['arm']}) log: " + " | ".join(s["log_lines"][:5])]
    (out / "summary.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
