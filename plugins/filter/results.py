# Copyright: benchgate contributors
# Apache-2.0
"""A measurement result's figures per stage, for messages.

A staged result's top-level summary pools every load; what a message shows is
each stage's own. And a workload's stages, added to or narrowed for one
measurement (a composed arm's threshold stage). Documented in
result_stages.yml, tok_s_by_stage.yml and workload_stages.yml beside this file.
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


def workload_stages(workload: Any, extra: Any = None, only: Any = None) -> dict[str, Any]:
    """A workload dict with ``extra`` stages appended, then only the stages named in ``only``."""
    if not isinstance(workload, dict):
        raise AnsibleFilterError(
            "workload_stages expects a workload (a dict, from_yaml of its file)"
        )
    extra = list(extra or [])
    only = [str(name) for name in only or []]
    if not extra and not only:
        return workload
    stages = [*(workload.get("stages") or []), *extra]
    if not stages:
        raise AnsibleFilterError(f"workload {workload.get('name')!r} has no stages to add to")
    names = [s.get("name") for s in stages if isinstance(s, dict)]
    if len(set(names)) != len(names):
        raise AnsibleFilterError(f"workload_stages: stage names repeat: {names}")
    missing = [name for name in only if name not in names]
    if missing:
        raise AnsibleFilterError(f"workload_stages: no stage named {', '.join(missing)}")
    kept = [s for s in stages if not only or s.get("name") in only]
    return {**workload, "stages": kept}


class FilterModule:
    """Figures per stage."""

    def filters(self) -> dict[str, Any]:
        return {
            "result_stages": result_stages,
            "tok_s_by_stage": tok_s_by_stage,
            "workload_stages": workload_stages,
        }
