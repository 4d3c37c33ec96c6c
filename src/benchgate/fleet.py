"""Fleet rules: how many servers must stay in the balancer while a batch is out.

A rolling upgrade takes a batch of hosts out of the load balancer. Taking too
many out leaves the rest to carry the whole load, and a loaded server that
misses its health checks takes the fleet dark (issue 32: a batch of two out of
three left one server, which HAProxy then marked down under load).
``benchgate_lb_min_in_service`` sets the floor, like Kubernetes'
``maxUnavailable`` seen from the other side: a count (``2``) or a share of
the balancer's servers (``"50%"``, rounded up), never fewer than one.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

_SPEC = re.compile(r"^\s*([0-9]+)\s*(%?)\s*$")


def min_in_service(spec: object, total: int) -> int:
    """The servers that must stay in service out of ``total``: ``spec`` is a
    count (``2``, ``"2"``) or a percentage (``"50%"``, rounded up); at least 1.

    >>> min_in_service("50%", 3), min_in_service("50%", 4), min_in_service(0, 3)
    (2, 2, 1)
    """
    match = _SPEC.match(str(spec))
    if match is None or isinstance(spec, bool):
        raise ValueError(
            f'benchgate_lb_min_in_service must be a count (2) or a percentage ("50%"), got {spec!r}'
        )
    number, percent = int(match.group(1)), match.group(2)
    if percent and number > 100:
        raise ValueError(f"benchgate_lb_min_in_service is over 100%: {spec!r}")
    needed = math.ceil(total * number / 100) if percent else number
    return max(1, needed)


def serving(status: str) -> bool:
    """Whether HAProxy sends requests to a server in this state: ``UP``, and
    ``UP 1/2`` (failing its checks but not yet down); not ``DOWN``, ``MAINT``,
    ``DRAIN``, ``NOLB`` or ``DOWN 1/2`` (coming up)."""
    return status == "UP" or status.startswith("UP ")


@dataclass(frozen=True)
class Capacity:
    """What stays in service if ``leaving`` leave the balancer now."""

    ok: bool
    total: int
    staying_up: tuple[str, ...]
    needed: int
    message: str

    def to_dict(self) -> dict[str, object]:
        return {
            "ok": self.ok,
            "total": self.total,
            "staying_up": list(self.staying_up),
            "needed": self.needed,
            "message": self.message,
        }


def capacity(states: Mapping[str, str], leaving: Iterable[str], spec: object) -> Capacity:
    """Judge a drain: ``states`` is each server's status in the balancer
    (name -> ``UP``, ``DOWN``, ``MAINT``, ...), ``leaving`` the servers of the
    batch about to leave, ``spec`` the operator's ``benchgate_lb_min_in_service``."""
    leaving = sorted(set(leaving))
    unknown = [name for name in leaving if name not in states]
    total = len(states)
    needed = min_in_service(spec, total)
    staying_up = tuple(
        sorted(name for name, status in states.items() if name not in leaving and serving(status))
    )
    if unknown:
        return Capacity(
            False,
            total,
            staying_up,
            needed,
            f"the balancer has no server {', '.join(unknown)}: set benchgate_haproxy_server "
            "(or your hook's name) to the name the balancer uses",
        )
    down = sorted(
        f"{name} ({status})"
        for name, status in states.items()
        if name not in leaving and not serving(status)
    )
    ok = len(staying_up) >= needed
    words = (
        f"with {', '.join(leaving)} out, {len(staying_up)} of {total} servers stay in service"
        f" ({', '.join(staying_up) or 'none'})"
        + (f"; not serving now: {', '.join(down)}" if down else "")
        + f"; benchgate_lb_min_in_service {spec} needs {needed}"
    )
    if not ok:
        words += (
            ": the batch would leave too few servers to carry the load. Bring the servers"
            " that are down back, use smaller batches (benchgate_serial), or lower"
            " benchgate_lb_min_in_service"
        )
    return Capacity(ok, total, staying_up, needed, words)


def unfinished(states: Mapping[str, object]) -> dict[str, str]:
    """Hosts of earlier batches that did not finish their turn, from each
    host's ``__benchgate_batch_state`` (``started`` when its turn began,
    ``done`` when it ended, ``blocked`` when its candidate was rolled back).

    A host still ``started`` was lost (unreachable) or failed before a verdict:
    Ansible may start the next batch anyway (a host both unreachable and
    failed is counted twice, ansible/ansible#56265), so the next batch checks.
    """
    out: dict[str, str] = {}
    for host, state in states.items():
        if state == "started":
            out[host] = "lost: it stopped answering, or failed, before its verdict"
        elif state == "blocked":
            out[host] = "blocked: its candidate was rolled back"
    return out
