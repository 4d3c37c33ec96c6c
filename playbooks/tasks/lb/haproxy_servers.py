#!/usr/bin/python3
"""Print HAProxy's view of each server of a backend as JSON (runtime API).

    haproxy_servers.py [BACKEND [SOCKET]]     defaults: vllm /run/haproxy/admin.sock

Runs on the balancer's host with its own Python (stdlib only): the drain hook
(haproxy_drain.yml) reads it to count the servers that stay in service.
"""

import csv
import io
import json
import socket
import sys

backend = sys.argv[1] if len(sys.argv) > 1 else "vllm"
path = sys.argv[2] if len(sys.argv) > 2 else "/run/haproxy/admin.sock"
sock = socket.socket(socket.AF_UNIX)
sock.connect(path)
sock.sendall(b"show stat\n")
text = sock.makefile().read()
rows = csv.DictReader(io.StringIO(text.lstrip("# ")))
print(json.dumps({
    row["svname"]: {"status": row["status"], "sessions_now": int(row["scur"] or 0),
                    "sessions_total": int(row["stot"] or 0)}
    for row in rows
    if row["pxname"] == backend and row["svname"] not in ("FRONTEND", "BACKEND")
}))
