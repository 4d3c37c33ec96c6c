#!/usr/bin/python3
"""Wait until a vLLM server answers /health and one real completion.

Runs on the host with the system Python (stdlib only). Fails early, with the
unit's journal, when systemd reports the server crashed or failed. Prints one
JSON line: seconds until healthy, until the first completion, and its text.

It also records the service's cold start for benchgate's results: seconds from
the unit's last start (systemd's ExecMainStartTimestampMonotonic, else
ActiveEnterTimestampMonotonic, on the same CLOCK_MONOTONIC as time.monotonic())
to the first /health 200 and to the first completion, with the unit's
InvocationID, in /run/benchgate/<unit>.ready.json (--record; "" = none). /health
is polled every --interval seconds, so the figure is late by up to that much;
when /health already answered at the first poll the service was up before this
script started and the figure is only an upper bound ("upper_bound": true).
"""

import argparse
import datetime
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request


def unit_state(unit):
    out = subprocess.run(
        ["systemctl", "show", "-p", "ActiveState,NRestarts,SubState,ExecMainStatus", unit],
        capture_output=True, text=True, check=False,
    ).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def journal(unit, lines=400, keep=15):
    """The unit's recent error lines (the root cause), else its last lines."""
    text = subprocess.run(
        ["journalctl", "-u", unit, "-n", str(lines), "--no-pager", "-o", "cat"],
        capture_output=True, text=True, check=False,
    ).stdout.splitlines()
    errors = [line for line in text
              if ("Error" in line or "error:" in line or "Exception" in line)
              and "File \"" not in line]
    return "\n".join((errors or text)[-keep:]) + "\n"


def request(url, body=None, api_key="", timeout=30):
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = "Bearer " + api_key
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers=headers)
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return resp.status, resp.read().decode("utf-8", "replace")


START_PROPERTIES = ("ExecMainStartTimestampMonotonic", "ActiveEnterTimestampMonotonic")


def unit_start(unit):
    """The unit's properties that date its last start."""
    argv = ["systemctl", "show", unit, "-p", "InvocationID"]
    for prop in START_PROPERTIES:
        argv += ["-p", prop]
    out = subprocess.run(argv, capture_output=True, text=True, check=False).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def cold_start_record(props, healthy_at, completion_at, upper_bound, interval):
    """Seconds from the unit's start to /health 200 and to the first completion.

    ``healthy_at`` and ``completion_at`` are time.monotonic() readings; systemd's
    *TimestampMonotonic properties are microseconds of the same clock. None
    when systemd does not say when the unit started.
    """
    for prop in START_PROPERTIES:
        value = props.get(prop, "")
        if value.isdigit() and int(value) > 0:
            start = int(value) / 1e6
            return {
                "schema": "benchgate.cold_start/1",
                "healthy_s": round(healthy_at - start, 3),
                "first_completion_s": (
                    round(completion_at - start, 3) if completion_at is not None else None
                ),
                "upper_bound": bool(upper_bound),
                "poll_interval_s": interval,
                "start_property": prop,
                "invocation_id": props.get("InvocationID") or None,
                "recorded_at": datetime.datetime.now(datetime.timezone.utc)
                .replace(microsecond=0)
                .isoformat(),
            }
    return None


def write_record(path, record):
    """Write ``record`` as JSON to ``path`` atomically; the error text, or None."""
    try:
        folder = os.path.dirname(path)
        if folder:
            os.makedirs(folder, mode=0o755, exist_ok=True)
        tmp = path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as handle:
            handle.write(json.dumps(record) + "\n")
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except OSError as exc:
        return f"{path}: {exc}"
    return None


ENV_ESCAPED = '"\\`$'


def env_value(text):
    """One EnvironmentFile value as systemd reads it: in double quotes a
    backslash escapes " \\ ` $ and is kept before anything else; single quotes
    are literal; an unquoted value is trimmed (benchgate.serve.read_env_file_value)."""
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] == "'":
        return text[1:-1]
    if len(text) >= 2 and text[0] == text[-1] == '"':
        out, body, i = [], text[1:-1], 0
        while i < len(body):
            if body[i] == "\\" and i + 1 < len(body) and body[i + 1] in ENV_ESCAPED:
                out.append(body[i + 1])
                i += 2
            else:
                out.append(body[i])
                i += 1
        return "".join(out)
    return text


