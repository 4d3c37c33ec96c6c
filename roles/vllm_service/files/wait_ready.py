#!/usr/bin/python3
"""Wait until a vLLM server answers /health and one real completion.

Runs on the host with the system Python (stdlib only). Fails early, with the
unit's journal, when systemd reports the server crashed or failed. Prints one
JSON line: seconds until healthy, until the first completion, and its text.
"""

import argparse
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request


def unit_state(unit):
    out = subprocess.run(
        ["systemctl", "show", "-p", "ActiveState,NRestarts,SubState", unit],
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


def fail(message, unit):
    sys.stderr.write(message + "\n--- journal of " + unit + " ---\n" + journal(unit))
    sys.exit(1)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--unit", required=True)
    parser.add_argument("--timeout", type=float, default=900)
    args = parser.parse_args()
    api_key = os.environ.get("BENCHGATE_API_KEY", "")

    start = time.monotonic()
    restarts = unit_state(args.unit).get("NRestarts", "0")
    healthy_after = None
    while time.monotonic() - start < args.timeout:
        state = unit_state(args.unit)
        if state.get("ActiveState") == "failed" or state.get("NRestarts", "0") != restarts:
            fail("%s crashed while starting (state %s/%s, restarts %s)" % (
                args.unit, state.get("ActiveState"), state.get("SubState"),
                state.get("NRestarts")), args.unit)
        try:
            if healthy_after is None:
                status, _ = request(args.base_url + "/health", timeout=5)
                if status == 200:
                    healthy_after = time.monotonic() - start
            if healthy_after is not None:
                status, text = request(
                    args.base_url + "/v1/completions",
                    {"model": args.model, "prompt": "The quick brown fox", "max_tokens": 4},
                    api_key=api_key, timeout=60,
                )
                choice = json.loads(text)["choices"][0]
                print(json.dumps({
                    "healthy_after_s": round(healthy_after, 2),
                    "completion_after_s": round(time.monotonic() - start, 2),
                    "completion_text": choice.get("text", ""),
                }))
                return
        except urllib.error.HTTPError as exc:
            if healthy_after is not None:
                fail("the completion was refused: HTTP %d %s" % (exc.code, exc.read()[:300]),
                     args.unit)
        except (OSError, ValueError, KeyError, IndexError):
            pass
        time.sleep(2)
    fail("%s did not answer /health and a completion within %ds" % (args.unit, args.timeout),
         args.unit)


if __name__ == "__main__":
    main()
