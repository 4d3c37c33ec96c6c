# Copyright: benchgate contributors
# Apache-2.0
"""Fleet rules for the rolling play: the balancer's capacity during a drain, and
the hosts of earlier batches that did not finish. The logic is in
benchgate.fleet; documented in lb_capacity.yml and unfinished_hosts.yml."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleFilterError

from benchgate import fleet


def lb_capacity(states: Any, leaving: Any, min_in_service: Any) -> dict[str, object]:
    """The balancer's servers (name -> status) -> what stays in service if ``leaving`` leave."""
    if not isinstance(states, Mapping) or not states:
        raise AnsibleFilterError(
            "lb_capacity expects the balancer's servers as a mapping of name to status"
            f" (UP, DOWN, MAINT, ...), got {states!r}"
        )
    if isinstance(leaving, (str, bytes)) or not hasattr(leaving, "__iter__"):
        raise AnsibleFilterError(
            f"lb_capacity: leaving must be a list of server names, got {leaving!r}"
        )
    try:
        status = {  # name -> status, or name -> {"status": ...} (haproxy_servers.py)
            str(k): str(v.get("status", "") if isinstance(v, Mapping) else v)
            for k, v in states.items()
        }
        return fleet.capacity(status, [str(x) for x in leaving], min_in_service).to_dict()
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from exc


def batch_servers(
    batch: Any, hostvars: Any, variable: str = "benchgate_haproxy_server"
) -> list[str]:
    """Each host's name in the balancer: its ``variable`` when set, else its inventory name."""
    names = []
    for host in batch:
        value = hostvars[host].get(variable) if variable in hostvars[host] else None
        names.append(str(value) if value not in (None, "") else str(host))
    return names


def unfinished_hosts(hosts: Any, hostvars: Any) -> dict[str, str]:
    """The hosts (of those given) whose turn began and did not end -> why."""
    return fleet.unfinished(
        {str(h): hostvars[h].get("__benchgate_batch_state") for h in hosts if h in hostvars}
    )


class FilterModule:
    """Fleet rules."""

    def filters(self) -> dict[str, Any]:
        return {
            "lb_capacity": lb_capacity,
            "batch_servers": batch_servers,
            "unfinished_hosts": unfinished_hosts,
        }
