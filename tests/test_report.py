"""``benchgate report``: HTML and Markdown from a real SQLite ledger, and the HTML in Chromium."""

from __future__ import annotations

import dataclasses
import hashlib
import html
import json
import random
import re
import shutil
import sqlite3
import statistics
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from benchgate import ab, cli, ledger, report, rules, stages
from benchgate.results import summarize_dicts
from benchgate.testing.fakeserver import FakeConfig, serve_in_thread

FIELD_REPORT = [0.793, 0.651, 0.550, 0.453, 0.386]  # per-position acceptance, 4xL4, vLLM 0.32
EVIL = '<script>alert("x")</script> & a|b'


def make_result(
    release: str,
    tput: list[float],
    *,
    ttft: float = 50.0,
    speculative: dict[str, Any] | None = None,
    spec_decode: list[dict[str, Any] | None] | None = None,
    roofline: dict[str, Any] | None = None,
) -> dict[str, Any]:
    target: dict[str, Any] = {
        "base_url": "http://gpu-1:8000",
        "model": "qwen3-14b",
        "server_version": release,
    }
    if speculative is not None:
        target["speculative"] = speculative
    trials = []
    for i, v in enumerate(tput):
        spec = spec_decode[i] if spec_decode else None
        trials.append(
            {
                "index": i,
                "valid": True,
                "metrics": {
                    "output_tokens_per_s": v,
                    "ttft_ms": {"median": ttft + i},
                    "tpot_ms": {"median": 1000.0 / v},
                },
                "server": {"ok": True, "spec_decode": spec},
            }
        )
    result: dict[str, Any] = {
        "schema": "benchgate.result/1",
        "target": target,
        "workload": {"name": "chat-short", "version": 1, "hash": "sha256:abc", "params": {}},
        "trials": trials,
        "summary": {
            "total_trials": len(tput),
            "valid_trials": len(tput),
            "metrics": {
                "output_tokens_per_s": {
                    "samples": tput,
                    "median": sorted(tput)[len(tput) // 2],
                    "better": "higher",
                }
            },
        },
    }
    if roofline is not None:
        result["roofline"] = roofline
    return result


def record(db: Path, results_dir: Path, name: str, result: dict[str, Any], **kwargs: Any) -> int:
    """Write the result file (as the playbook does) and record it in the ledger."""
    path = results_dir / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1), encoding="utf-8")
    return ledger.record_result(db, result, **kwargs)


def spec(rates: list[float], drafts: int = 2522) -> dict[str, Any]:
    return {"drafts": drafts, "per_position_acceptance": rates, "acceptance_rate": 0.567}


@pytest.fixture()
def ledger_db(tmp_path: Path) -> tuple[Path, Path]:
    """gpu-1: 0.31.0 off, 0.32.0 off / ngram-k3 (phase label) / draft-k5 (result mapping);
    gpu-2: one run; verdicts with hostile reasons."""
    db = tmp_path / "artifacts" / "ledger.sqlite"
    res = tmp_path / "artifacts" / "run1"
    b = record(
        db,
        res,
        "gpu-1-baseline",
        make_result("0.31.0", [400.0, 410.0, 405.0]),
        host="gpu-1",
        phase="baseline",
        recorded_at="2026-01-01T10:00:00Z",
    )
    c = record(
        db,
        res,
        "gpu-1-candidate",
        make_result(
            "0.32.0",
            [500.0, 510.0, 505.0],
            roofline={
                "available": True,
                "reason": None,
                "gpu_name": "NVIDIA L4",
                "decode_bound_tokens_per_s": 20.3,
                "efficiency_pct": 62.0,
            },
        ),
        host="gpu-1",
        phase="candidate",
        recorded_at="2026-01-02T10:00:00Z",
    )
    record(
        db,
        res,
        "gpu-1-ngram",
        make_result("0.32.0", [250.0, 255.0, 260.0]),
        host="gpu-1",
        phase="arm:ngram-k3",
        recorded_at="2026-01-02T11:00:00Z",
    )
    record(
        db,
        res,
        "gpu-1-draft",
        make_result(
            "0.32.0",
            [320.0, 325.0, 330.0],
            speculative={
                "method": "draft_model",
                "model": "/models/qwen3-4b",
                "num_speculative_tokens": 5,
            },
            spec_decode=[spec(FIELD_REPORT)] * 3,
            roofline={"available": False, "reason": "nvidia-smi not found"},
        ),
        host="gpu-1",
        phase="candidate",
        recorded_at="2026-01-02T12:00:00Z",
    )
    record(
        db,
        tmp_path / "artifacts" / "run2",
        "gpu-2",
        make_result("0.32.0", [100.0, 101.0, 102.0]),
        host="gpu-2",
        phase="baseline",
        recorded_at="2026-01-03T10:00:00Z",
    )
    ledger.record_verdict(
        db,
        {"verdict": "PASS", "reasons": ["output_tokens_per_s: 405 → 505 tok/s, within"]},
        host="gpu-1",
        release="0.32.0",
        baseline_release="0.31.0",
        phase="candidate",
        baseline_run_id=b,
        candidate_run_id=c,
        recorded_at="2026-01-02T10:05:00Z",
    )
    ledger.record_verdict(
        db,
        {"verdict": "FAIL", "reasons": [EVIL, "second\nline | with pipe"]},
        host="gpu-2",
        release="0.32.0",
        baseline_release="0.31.0",
        phase="candidate",
        recorded_at="2026-01-03T10:05:00Z",
    )
    return db, tmp_path / "artifacts"


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# --------------------------------------------------------------------------- data


