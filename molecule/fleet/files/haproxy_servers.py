#!/usr/bin/python3
"""Print HAProxy's view of each server of a backend as JSON (runtime API)."""

import csv
import io
import json
import socket
import sys

backend = sys.argv[1] if len(sys.argv) > 1 else "vllm"
sock = socket.socket(socket.AF_UNIX)
sock.connect("/run/haproxy/admin.sock")
sock.sendall(b"show stat\n")
text = sock.makefile().read()
rows = csv.DictReader(io.StringIO(text.lstrip("# ")))
print(json.dumps({
    row["svname"]: {"status": row["status"], "sessions_now": int(row["scur"] or 0),
                    "sessions_total": int(row["stot"] or 0)}
    for row in rows
    if row["pxname"] == backend and row["svname"] not in ("FRONTEND", "BACKEND")
}))
