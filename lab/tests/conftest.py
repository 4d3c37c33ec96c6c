"""The lab's tests load the lab's scripts by path with the tests' one loader
(tests/_load.py); a script run as ``python lab/experiments/x.py`` finds its
siblings the same way, from its own folder."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "lab" / "experiments")]
