# Copyright: benchgate contributors
# Apache-2.0
"""A measurement result's figures per stage, for messages.

A staged result's top-level summary pools every load; what a message shows is
each stage's own. Documented in result_stages.yml and tok_s_by_stage.yml beside
this file.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleFilterError


def result_stages(result: Any) -> list[dict[str, Any]]:
    """A result -> [{name, summary}] per stage; an unstaged one -> one block named ''."""
    if result in (None, ""):
        return [{"name": "", "summary": {}}]
    if not isinstance(result, Mapping):
        raise AnsibleFilterError("result_stages expects a measurement result (a mapping)")
    stages = result.get("stages") or []
    if stages:
        return [{"name": str(s.get("name", "")), "summary": s.get("summary") or {}} for s in stages]
    return [{"name": "", "summary": result.get("summary") or {}}]


def tok_s_by_stage(result: Any) -> str:
    """A result -> 'single 250.1, busy 801.2' (staged) or '801.2'; '?' where a figure is missing."""
    parts = []
    for block in result_stages(result):
        median = ((block["summary"].get("metrics") or {}).get("output_tokens_per_s") or {}).get(
            "median"
        )
        try:
            figure = f"{float(median):.1f}"
        except (TypeError, ValueError):
            figure = "?"
        parts.append(f"{block['name']} {figure}" if block["name"] else figure)
    return ", ".join(parts)


class FilterModule:
    """Figures per stage."""

    def filters(self) -> dict[str, Any]:
        return {"result_stages": result_stages, "tok_s_by_stage": tok_s_by_stage}