def test_arms_medians_and_change_against_off(ledger_db: tuple[Path, Path]) -> None:
    db, _ = ledger_db
    rep = report.load_report(db)
    assert rep.hosts == ["gpu-1", "gpu-2"]
    assert rep.results_matched == 5  # every run found its result file by sha256
    rows = {(r.release, r.arm): r for r in report.arm_rows(rep.runs_of("gpu-1"))}
    assert sorted(rows) == [
        ("0.31.0", "off"),
        ("0.32.0", "draft-k5"),  # from the result's target.speculative
        ("0.32.0", "ngram-k3"),  # from the phase label arm:ngram-k3
        ("0.32.0", "off"),
    ]
    assert rows[("0.32.0", "off")].throughput == 505.0
    assert rows[("0.32.0", "ngram-k3")].change_vs_off_pct == pytest.approx(-49.5, abs=0.05)
    assert rows[("0.32.0", "draft-k5")].change_vs_off_pct == pytest.approx(-35.6, abs=0.05)
    assert rows[("0.31.0", "off")].change_vs_off_pct is None
    assert rows[("0.32.0", "draft-k5")].per_position == pytest.approx(FIELD_REPORT)
    assert rows[("0.32.0", "ngram-k3")].per_position is None
    assert rows[("0.31.0", "off")].ttft_ms == 51.0  # median of the trials' TTFT medians


def test_per_position_is_weighted_by_drafts_and_skips_invalid_trials(tmp_path: Path) -> None:
    db = tmp_path / "ledger.sqlite"
    result = make_result(
        "0.32.0",
        [300.0, 310.0, 320.0],
        speculative={"method": "ngram", "num_speculative_tokens": 2},
        spec_decode=[spec([0.8, 0.6], drafts=1000), spec([0.4, 0.2], drafts=3000), None],
    )
    result["trials"].append(
        {"index": 3, "valid": False, "server": {"spec_decode": spec([0.0, 0.0], drafts=9999)}}
    )
    record(db, tmp_path, "r", result, host="h", phase="candidate")
    [run] = report.load_report(db).runs
    assert run.arm == "ngram-k2"
    assert run.per_position == pytest.approx([0.5, 0.3])  # (0.8*1000 + 0.4*3000) / 4000


def test_result_file_changed_after_recording_is_not_used(tmp_path: Path) -> None:
    db = tmp_path / "ledger.sqlite"
    result = make_result("0.32.0", [300.0], speculative={"method": "ngram"})
    record(db, tmp_path, "r", result, host="h", phase="candidate")
    result["target"]["speculative"] = {"method": "eagle", "num_speculative_tokens": 9}
    (tmp_path / "r.json").write_text(json.dumps(result), encoding="utf-8")
    [run] = report.load_report(db).runs
    assert run.result_source is None
    assert run.arm == "off"  # nothing in the ledger says otherwise
    [run] = report.load_report(db, results_dirs=[]).runs
    assert run.result_source is None


def test_a_ledger_with_the_older_arm_labels_still_reports_its_arms(tmp_path: Path) -> None:
    """Issue 17: arms are written ``arm:<name>`` now; earlier releases wrote
    ``arm-<name>`` (the playbook's arm phase) and ``spec:<name>``."""
    db = tmp_path / "ledger.sqlite"
    for name, phase, tput in (
        ("off", "arm-off", [300.0, 301.0, 302.0]),
        ("ngram", "arm-ngram-k3", [250.0, 255.0, 260.0]),
        ("draft", "spec:draft-k2", [320.0, 325.0, 330.0]),
    ):
        record(db, tmp_path, name, make_result("0.32.0", tput), host="h", phase=phase)
    loaded = report.load_report(db)
    assert sorted(r.arm for r in loaded.runs) == ["draft-k2", "ngram-k3", "off"]
    md = report.render_markdown(loaded)
    assert "| 0.32.0 | ngram-k3 | 1 | 255.0 | 15.3% worse |" in md


def test_arm_names() -> None:
    assert report.arm_of("baseline", None) == "off"
    assert report.arm_of("candidate", {}) == "off"
    assert report.arm_of("arm:off", {"method": "ngram"}) == "off"
    # A later server start of an arm (the A/B's check across starts) is the same arm.
    assert report.arm_of("arm:ngram-k3#2", None) == "ngram-k3"
    assert report.arm_of("arm:off#3", None) == "off"
    assert report.arm_of("arm-eagle-k2", None) == "eagle-k2"
    assert report.arm_of("spec:ngram-k3", None) == "ngram-k3"
    assert report.arm_of("candidate", {"method": "ngram", "num_speculative_tokens": 3}) == (
        "ngram-k3"
    )
    assert report.arm_of("candidate", {"model": "/m/draft", "num_speculative_tokens": 4}) == (
        "draft-k4"
    )


def test_ledger_speculative_column_wins_over_the_result(tmp_path: Path) -> None:
    db = tmp_path / "ledger.sqlite"
    run_id = ledger.record_result(db, make_result("0.32.0", [300.0]), host="h", phase="candidate")
    [run] = ledger.runs(db)
    verdicts: list[ledger.VerdictRecord] = []
    rep = report.build_report(
        [run],
        verdicts,
        extra_columns={run_id: {"speculative_json": '{"method": "ngram", "k": 2}'}},
    )
    assert [r.arm for r in rep.runs] == ["ngram-k2"]


def test_speculative_column_and_ab_choices_from_the_ledger(tmp_path: Path) -> None:
    db = tmp_path / "ledger.sqlite"
    ngram = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3}
    ledger.record_result(
        db, make_result("0.32.0", [200.0]), host="h", phase="candidate", speculative=ngram
    )
    ledger.record_result(db, make_result("0.32.0", [400.0]), host="h", phase="baseline")
    ledger.record_ab_choice(
        db,
        {"objective": "output_tokens_per_s", "winner": "off", "config": {},
         "reason": "ngram-k3 is 50% slower <b>", "arms": []},
        host="h",
        release="0.32.0",
    )  # fmt: skip
    ledger.record_ab_choice(
        db,
        {"objective": "goodput", "winner": None, "config": {}, "reason": "no arm", "arms": []},
        host="other",
    )
    rep = report.load_report(db, results_dirs=[], host="h")
    assert sorted(r.arm for r in rep.runs) == ["ngram-k3", "off"]
    assert [r.speculative for r in rep.runs if r.arm != "off"] == [ngram]
    assert [c["winner"] for c in rep.ab_choices] == ["off"]  # --host filters them too
    page = report.render_html(rep)
    assert "Speculative A/B choices" in page
    assert "ngram-k3 is 50% slower &lt;b&gt;" in page
    md = report.render_markdown(rep)
    assert "winner **off** — ngram-k3 is 50% slower &lt;b&gt;" in md
    [row] = report.arm_rows(rep.runs_of("h"))[1:]
    assert row.change_vs_off_pct == pytest.approx(-50.0)
    assert "winner **none**" in report.render_markdown(report.load_report(db, host="other"))


