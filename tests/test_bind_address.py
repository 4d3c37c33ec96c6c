"""vllm_service_host: the bare address for vLLM's --host, RFC 6874 URLs for clients.

Issue 32: ``"[::1]"`` reached vLLM's ``--host`` with its brackets (uvicorn
cannot bind that) and ``fe80::1%eth0`` gave ``http://[fe80::1%eth0]:8000``,
whose ``%`` is not escaped. One place decides both (``benchgate.serve``:
``bind_address`` for the argv, ``base_url`` for every URL); the clients open
the escaped URL (``benchgate.client.connect_url`` for aiohttp; urllib, which
``wait_ready.py`` uses, unescapes it itself).
"""

from __future__ import annotations

import asyncio
import ipaddress
from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError

from benchgate import serve
from benchgate.client import connect_url, fetch, make_client
from benchgate.testing.fakeserver import FakeConfig, serve_in_thread
from test_filters import SETTINGS, F
from test_fleet_inputs import (
    ROOT,
    _host,
    _inventory,
    _play,
    _render_example,
    _systemd_words,
    _tree,
    needs_ansible,
    needs_systemd_analyze,
    needs_unshare,
)


@pytest.mark.parametrize(
    ("host", "argv_host", "url"),
    [
        ("::1", "::1", "http://[::1]:8000"),
        ("[::1]", "::1", "http://[::1]:8000"),
        ("fe80::1%eth0", "fe80::1%eth0", "http://[fe80::1%25eth0]:8000"),
        ("[fe80::1%eth0]", "fe80::1%eth0", "http://[fe80::1%25eth0]:8000"),
        ("fd00::5", "fd00::5", "http://[fd00::5]:8000"),
        ("::", "::", "http://[::1]:8000"),
        ("[::]", "::", "http://[::1]:8000"),
        ("0.0.0.0", "0.0.0.0", "http://127.0.0.1:8000"),
        ("10.0.0.5", "10.0.0.5", "http://10.0.0.5:8000"),
        ("localhost", "localhost", "http://localhost:8000"),
        ("", None, "http://127.0.0.1:8000"),
    ],
)
def test_one_host_setting_gives_the_bind_argument_and_the_url(
    host: str, argv_host: str | None, url: str
) -> None:
    argv = F["vllm_serve_argv"]({**SETTINGS, "host": host})
    if argv_host is None:  # "" = vLLM's default (every address): no --host at all
        assert "--host" not in argv
    else:
        assert argv[argv.index("--host") + 1] == argv_host
    assert F["vllm_base_url"](host, 8000) == url
    assert serve.base_url(host, "8000") == url


@pytest.mark.parametrize(
    "host",
    [
        "10.0.0.5:8000",  # a port: vllm_service_port
        "fe80::1:8000x",
        "[::1",
        "[10.0.0.5]",  # brackets around anything but IPv6
        "fe80::1%",  # an empty zone
        "http://10.0.0.5",
        "10.0.0.5%eth0",
    ],
)
def test_hosts_that_are_no_bind_address_are_refused(host: str) -> None:
    with pytest.raises(AnsibleFilterError):
        F["vllm_serve_argv"]({**SETTINGS, "host": host})
    with pytest.raises(AnsibleFilterError):
        F["vllm_base_url"](host, 8000)


def test_the_client_unescapes_the_zone_only() -> None:
    assert connect_url("http://[fe80::1%25eth0]:8000/v1/models") == (
        "http://[fe80::1%eth0]:8000/v1/models"
    )
    for url in ("http://[::1]:8000/v1", "http://10.0.0.5:8000/a%25b", "http://h:1/[x%25y]"):
        assert connect_url(url) == url


def _link_local() -> tuple[str, str] | None:
    """A link-local IPv6 address of this machine and its interface, if any."""
    try:
        lines = Path("/proc/net/if_inet6").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        hexaddr, _index, _plen, scope, _flags, name = line.split()
        if scope == "20":  # IPV6_ADDR_LINKLOCAL
            groups = [hexaddr[i : i + 4] for i in range(0, 32, 4)]
            return str(ipaddress.IPv6Address(":".join(groups))), name
    return None


LINK_LOCAL = _link_local()


@pytest.mark.skipif(LINK_LOCAL is None, reason="no link-local IPv6 address here")
def test_both_clients_reach_a_server_on_a_link_local_address_through_the_escaped_url() -> None:
    assert LINK_LOCAL is not None
    address, interface = LINK_LOCAL
    host = f"{address}%{interface}"
    with serve_in_thread(FakeConfig(ttft_s=0.001, itl_s=0.001), host=host) as srv:
        url = serve.base_url(host, srv.port)
        assert f"%25{interface}]" in url

        async def get() -> tuple[int, str]:
            async with make_client(2, 10.0) as client:
                return await fetch(client, f"{url}/v1/models")

        # benchgate's client (aiohttp): the benchmark, /metrics, /tokenize.
        status, body = asyncio.run(get())
        assert status == 200 and '"data"' in body
        # wait_ready.py's (urllib): the readiness check.
        from test_secrets import load_wait_ready

        status, body = load_wait_ready().request(f"{url}/v1/models", timeout=10)
        assert status == 200 and '"data"' in body


@needs_ansible
@needs_unshare
@needs_systemd_analyze
@pytest.mark.parametrize(("host", "expected"), [("[::1]", "::1"), ("fe80::1%eth0", "fe80::1%eth0")])
def test_the_rendered_unit_binds_the_bare_address(tmp_path: Path, host: str, expected: str) -> None:
    done, groups, _, _, _ = _render_example(tmp_path, "l4-fleet.yml", {"vllm_service_host": host})
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    for name in groups["hosts"]:
        unit = (tmp_path / "out" / name / "vllm.service").read_text()
        exec_start = next(line for line in unit.splitlines() if line.startswith("ExecStart="))
        argv = _systemd_words(exec_start.removeprefix("ExecStart="))
        assert argv[argv.index("--host") + 1] == expected


@needs_ansible
def test_a_host_with_a_port_is_refused_before_anything_changes(tmp_path: Path) -> None:
    hosts = {
        "good": _host(tmp_path, "good", vllm_service_host="[::1]"),
        "port": _host(tmp_path, "port", vllm_service_host="10.0.0.5:8000"),
    }
    before = {name: _tree(tmp_path / name) for name in hosts}
    done = _play(tmp_path, ROOT / "playbooks" / "upgrade.yml", _inventory(hosts))
    out = done.stdout + done.stderr
    assert done.returncode != 0, out
    assert "without a port (the port is a setting of its own), got '10.0.0.5:8000'" in out, out
    assert "fatal: [good]" not in out
    assert "PLAY [Upgrade, canary first, then in batches]" not in out
    assert {name: _tree(tmp_path / name) for name in hosts} == before
