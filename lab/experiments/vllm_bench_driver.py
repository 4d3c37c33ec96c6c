"""`vllm bench serve`, many runs in one process: vLLM is imported once.

Run with the Python of the venv that holds vLLM (not benchgate's); used by
``client_fidelity.py --vllm-python``.  Each line on stdin is a JSON list of
`vllm bench serve` arguments (what follows ``vllm bench serve`` on a command
line); each run saves its result where ``--result-dir`` says, then a line
``driver: done`` (or ``driver: error ...``) goes to stdout.  Starting
``vllm bench serve`` anew costs 15-25 s of imports on a 2-core machine, more
than a run: one process makes the many alternating runs a fidelity
comparison needs affordable.  The benchmark itself is vLLM's own ``main``.
"""

from __future__ import annotations

import json
import sys
import traceback

from vllm.benchmarks.serve import add_cli_args, main
from vllm.utils.argparse_utils import FlexibleArgumentParser


def run() -> None:
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            parser = FlexibleArgumentParser()
            add_cli_args(parser)
            main(parser.parse_args(json.loads(line)))
        except Exception as exc:  # one failed run is reported, the driver goes on
            traceback.print_exc()
            print(f"driver: error {type(exc).__name__}: {exc}", flush=True)
        else:
            print("driver: done", flush=True)


if __name__ == "__main__":
    run()