def test_old_ledger_is_read_without_being_changed(tmp_path: Path) -> None:
    """A schema-1 ledger file: reported from an in-memory copy, the file left as it was."""
    db = tmp_path / "old.sqlite"
    conn = sqlite3.connect(db)
    conn.executescript(ledger.MIGRATIONS[0])
    conn.execute("CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_at TEXT)")
    conn.execute("INSERT INTO schema_version VALUES (1, '2025-01-01T00:00:00Z')")
    conn.execute(
        "INSERT INTO runs (recorded_at, host, phase, release, summary_json, result_sha256) "
        "VALUES ('2025-01-01T00:00:00Z', 'old-host', 'baseline', '0.9.2', ?, 'x')",
        (json.dumps({"metrics": {"output_tokens_per_s": {"median": 123.0}}}),),
    )
    conn.commit()
    conn.close()
    before = _sha(db)
    rep = report.load_report(db)
    assert [(r.host, r.release, r.throughput) for r in rep.runs] == [("old-host", "0.9.2", 123.0)]
    assert "123.0" in report.render_markdown(rep)
    assert _sha(db) == before


def test_not_a_ledger_is_an_error(tmp_path: Path) -> None:
    other = tmp_path / "other.sqlite"
    sqlite3.connect(other).execute("CREATE TABLE t (x)").connection.close()
    with pytest.raises(ValueError, match="not a benchgate ledger"):
        report.load_report(other)
    with pytest.raises(FileNotFoundError):
        report.load_report(tmp_path / "missing.sqlite")
    assert not (tmp_path / "missing.sqlite").exists()


# --------------------------------------------------------------------------- HTML


