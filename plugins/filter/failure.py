# Copyright: benchgate contributors
# Apache-2.0
"""The reason a task failed, in one line: its name, its msg and the end of its stderr.

A failed command's msg is often just "non-zero return code"; what to fix is at the
end of its stderr. Documented in failure_reason.yml beside this file.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleFilterError


def failure_reason(result: Any, task: Any = None, limit: Any = 600) -> str:
    """A failed task's result (ansible_failed_result) -> '"task" failed: msg: stderr tail'."""
    if not isinstance(result, Mapping):
        raise AnsibleFilterError("failure_reason expects a task result (ansible_failed_result)")
    try:
        size = int(limit)
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError(
            f"failure_reason: limit must be an integer, got {limit!r}"
        ) from exc
    if size < 10:
        raise AnsibleFilterError(f"failure_reason: limit must be at least 10, got {size}")
    msg = " ".join(str(result.get("msg") or "").split())
    if len(msg) > size:
        msg = msg[: size - 3].rstrip() + "..."
    stderr = str(result.get("stderr") or "").strip()[-size:]
    parts = [f'"{task}" failed' if task not in (None, "") else "failed"]
    if msg:
        parts.append(msg)
    if stderr:
        parts.append(stderr)
    return ": ".join(parts)


class FilterModule:
    """Failure reasons."""

    def filters(self) -> dict[str, Any]:
        return {"failure_reason": failure_reason}
