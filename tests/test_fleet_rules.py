"""The fleet rules (benchgate.fleet): how many servers stay in service while a
batch is out, and which hosts of earlier batches did not finish their turn."""

from __future__ import annotations

from pathlib import Path

import pytest

from _load import load_file
from benchgate import fleet

FILTERS = (
    load_file(
        Path(__file__).resolve().parents[1] / "plugins" / "filter" / "fleet.py", "bg_fleet_filter"
    )
    .FilterModule()
    .filters()
)


@pytest.mark.parametrize(
    ("spec", "total", "needed"),
    [
        ("50%", 3, 2),
        ("50%", 4, 2),
        ("50%", 1, 1),
        ("34%", 3, 2),
        ("100%", 3, 3),
        (2, 3, 2),
        ("2", 10, 2),
        (0, 3, 1),
        ("0%", 3, 1),
        (" 75 % ", 8, 6),
    ],
)
def test_the_floor_is_a_count_or_a_share_rounded_up_and_never_below_one(
    spec: object, total: int, needed: int
) -> None:
    assert fleet.min_in_service(spec, total) == needed


@pytest.mark.parametrize("spec", ["half", "-1", "150%", "1.5", True, None, ""])
def test_a_floor_that_is_not_a_count_or_percentage_is_refused(spec: object) -> None:
    with pytest.raises(ValueError, match="benchgate_lb_min_in_service"):
        fleet.min_in_service(spec, 3)


def test_a_batch_of_two_out_of_three_is_refused_at_the_default_floor() -> None:
    """The issue's fault: both out, one server carries the load."""
    cap = fleet.capacity({"a": "UP", "b": "UP", "c": "UP"}, ["b", "c"], "50%")
    assert not cap.ok
    assert (cap.total, cap.staying_up, cap.needed) == (3, ("a",), 2)
    assert "1 of 3 servers stay in service (a)" in cap.message
    assert "benchgate_serial" in cap.message and "benchgate_lb_min_in_service" in cap.message


def test_one_host_at_a_time_out_of_three_passes() -> None:
    cap = fleet.capacity({"a": "UP", "b": "UP", "c": "UP"}, ["a"], "50%")
    assert cap.ok and cap.staying_up == ("b", "c")


def test_servers_that_are_down_or_in_maintenance_do_not_count() -> None:
    states = {"a": "UP", "b": "DOWN", "c": "MAINT", "d": "UP 1/2", "e": "DOWN 1/2", "f": "DRAIN"}
    cap = fleet.capacity(states, ["a"], 2)
    # d is failing its checks but HAProxy still sends it requests; e is coming up.
    assert cap.staying_up == ("d",)
    assert not cap.ok
    assert "not serving now: b (DOWN), c (MAINT), e (DOWN 1/2), f (DRAIN)" in cap.message


def test_a_server_name_the_balancer_does_not_know_is_refused_with_the_setting_to_fix() -> None:
    cap = fleet.capacity({"vllm-1": "UP", "vllm-2": "UP"}, ["host-1"], 1)
    assert not cap.ok and "no server host-1" in cap.message
    assert "benchgate_haproxy_server" in cap.message


def test_a_host_whose_turn_began_and_did_not_end_is_lost_and_a_blocked_one_named() -> None:
    states = {"a": "done", "b": "started", "c": None, "d": "blocked"}
    out = fleet.unfinished(states)
    assert set(out) == {"b", "d"}
    assert out["b"].startswith("lost") and out["d"].startswith("blocked")


def test_the_filter_reads_haproxy_servers_py_output_and_explains_bad_input() -> None:
    from ansible.errors import AnsibleFilterError

    view = {"a": {"status": "UP", "sessions_now": 0}, "b": {"status": "UP", "sessions_now": 1}}
    assert FILTERS["lb_capacity"](view, ["a"], "50%")["ok"] is True
    assert FILTERS["lb_capacity"](view, ["a", "b"], "50%")["ok"] is False
    with pytest.raises(AnsibleFilterError, match="mapping of name to status"):
        FILTERS["lb_capacity"]({}, ["a"], "50%")
    with pytest.raises(AnsibleFilterError, match="list of server names"):
        FILTERS["lb_capacity"](view, "a", "50%")
    with pytest.raises(AnsibleFilterError, match="benchgate_lb_min_in_service"):
        FILTERS["lb_capacity"](view, ["a"], "most")


def test_batch_servers_takes_each_hosts_name_in_the_balancer() -> None:
    hostvars = {
        "h1": {"benchgate_haproxy_server": "vllm-a"},
        "h2": {},
        "h3": {"benchgate_haproxy_server": ""},
    }
    assert FILTERS["batch_servers"](["h1", "h2", "h3"], hostvars) == ["vllm-a", "h2", "h3"]
