"""The gate filter plugin (the decidable limit preflight warns with), loaded as Ansible loads it."""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError

from _load import load_file
from benchgate import ranks

ROOT = Path(__file__).resolve().parents[1]
F = load_file(ROOT / "plugins/filter/gate.py", "bg_filter_gate").FilterModule().filters()


def test_the_limit_follows_runs_and_stages_as_the_gate_judges_them():
    # The demo host: a 4% run spread, A-B-A and extra trials (2+2 runs).
    one_stage = F["gate_decidable_limit"](4, 2, 2)
    two_stages = F["gate_decidable_limit"]("4", "2", "2", 2)
    assert one_stage == pytest.approx(13.8, abs=0.05)
    assert two_stages == pytest.approx(16.6, abs=0.05)
    assert two_stages == round(ranks.decidable_limit_pct(4.0, (2, 2), 0.025), 1)
    # One run a side is the widest; a quiet GPU host (spread 0) decides any limit.
    assert F["gate_decidable_limit"](4) > one_stage
    assert F["gate_decidable_limit"](0, 1, 1, 3) == 0.0


@pytest.mark.parametrize("args", [("x",), (-1,), (4, 0, 1), (4, 1, 1, 1, 1.5)])
def test_bad_numbers_are_refused(args):
    with pytest.raises(AnsibleFilterError):
        F["gate_decidable_limit"](*args)