def api_key_from(env_file):
    """VLLM_API_KEY from the service's 0600 EnvironmentFile ("" when unset).

    The key is read from the file, never passed on the command line or in the
    environment, so it appears neither in the journal nor in /proc.
    """
    if not env_file or not os.path.exists(env_file):
        return ""
    with open(env_file, encoding="utf-8") as handle:
        for line in handle:
            name, sep, value = line.strip().partition("=")
            if sep and name == "VLLM_API_KEY":
                return env_value(value)
    return ""


def fail(message, unit):
    sys.stderr.write(message + "\n--- journal of " + unit + " ---\n" + journal(unit))
    sys.exit(1)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--unit", required=True)
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between polls")
    parser.add_argument(
        "--record", default=None,
        help='cold-start record (default /run/benchgate/<unit>.ready.json; "" = none)',
    )
    parser.add_argument(
        "--env-file", default="",
        help="the unit's EnvironmentFile; VLLM_API_KEY is read from it when set",
    )
    args = parser.parse_args()
    api_key = api_key_from(args.env_file)
    record_path = args.record
    if record_path is None:
        record_path = f"/run/benchgate/{args.unit}.ready.json"

    start = time.monotonic()
    restarts = unit_state(args.unit).get("NRestarts", "0")
    healthy_after = None
    healthy_at = None
    polls = 0
    while time.monotonic() - start < args.timeout:
        state = unit_state(args.unit)
        if state.get("ActiveState") == "failed" or state.get("NRestarts", "0") != restarts:
            fail("%s crashed while starting (state %s/%s, restarts %s)" % (
                args.unit, state.get("ActiveState"), state.get("SubState"),
                state.get("NRestarts")), args.unit)
        # Restart=on-failure does not restart a server that exits with 0 (say,
        # an option that prints help and exits): nothing will ever answer.
        if state.get("ActiveState") == "inactive":
            fail("%s exited while starting (state %s/%s, exit status %s): it is not "
                 "running, so it will not answer" % (
                     args.unit, state.get("ActiveState"), state.get("SubState"),
                     state.get("ExecMainStatus", "?")), args.unit)
        try:
            if healthy_after is None:
                polls += 1
                status, _ = request(args.base_url + "/health", timeout=5)
                if status == 200:
                    healthy_at = time.monotonic()
                    healthy_after = healthy_at - start
            if healthy_after is not None:
                status, text = request(
                    args.base_url + "/v1/completions",
                    {"model": args.model, "prompt": "The quick brown fox", "max_tokens": 4},
                    api_key=api_key, timeout=60,
                )
                completion_at = time.monotonic()
                choice = json.loads(text)["choices"][0]
                report = {
                    "healthy_after_s": round(healthy_after, 2),
                    "completion_after_s": round(completion_at - start, 2),
                    "completion_text": choice.get("text", ""),
                }
                if record_path:
                    record = cold_start_record(
                        unit_start(args.unit), healthy_at, completion_at, polls == 1,
                        args.interval,
                    )
                    if record is None:
                        report["record_error"] = f"systemd did not say when {args.unit} started"
                    else:
                        report["cold_start"] = record
                        error = write_record(record_path, record)
                        if error:
                            report["record_error"] = error
                print(json.dumps(report))
                return
        except urllib.error.HTTPError as exc:
            if healthy_after is not None:
                fail("the completion was refused: HTTP %d %s" % (exc.code, exc.read()[:300]),
                     args.unit)
        except (OSError, ValueError, KeyError, IndexError):
            pass
        time.sleep(args.interval)
    fail("%s did not answer /health and a completion within %ds" % (args.unit, args.timeout),
         args.unit)


if __name__ == "__main__":
    main()
