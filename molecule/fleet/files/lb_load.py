#!/usr/bin/python3
"""A steady client load through the fleet's balancer, counting every request.

Runs on the balancer's host as a service for the whole scenario (stdlib only).
Open loop: a short completion is sent every 1/--rate seconds whatever the
answers take (each in its own thread, at most --max-in-flight at once; a tick
that finds them all busy waits and is counted as late), so a server that
stalls cannot slow the load down and hide a gap. Every answer is counted: ok
(HTTP 200 with a choice) or failed (any other status, a reset, a timeout),
per server that answered (HAProxy's X-Served-By header). The counts go to
--out as JSON every second and on SIGTERM; the last failures are kept with
their reason and time.
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
counts = {"ok": 0, "failed": 0, "sent": 0, "late": 0, "by_server": {}, "failures": [],
          "started": time.time()}
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


def answer(url, key, model, slots):
    try:
        ok, server, why = one(url, key, model)
        with lock:
            counts["ok" if ok else "failed"] += 1
            per = counts["by_server"].setdefault(server, {"ok": 0, "failed": 0})
            per["ok" if ok else "failed"] += 1
            if not ok:
                counts["failures"] = (counts["failures"] + [
                    {"at": time.strftime("%H:%M:%S"), "server": server, "why": why}])[-50:]
    finally:
        slots.release()


def send(url, key, model, rate, max_in_flight):
    slots = threading.Semaphore(max_in_flight)
    tick = time.monotonic()
    while not stop.is_set():
        if not slots.acquire(timeout=1.0 / rate):
            with lock:
                counts["late"] += 1
            tick = time.monotonic()  # no burst to catch up
            continue
        with lock:
            counts["sent"] += 1
        threading.Thread(target=answer, args=(url, key, model, slots), daemon=True).start()
        tick += 1.0 / rate
        stop.wait(max(0.0, tick - time.monotonic()))


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
    parser.add_argument("--rate", type=float, default=2.5, help="requests per second")
    parser.add_argument("--max-in-flight", type=int, default=32)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    with open(args.key_file, encoding="utf-8") as handle:
        key = handle.read().strip()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    sender = threading.Thread(target=send, args=(args.url, key, args.model, args.rate,
                                                 args.max_in_flight))
    sender.start()
    while not stop.wait(1.0):
        write(args.out)
    sender.join()
    write(args.out)


if __name__ == "__main__":
    main()
