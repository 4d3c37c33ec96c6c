# Copyright: benchgate contributors
# Apache-2.0
"""Check the settings that a role writes into a systemd unit, each against its kind.

The allow-lists live in the ``benchgate`` package (``benchgate.allowlist``);
this filter only checks its input and translates errors into
AnsibleFilterError. Documented in setting_errors.yml beside this file.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleFilterError


def setting_errors(settings: Any, kinds: Any) -> list[str]:
    """{name: value} + {name: kind} -> one message per problem (names, never values)."""
    if not isinstance(settings, Mapping) or not isinstance(kinds, Mapping):
        raise AnsibleFilterError(
            "setting_errors expects a mapping of setting name -> value and one of "
            "setting name -> kind"
        )
    try:
        from benchgate import allowlist
    except ImportError as exc:
        raise AnsibleFilterError(
            "setting_errors needs the 'benchgate' Python package in the controller's Python "
            f"(ansible_playbook_python): {exc}"
        ) from exc
    return list(allowlist.setting_errors(settings, kinds))


class FilterModule:
    """Allow-list checks of unit settings."""

    def filters(self) -> dict[str, Any]:
        return {"setting_errors": setting_errors}
