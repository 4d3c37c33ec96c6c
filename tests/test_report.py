"""``benchgate report``: HTML and Markdown from a real SQLite ledger, and the HTML in Chromium."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import sqlite3
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from benchgate import cli, ledger, report

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