class _Dom(HTMLParser):
    """Figures with their SVGs, element counts and all text of an HTML document."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[tuple[str, dict[str, str | None]]] = []
        self.figures: dict[str, dict[str, int]] = {}
        self.counts: dict[str, int] = {}
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.counts[tag] = self.counts.get(tag, 0) + 1
        a = dict(attrs)
        if tag == "figure" and "chart" in (a.get("class") or ""):
            self.figures[str(a.get("id"))] = {}
        fig = next((dict(x[1]).get("id") for x in self.stack if x[0] == "figure"), None)
        if fig in self.figures:
            self.figures[str(fig)][tag] = self.figures[str(fig)].get(tag, 0) + 1
        if tag not in ("meta", "br", "path", "use", "rect", "line", "polyline", "circle"):
            self.stack.append((tag, a))

    def handle_endtag(self, tag: str) -> None:
        for i in range(len(self.stack) - 1, -1, -1):
            if self.stack[i][0] == tag:
                del self.stack[i:]
                break

    def handle_data(self, data: str) -> None:
        if not any(t in ("style", "script") for t, _ in self.stack):
            self.text.append(data)


def parse(text: str) -> _Dom:
    dom = _Dom()
    dom.feed(text)
    return dom


def test_html_has_charts_tables_and_escaped_reasons(ledger_db: tuple[Path, Path]) -> None:
    db, _ = ledger_db
    rep = report.load_report(db, reference_acceptance=FIELD_REPORT, reference_label="field report")
    page = report.render_html(rep)
    dom = parse(page)
    text = " ".join(" ".join(dom.text).split())

    # No scripts at all, nothing fetched from elsewhere.
    assert dom.counts.get("script", 0) == 0
    assert not re.search(r'(src|href)="(https?:)?//', page)
    # The hostile reason is text, not markup.
    assert "<script>" not in page
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; a|b" in page
    assert EVIL in text  # and reads back as the original text

    # Charts: over time and spec A/B per host, acceptance for gpu-1, and the reference.
    kinds = sorted(fid.rsplit("-", 1)[-1] for fid in dom.figures)
    assert kinds == ["accept", "accept", "specab", "specab", "time", "time"]
    ids = re.findall(r'\sid="([^"]+)"', page)
    assert len(ids) == len(set(ids)) > 100  # the SVGs' element ids are unique on the page
    for ref in set(re.findall(r'(?:href="#|url\(#)([^")]+)', page)):
        assert ref in ids, ref
    for fid, tags in dom.figures.items():
        assert tags.get("svg") == 1, fid
        assert tags.get("path", 0) >= 5, (fid, tags)  # drawn, not an empty frame
    # Text in the SVGs stays text (legends name the release and arm).
    assert "0.32.0 · spec draft-k5" in text
    assert "0.32.0 · draft-k5" in text  # acceptance table and chart label

    # Tables: the spec on/off change, per-position acceptance, roofline.
    assert re.search(
        r"ngram-k3</td><td class=\"num\">1</td><td class=\"num\">255.0</td>"
        r"<td class=\"num\">49.5% worse</td>",
        page,
    )
    for pct in ("79.3%", "65.1%", "55.0%", "45.3%", "38.6%"):
        assert pct in text
    assert "62.0%" in text  # roofline efficiency of the 0.32.0 candidate
    assert "gpu_name=NVIDIA L4, decode_bound_tokens_per_s=20.3" in text
    assert "1 run(s): not measured (nvidia-smi not found)" in text
    assert "2 run(s): not measured." in text  # no roofline block at all
    assert "Roofline efficiency: not measured." in text  # gpu-2
    # Verdict history, newest first, every reason.
    assert text.index("FAIL") < text.index("PASS", text.index("Verdict history"))
    assert "second line | with pipe" in text


def test_markdown_escapes_table_cells(ledger_db: tuple[Path, Path]) -> None:
    db, _ = ledger_db
    md = report.render_markdown(report.load_report(db))
    assert "| 0.32.0 | ngram-k3 | 1 | 255.0 | 49.5% worse |" in md
    assert "| 0.32.0 | draft-k5 | 1 | 325.0 | 35.6% worse |" in md
    assert "| 0.32.0 · draft-k5 | 79.3% | 65.1% | 55.0% | 45.3% | 38.6% |" in md
    assert "Latest verdict: **FAIL** (0.31.0 → 0.32.0" in md
    fail_row = next(line for line in md.splitlines() if "**FAIL**" in line and "gpu-2 |" in line)
    assert "&lt;script&gt;" in fail_row and "<script>" not in md
    assert "a\\|b" in fail_row and "second line \\| with pipe" in fail_row
    assert fail_row.count(" | ") == 5  # six cells: the pipes in reasons did not add columns
    assert "Roofline efficiency: not measured." in md  # gpu-2
    assert "| 2026-01-02 10:00:00 | 0.32.0 | off | 62.0% |" in md
    assert "Roofline: 1 run(s): not measured (nvidia-smi not found)." in md


def test_roofline_efficiency_forms() -> None:
    assert report.roofline_efficiency({"efficiency_pct": 83.1}) == 83.1
    assert report.roofline_efficiency({"efficiency": 0.5}) == 50.0
    assert report.roofline_efficiency({"available": False, "reason": "no GPU"}) is None
    assert report.roofline_efficiency(None) is None


def test_cli_writes_html_and_markdown(
    ledger_db: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db, _ = ledger_db
    before = _sha(db)
    html_out, md_out = tmp_path / "out" / "r.html", tmp_path / "out" / "r.md"
    rc = cli.main(
        ["report", "--db", str(db), "-o", str(html_out), "--markdown", str(md_out),
         "--reference-acceptance", "79.3,65.1,55.0,45.3,38.6", "--title", "Fleet <A>"]
    )  # fmt: skip
    assert rc == 0
    page = html_out.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and "<title>Fleet &lt;A&gt;</title>" in page
    assert 'id="reference-accept"' in page
    assert md_out.read_text(encoding="utf-8").startswith("## Fleet &lt;A&gt;")
    assert _sha(db) == before  # the report never writes to the ledger

    assert cli.main(["report", "--db", str(db), "--format", "markdown", "--host", "gpu-2"]) == 0
    out = capsys.readouterr().out
    assert "### gpu-2" in out and "### gpu-1" not in out

    assert cli.main(["report", "--db", str(tmp_path / "nope.sqlite")]) == 3
    assert "no ledger at" in capsys.readouterr().err
    assert cli.main(["report", "--db", str(db), "--reference-acceptance", "x,y"]) == 3


# --------------------------------------------------------------------------- Chromium

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None,
    reason="chromium is not installed (apt-get install chromium; scripts/bootstrap.sh does)",
)


def run_chromium(tmp_path: Path, page: Path, *args: str) -> subprocess.CompletedProcess[str]:
    profile = tmp_path / f"profile-{len(list(tmp_path.glob('profile-*')))}"
    return subprocess.run(
        [
            str(CHROMIUM),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            f"--user-data-dir={profile}",
            "--enable-logging=stderr",
            "--v=0",
            *args,
            page.resolve().as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=180,
        check=True,
    )


def console_messages(stderr: str) -> list[str]:
    """What the page wrote to the console (errors, uncaught exceptions)."""
    return [line for line in stderr.splitlines() if ":CONSOLE" in line]


def chart_pixels(png: Path) -> tuple[int, int]:
    """(pixels in the charts' colours, chart bands): bands are runs of rows with such pixels."""
    import numpy as np
    from PIL import Image

    img = np.asarray(Image.open(png).convert("RGB"), dtype=np.int32)
    palette = [[int(c[i : i + 2], 16) for i in (1, 3, 5)] for c in report.PALETTE[:4]]
    hit = np.zeros(img.shape[:2], dtype=bool)
    for colour in palette:
        hit |= np.abs(img - np.array(colour)).sum(axis=2) < 40
    per_row = hit.sum(axis=1)
    bands, last = 0, -1000
    for y in np.flatnonzero(per_row >= 10):
        if y - last > 40:
            bands += 1
        last = int(y)
    return int(hit.sum()), bands


@needs_chromium
def test_chromium_console_check_catches_script_errors(tmp_path: Path) -> None:
    """The check used below sees a broken page (so its silence on the report means something)."""
    bad = tmp_path / "bad.html"
    bad.write_text("<!DOCTYPE html><p>x</p><script>missingFunction();</script>", encoding="utf-8")
    proc = run_chromium(tmp_path, bad, "--dump-dom")
    assert any("missingFunction" in m for m in console_messages(proc.stderr))


@needs_chromium
def test_report_renders_in_chromium(ledger_db: tuple[Path, Path], tmp_path: Path) -> None:
    db, _ = ledger_db
    rep = report.load_report(db, reference_acceptance=FIELD_REPORT)
    page = report.render_html(rep)
    html_path = tmp_path / "report.html"
    html_path.write_text(page, encoding="utf-8")

    # The browser's DOM has the SVG charts, drawn, and the page logged nothing.
    proc = run_chromium(tmp_path, html_path, "--dump-dom")
    assert console_messages(proc.stderr) == []
    dom = parse(proc.stdout)
    assert len(dom.figures) == 6  # 2 hosts x (time, spec A/B) + gpu-1 acceptance + reference
    assert all(tags.get("svg") == 1 and tags.get("path", 0) >= 5 for tags in dom.figures.values())
    assert "Verdict history" in " ".join(dom.text)

    # The screenshot shows the charts: their colours, in separate bands down the page.
    shot = tmp_path / "report.png"
    proc = run_chromium(tmp_path, html_path, f"--screenshot={shot}", "--window-size=1200,6000")
    assert console_messages(proc.stderr) == []
    pixels, bands = chart_pixels(shot)
    assert pixels > 20000, pixels
    assert bands >= 6, bands

    # The same page without its SVGs has none of those pixels: they come from the charts.
    bare = tmp_path / "bare.html"
    bare.write_text(re.sub(r"<svg.*?</svg>", "", page, flags=re.S), encoding="utf-8")
    bare_shot = tmp_path / "bare.png"
    run_chromium(tmp_path, bare, f"--screenshot={bare_shot}", "--window-size=1200,6000")
    assert chart_pixels(bare_shot)[0] < pixels / 50


def test_vs_off_is_the_ab_estimate_when_the_ledger_has_the_ab() -> None:
    """Issue 20: the A/B table said ngram -10.9% vs off while the report said
    +2.7% for the same runs. The report now shows the A/B's own estimate."""
    from benchgate.report import arm_rows
    from benchgate.report.data import RunView

    def run(i: int, arm: str, tput: float) -> RunView:
        return RunView(
            id=i, recorded_at="2026-12-05T00:00:00Z", host="h", phase=f"arm:{arm}",
            release="0.32.0", arm=arm, speculative=None, model=None, workload="demo",
            hardware=None, throughput=tput, throughput_samples=[tput], ttft_ms=None,
            tpot_ms=None, acceptance_rate=None, per_position=None, roofline=None,
            result_source=None,
        )  # fmt: skip

    runs = [run(1, "off", 330.1), run(2, "ngram-k3", 338.9)]
    by_medians = {r.arm: r.change_vs_off_pct for r in arm_rows(runs)}
    assert by_medians["ngram-k3"] == pytest.approx(2.67, abs=0.01)
    choice = {
        "release": "0.32.0",
        "arms": [{"name": "off", "gain_pct": None}, {"name": "ngram-k3", "gain_pct": -10.9}],
    }
    by_ab = {r.arm: r.change_vs_off_pct for r in arm_rows(runs, [choice])}
    assert by_ab == {"off": None, "ngram-k3": -10.9}
    # Written as the A/B table writes it: better or worse, with the A/B's interval.
    from benchgate.report.aggregates import vs_off_text

    choice["arms"][1].update(gain_lo_pct=-15.0, gain_hi_pct=-6.0)
    cells = {r.arm: vs_off_text(r) for r in arm_rows(runs, [choice])}
    assert cells == {"off": "-", "ngram-k3": "10.9% worse (15.0% worse to 6.0% worse)"}
    assert {r.arm: vs_off_text(r) for r in arm_rows(runs)}["ngram-k3"] == "2.7% better"


# --------------------------------------------------------------------------- staged runs

REPO = Path(__file__).resolve().parents[1]
STAGED_WORKLOAD = str(REPO / "workloads" / "demo-staged.yml")
TPUT = "output_tokens_per_s"


def staged_result(
    release: str, levels: dict[str, float], *, n: int = 8, seed: int = 0, ttft: float = 50.0
) -> dict[str, Any]:
    """A staged result as ``benchgate bench`` writes one: ``n`` trials per stage around each
    stage's tok/s, the ``stages`` block with each stage's load and summary."""
    rng = random.Random(seed)
    trials: list[dict[str, Any]] = []
    for c, (name, level) in enumerate(levels.items(), start=1):
        for _ in range(n):
            v = level * (1 + rng.gauss(0, 0.02))
            trials.append(
                {
                    "index": len(trials),
                    "valid": True,
                    "stage": name,
                    "metrics": {
                        TPUT: v,
                        "ttft_ms": {"median": ttft * c * (1 + rng.gauss(0, 0.02))},
                        "tpot_ms": {"median": 1000.0 / v},
                    },
                    "server": {"ok": False},
                }
            )
    stage_blocks = [
        {
            "name": name,
            "params": {"concurrency": c, "trials": n},
            "summary": dataclasses.asdict(
                summarize_dicts([t for t in trials if t["stage"] == name])
            ),
        }
        for c, name in enumerate(levels, start=1)
    ]
    return {
        "schema": "benchgate.result/1",
        "target": {"base_url": "http://gpu-1:8000", "model": "tiny", "server_version": release},
        "workload": {
            "name": "demo-staged",
            "version": 1,
            "hash": "h",
            "params": {"stages": [{"name": name} for name in levels]},
        },
        "trials": trials,
        "summary": dataclasses.asdict(summarize_dicts(trials)),
        "stages": stage_blocks,
    }


def stage_table(page: str, stage: str) -> str:
    """The HTML table under a stage's heading."""
    m = re.search(rf'data-stage="{re.escape(stage)}">[^<]*</h4>(<table>.*?</table>)', page)
    assert m, f"no table for stage {stage}"
    return m.group(1)


def staged_verdict_cells(page: str) -> dict[str, str]:
    """Stage -> the stage verdict shown in the staged gate verdict table."""
    return dict(
        re.findall(
            r'<tr><td>(\w+)</td><td>[^<]*</td><td><span class="verdict verdict-(\w+)">', page
        )
    )


def test_real_staged_results_show_every_stage(tmp_path: Path) -> None:
    """Two staged results from ``benchgate bench`` (the fake server), judged stage by stage:
    each stage's figures are its own trials', and its verdict is the gate's."""
    arts = tmp_path / "artifacts"
    quick = ["--trials", "2", "--num-requests", "4", "--output-len", "8", "--warmup", "1"]
    paths = {}
    with serve_in_thread(FakeConfig(ttft_s=0.002, itl_s=0.001)) as srv:
        for side in ("baseline", "candidate"):
            paths[side] = arts / "run1" / "cpu-1" / f"{side}.json"
            argv = ["bench", "--base-url", srv.base_url, "--workload", STAGED_WORKLOAD]
            code = cli.main([*argv, *quick, "--quiet", "-o", str(paths[side])])
            assert code == 0
    base, cand = (json.loads(paths[s].read_text()) for s in ("baseline", "candidate"))
    db = arts / "ledger.sqlite"
    ids = {
        side: ledger.record_result(db, result, host="cpu-1", phase=side, release=rel)
        for side, result, rel in (("baseline", base, "0.31.0"), ("candidate", cand, "0.32.0"))
    }
    verdict = stages.judge_staged(base, cand).to_dict()
    ledger.record_verdict(
        db,
        verdict,
        host="cpu-1",
        release="0.32.0",
        baseline_release="0.31.0",
        phase="candidate",
        baseline_run_id=ids["baseline"],
        candidate_run_id=ids["candidate"],
    )

    rep = report.load_report(db)
    assert rep.results_matched == 2
    views = {r.phase: r for r in rep.runs_of("cpu-1")}
    for side, result in (("baseline", base), ("candidate", cand)):
        got = views[side].stages
        assert [s.name for s in got] == ["single", "busy"]
        assert [s.params["concurrency"] for s in got] == [1, 4]
        for s, block in zip(got, result["stages"]):
            metrics = block["summary"]["metrics"]
            assert s.throughput == metrics[TPUT]["median"]
            own = [t["metrics"][TPUT] for t in result["trials"] if t["stage"] == s.name]
            assert s.throughput == statistics.median(own)  # this stage's trials, not all
            assert s.ttft_ms == metrics["ttft_ms.median"]["median"]
            assert s.valid_trials == 2

    page = report.render_html(rep)
    dom = parse(page)
    text = " ".join(" ".join(dom.text).split())
    assert "Stage single (concurrency 1)" in text and "Stage busy (concurrency 4)" in text
    assert "Per release and speculative arm" not in text  # no pooled table of staged runs
    for i, name in enumerate(["single", "busy"]):
        table = stage_table(page, name)
        for rel, result in (("0.31.0", base), ("0.32.0", cand)):
            tput = result["stages"][i]["summary"]["metrics"][TPUT]["median"]
            assert f'<td>{rel}</td><td>off</td><td class="num">1</td>' in table
            assert f'<td class="num">{tput:,.1f}</td>' in table
    # The gate's verdict of every stage, as it recorded it.
    shown = staged_verdict_cells(page)
    assert shown == {s["stage"]: s["verdict"] for s in verdict["stages"]}
    assert f"alpha {verdict['alpha']:g} split over 2 stages (Bonferroni)" in text
    # Charts: every stage side by side, and each stage over time; all drawn.
    kinds = sorted(re.sub(r"^host-.*-[0-9a-f]{8}-", "", fid) for fid in dom.figures)
    assert kinds == ["stage0-time", "stage1-time", "stages"], kinds
    for fid, tags in dom.figures.items():
        assert tags.get("svg") == 1 and tags.get("path", 0) >= 5, (fid, tags)

    md = report.render_markdown(rep)
    assert "Stage **single (concurrency 1)**:" in md and "Stage **busy (concurrency 4)**:" in md
    for s in verdict["stages"]:
        assert re.search(rf"\| {s['stage']} \| concurrency \d \| \*\*{s['verdict']}\*\* \|", md)


def test_unstaged_runs_get_no_stage_sections(ledger_db: tuple[Path, Path]) -> None:
    db, _ = ledger_db
    rep = report.load_report(db)
    assert all(r.stages == () for r in rep.runs)
    page, md = report.render_html(rep), report.render_markdown(rep)
    assert "Stage" not in page and "Stage" not in md and "data-stage" not in page


def _words(pct: float) -> str:
    """A change of tokens/s in words: "20.1% worse", "0.4% better"."""
    if abs(pct) < 0.05:
        return "no change"
    return f"{abs(pct):.1f}% {'worse' if pct < 0 else 'better'}"


def test_staged_verdict_names_the_failed_stage_with_its_estimate_and_interval(
    tmp_path: Path,
) -> None:
    db = tmp_path / "ledger.sqlite"
    base = staged_result("0.31.0", {"single": 100.0, "busy": 400.0}, seed=1)
    cand = staged_result("0.32.0", {"single": 100.0, "busy": 320.0}, seed=2)  # busy -20%
    b = record(db, tmp_path, "b", base, host="gpu-1", phase="baseline")
    c = record(db, tmp_path, "c", cand, host="gpu-1", phase="candidate")
    verdict = stages.judge_staged(base, cand, rules.make_specs(metrics=[TPUT]))
    assert [s.verdict.verdict for s in verdict.stages] == ["PASS", "FAIL"]
    ledger.record_verdict(
        db,
        verdict.to_dict(),
        host="gpu-1",
        release="0.32.0",
        baseline_release="0.31.0",
        phase="candidate",
        baseline_run_id=b,
        candidate_run_id=c,
    )
    rep = report.load_report(db)
    page = report.render_html(rep)
    text = " ".join(" ".join(parse(page).text).split())
    assert staged_verdict_cells(page) == {"single": "PASS", "busy": "FAIL"}
    for s in verdict.stages:
        m = s.verdict.metric(TPUT)
        assert m.change_pct is not None and m.change_lo_pct is not None
        # In words, worst end first, as the gate's own table writes them.
        hi = "unbounded" if m.change_hi_pct is None else _words(m.change_hi_pct)
        interval = f"95% {_words(m.change_lo_pct)} to {hi}"  # alpha 0.025 per stage
        # Issue 35: where the medians point the other way, the change is marked and
        # the note under the table says why, in the words of the gate's reason.
        change = _words(m.change_pct) + (" †" if m.note() else "")
        if m.note():
            assert html.escape(f"† {s.stage}, {TPUT}: {m.note()}") in page
        row = (
            f'{TPUT} *</td><td class="num">{m.baseline_median:,.2f}</td>'
            f'<td class="num">{m.candidate_median:,.2f}</td>'
            f'<td class="num">{html.escape(change)}</td><td class="num">{interval}</td>'
            f'<td class="num">5.0%</td><td>{m.verdict}</td>'
        )
        assert row in page, row
    assert -25 < verdict.stage("busy").verdict.metric(TPUT).change_pct < -15  # type: ignore[operator]
    assert any(r.startswith("stage busy: ") for r in verdict.reasons)
    for r in verdict.stage("busy").verdict.reasons:
        assert r in text
    # The verdict history names every stage's verdict under the overall one.
    assert "FAIL single: PASS busy: FAIL" in text

    md = report.render_markdown(rep)
    busy = verdict.stage("busy").verdict.metric(TPUT)
    assert f"| busy | concurrency 2 | **FAIL** | 0.0250 | {TPUT} \\* |" in md
    assert f"| {_words(busy.change_pct)} |" in md
    assert "**FAIL**<br>single: PASS<br>busy: FAIL" in md


def staged_ab_ledger(tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    """A staged A/B recorded as benchgate_speculative_ab records one: ngram-k3 helps at
    single (+40%) and hurts at busy (-25%), so off serves."""
    db = tmp_path / "ledger.sqlite"
    levels = {"off": {"single": 100.0, "busy": 400.0}, "ngram-k3": {"single": 140.0, "busy": 300.0}}
    arms = [ab.Arm("off", {}), ab.Arm("ngram-k3", {"method": "ngram", "num_speculative_tokens": 3})]
    results = {
        name: staged_result("0.32.0", lv, seed=i) for i, (name, lv) in enumerate(levels.items())
    }
    for arm in arms:
        record(
            db,
            tmp_path,
            arm.name,
            results[arm.name],
            host="gpu-1",
            phase=f"arm:{arm.name}",
            speculative=arm.config,
        )
    choice = ab.choose_staged(arms, results)
    data = choice.to_dict()
    ledger.record_ab_choice(db, data, host="gpu-1", release="0.32.0")
    assert choice.winner == "off"
    return db, data


def test_staged_ab_shows_every_arm_at_every_stage(tmp_path: Path) -> None:
    db, data = staged_ab_ledger(tmp_path)
    ngram = next(a for a in data["arms"] if a["name"] == "ngram-k3")
    assert "slower at busy" in ngram["status"]
    gains = {st: ngram["stages"][st]["gain_pct"] for st in ("single", "busy")}
    assert gains["single"] > 30 and gains["busy"] < -20

    rep = report.load_report(db)
    page = report.render_html(rep)
    text = " ".join(" ".join(parse(page).text).split())
    assert "Staged speculative A/B" in text
    # Stages in the order they ran (the ledger sorts the arms' stage keys: busy < single).
    ab_at = page.index("Staged speculative A/B")
    assert page.index("<td>single</td><td>off</td>", ab_at) < page.index(
        "<td>busy</td><td>off</td>", ab_at
    )
    for st in ("single", "busy"):
        here = ngram["stages"][st]
        lo, hi = here["gain_lo_pct"], here["gain_hi_pct"]
        bounds = f"{_words(lo)} to " + ("unbounded" if hi is None else _words(hi))
        row = (
            f'<td>ngram-k3</td><td class="num">{here["output_tokens_per_s"]:,.1f}</td>'
            f'<td class="num">{here["ttft_ms"]:,.1f}</td>'
            f'<td class="num">{here["tpot_ms"]:,.2f}</td><td class="num">-</td>'
            f'<td class="num">{_words(here["gain_pct"])}</td><td class="num">{bounds}</td>'
            f"<td>{'faster' if here['status'] == 'winner' else here['status']}</td>"
        )
        assert row in page, row
        # The stage's table takes the A/B's estimate at that stage as "vs off".
        assert (
            f'<td>ngram-k3</td><td class="num">1</td>'
            f'<td class="num">{here["output_tokens_per_s"]:,.1f}</td>'
            f'<td class="num">{_words(gains[st])}'
        ) in stage_table(page, st)
    assert f"ngram-k3 {ngram['status']}" in text  # where it helps and where it hurts
    md = report.render_markdown(rep)
    assert f"|  | ngram-k3 | {ngram['stages']['single']['output_tokens_per_s']:,.1f} |" in md
    assert f"- ngram-k3: {ngram['status']}" in md


@needs_chromium
def test_staged_report_renders_in_chromium(tmp_path: Path) -> None:
    db, _ = staged_ab_ledger(tmp_path)
    html_path = tmp_path / "staged.html"
    html_path.write_text(report.render_html(report.load_report(db)), encoding="utf-8")
    proc = run_chromium(tmp_path, html_path, "--dump-dom")
    assert console_messages(proc.stderr) == []
    dom = parse(proc.stdout)
    assert len(dom.figures) == 3  # every stage side by side, each stage over time
    assert all(tags.get("svg") == 1 and tags.get("path", 0) >= 5 for tags in dom.figures.values())
    text = " ".join(" ".join(dom.text).split())
    assert "Stage single (concurrency 1)" in text and "Staged speculative A/B" in text


# --------------------------------------------------------------------------
# Issue 35: acceptance at every stage, configurations apart, layout
# --------------------------------------------------------------------------


def _with_acceptance(result: dict[str, Any], rate: float) -> dict[str, Any]:
    """``result`` with server counters of speculative decoding in every trial, and its
    stages' summaries again (they then carry ``spec.acceptance_rate``, flat-keyed)."""
    for i, t in enumerate(result["trials"]):
        here = rate + 0.01 * (i % 3)
        t["server"] = {
            "ok": True,
            "spec_decode": {
                "drafts": 100 + i,
                "draft_tokens": 300,
                "accepted_tokens": 300 * here,
                "acceptance_rate": here,
                "per_position_acceptance": [here],
            },
        }
    for block in result["stages"]:
        trials = [t for t in result["trials"] if t["stage"] == block["name"]]
        block["summary"] = dataclasses.asdict(summarize_dicts(trials))
    return result


def test_stage_tables_show_the_acceptance_the_staged_ab_shows(tmp_path: Path) -> None:
    """Issue 35, 2: the A/B table showed 68.3% and 46.3%, the stage tables "-": a
    stage's summary keys its metrics flat ("spec.acceptance_rate"), which the report
    read as a path. A gate's candidate of an arm ("candidate:arm:ngram-k3") is that arm."""
    db = tmp_path / "ledger.sqlite"
    levels = {"off": {"single": 100.0, "busy": 400.0}, "ngram-k3": {"single": 140.0, "busy": 300.0}}
    arms = [ab.Arm("off", {}), ab.Arm("ngram-k3", {"method": "ngram", "num_speculative_tokens": 3})]
    results = {
        name: staged_result("0.32.0", lv, seed=i) for i, (name, lv) in enumerate(levels.items())
    }
    _with_acceptance(results["ngram-k3"], 0.683)
    for arm in arms:
        record(db, tmp_path, arm.name, results[arm.name], host="gpu-1", phase=f"arm:{arm.name}")
    choice = ab.choose_staged(arms, results)
    ledger.record_ab_choice(db, choice.to_dict(), host="gpu-1", release="0.32.0")
    rep = report.load_report(db)
    page = report.render_html(rep)
    md = report.render_markdown(rep)
    for st in ("single", "busy"):
        here = next(a for a in choice.stages if a.stage == st).choice
        rate = next(a for a in here.arms if a.name == "ngram-k3").acceptance_rate
        assert rate is not None
        shown = f"{100 * rate:.1f}%"
        assert f'<td class="num">{shown}</td>' in stage_table(page, st)  # the A/B's figure
        assert f"| {shown} |" in md.split(f"Stage **{st}")[1].split("Stage **")[0]
    assert report.arm_of("candidate:arm:ngram-k3", None) == "ngram-k3"
    assert report.arm_of("baseline:a-b-a", None) == "off"


def test_runs_of_one_release_with_different_configurations_are_shown_apart(
    tmp_path: Path,
) -> None:
    """Issue 35, 3: a starved candidate (--max-num-seqs 1) was averaged with the normal
    runs of its release. Each configuration has its own row, a fingerprint and a legend;
    a run recorded before configurations were kept still loads (no fingerprint)."""
    from benchgate import serverconfig

    db, res = tmp_path / "ledger.sqlite", tmp_path / "results"
    normal = {"argv": ["/opt/vllm/bin/vllm", "serve", "tiny", "--port", "8000"], "env": {}}
    starved = {**normal, "argv": [*normal["argv"], "--max-num-seqs", "1"]}
    old = make_result("0.32.0", [400.0, 401.0, 402.0])
    record(db, res, "old", old, host="gpu-1", phase="candidate")
    for i, (config, level) in enumerate([(normal, 400.0), (normal, 410.0), (starved, 100.0)]):
        result = {**make_result("0.32.0", [level, level + 1, level + 2]), "server_config": config}
        record(db, res, f"r{i}", result, host="gpu-1", phase="candidate")
    fp_normal, fp_starved = serverconfig.fingerprint(normal), serverconfig.fingerprint(starved)
    assert fp_normal and fp_starved and fp_normal != fp_starved
    # The port does not change what is measured; the fingerprint leaves it out.
    moved = {**normal, "argv": [*normal["argv"][:3], "--port", "9000"]}
    assert serverconfig.fingerprint(moved) == fp_normal
    rep = report.load_report(db)
    rows = {(r.config, r.runs, r.throughput) for r in report.arm_rows(rep.runs)}
    assert rows == {("", 1, 401.0), (fp_normal, 2, 406.0), (fp_starved, 1, 101.0)}
    page = report.render_html(rep)
    text = " ".join(" ".join(parse(page).text).split())
    assert "Serving configurations" in text
    assert f"{fp_starved} 1 tiny --max-num-seqs 1" in text
    assert f"{fp_normal} 2 tiny" in text
    md = report.render_markdown(rep)
    assert f"| 0.32.0 | off | {fp_starved} | 1 | 101.0 |" in md
    assert f"| `{fp_starved}` | 1 | `tiny --max-num-seqs 1` |" in md


def test_what_each_run_ran_under_is_shown_with_the_configurations(tmp_path: Path) -> None:
    """Issue 34, 3: the host and what vLLM said at start-up are listed under the
    legend, and an arm whose engine differs from off's (a draft model turns
    asynchronous scheduling off) is named as differing in more than speculation."""
    db, res = tmp_path / "ledger.sqlite", tmp_path / "results"
    host = {
        "cpu_model": "AMD EPYC 9654 96-Core Processor",
        "cpus_online": 16,
        "server_cpus": 16,
        "gpus": [
            {
                "index": 0,
                "name": "NVIDIA H100 80GB HBM3",
                "driver_version": "580.159.04",
                "sm_clock_mhz": 1980,
                "sm_clock_max_mhz": 1980,
                "memory_total_mib": 81559,
            }
        ],
        "gpu_reason": None,
    }
    engine = {"vllm_version": "0.26.0", "async_scheduling": True, "model_runner": "V2"}
    off = {"argv": ["vllm", "serve", "tiny"], "env": {}, "host": host, "engine": engine}
    draft = {
        **off,
        "argv": [*off["argv"], "--speculative-config", "{}"],
        "engine": {**engine, "async_scheduling": False, "model_runner": "V1"},
    }
    for name, phase, config, level in (
        ("off", "baseline", off, 400.0),
        ("draft", "arm:draft-k3", draft, 300.0),
    ):
        result = {**make_result("0.26.0", [level, level + 1]), "server_config": config}
        record(db, res, name, result, host="gpu-1", phase=phase)
    rep = report.load_report(db)
    md = report.render_markdown(rep)
    host_line = (
        "- host: AMD EPYC 9654 96-Core Processor, 16 CPUs online, server on 16; GPU NVIDIA "
        "H100 80GB HBM3 (driver 580.159.04, SM max 1980 MHz, 81559 MiB)"
    )
    assert host_line in md
    assert "- engine, 0.26.0 · off: vLLM 0.26.0, async scheduling on, model runner V2" in md
    assert "- engine, 0.26.0 · draft-k3: vLLM 0.26.0, async scheduling off, model runner V1" in md
    assert "0.26.0: draft-k3 differs from off in more than speculation: async scheduling: on " in md
    assert "model runner: V2 vs V1" in md
    text = " ".join(" ".join(parse(report.render_html(rep)).text).split())
    assert host_line[2:] in text and "engine, 0.26.0 · draft-k3: vLLM 0.26.0" in text
    # Runs without them show no such lines.
    bare = tmp_path / "bare.sqlite"
    plain = {"argv": ["vllm", "serve", "tiny"], "env": {}}
    result = {**make_result("0.26.0", [400.0, 401.0]), "server_config": plain}
    record(bare, res, "bare", result, host="gpu-1", phase="baseline")
    assert "- host:" not in report.render_markdown(report.load_report(bare))


def test_narrow_columns_break_between_words_not_inside_them() -> None:
    """Issue 35, 4: the A/B choices table broke "release" into "rel / eas / e"
    (overflow-wrap: anywhere lets the browser size a column below a word)."""
    css = report.html_report._CSS
    assert "anywhere" not in css and "break-all" not in css
    assert "overflow-wrap: break-word" in css
