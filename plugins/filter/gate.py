# Copyright: benchgate contributors
# Apache-2.0
"""The smallest limit the gate can decide on a host, for preflight's warning.

The logic lives in ``benchgate.ranks.decidable_limit_pct``; this filter adds
the gate's schedule (runs per side) and its stages (alpha split over them).
Documented in gate_decidable_limit.yml beside this file.
"""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError


def gate_decidable_limit(
    spread_pct: Any,
    runs_baseline: Any = 1,
    runs_candidate: Any = 1,
    stages: Any = 1,
    alpha: Any = 0.05,
) -> float:
    """Run spread (%) -> the limit (%) identical releases pass with probability 1 - alpha/stages."""
    try:
        from benchgate import ranks
    except ImportError as exc:  # pragma: no cover - depends on the controller
        raise AnsibleFilterError(
            f"gate_decidable_limit needs the benchgate package in the controller's Python: {exc}"
        ) from exc
    try:
        spread = float(spread_pct)
        runs = (int(runs_baseline), int(runs_candidate))
        n_stages = max(1, int(stages))
        level = float(alpha)
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"gate_decidable_limit expects numbers: {exc}") from exc
    if spread < 0 or min(runs) < 1 or not 0 < level < 1:
        raise AnsibleFilterError(
            "gate_decidable_limit expects a spread >= 0, at least one run a side and 0 < alpha < 1"
        )
    return round(ranks.decidable_limit_pct(spread, runs, level / n_stages), 1)


class FilterModule:
    """The gate's decidable limit."""

    def filters(self) -> dict[str, Any]:
        return {"gate_decidable_limit": gate_decidable_limit}
