#!/usr/bin/python3
"""A steady client load through the fleet's balancer, counting every request.

Runs on the balancer's host as a service for the whole scenario (stdlib only).
Each stream sends a short completion, waits --pause seconds, and sends the
next. Every answer is counted: ok (HTTP 200 with a choice) or failed (any
other status, a reset, a timeout), per server that answered (HAProxy's
X-Served-By header). The counts go to --out as JSON every second and on
SIGTERM; the last failures are kept with their reason and time.
"""

import argparse
import json
import os
import signal
import threading
import time
import urllib.error
import urllib.request

lock = threading.Lock()
counts = {"ok": 0, "failed": 0, "by_server": {}, "failures": [], "started": time.time()}
stop = threading.Event()


def one(url, key, model):
    body = json.dumps({"model": model, "prompt": "Hello", "max_tokens": 8}).encode()
    req = urllib.request.Request(
        url, data=body,
        headers={"Content-Type": "application/json", "Authorization": "Bearer " + key},
    )
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:
            server = resp.headers.get("X-Served-By", "?")
            payload = json.loads(resp.read())
            if resp.status == 200 and payload.get("choices"):
                return True, server, ""
            return False, server, "HTTP %d without a choice" % resp.status
    except urllib.error.HTTPError as exc:
        return False, exc.headers.get("X-Served-By", "?"), "HTTP %d" % exc.code
    except (OSError, ValueError) as exc:
        return False, "?", "%s: %s" % (type(exc).__name__, exc)


def stream(url, key, model, pause):
    while not stop.is_set():
        ok, server, why = one(url, key, model)
        with lock:
            counts["ok" if ok else "failed"] += 1
            per = counts["by_server"].setdefault(server, {"ok": 0, "failed": 0})
            per["ok" if ok else "failed"] += 1
            if not ok:
                counts["failures"] = (counts["failures"] + [
                    {"at": time.strftime("%H:%M:%S"), "server": server, "why": why}])[-20:]
        stop.wait(pause)


def write(path):
    with lock:
        text = json.dumps(dict(counts, written=time.time()))
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(text + "\n")
    os.replace(tmp, path)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--key-file", required=True)
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--streams", type=int, default=2)
    parser.add_argument("--pause", type=float, default=0.25)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    with open(args.key_file, encoding="utf-8") as handle:
        key = handle.read().strip()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    threads = [threading.Thread(target=stream, args=(args.url, key, args.model, args.pause))
               for _ in range(args.streams)]
    for thread in threads:
        thread.start()
    while not stop.wait(1.0):
        write(args.out)
    for thread in threads:
        thread.join()
    write(args.out)


if __name__ == "__main__":
    main()
