"""The molecule instances' connection: containers.podman's, with pipelining.

Molecule's podman driver connects with ``ansible_connection: podman``; this
file, on ANSIBLE_CONNECTION_PLUGINS (each scenario's molecule.yml), answers to
that name first. It only changes how a module reaches the container: the
module's code goes to the container's Python on the stdin of one
``podman exec --interactive`` instead of being copied in, made executable, run
and removed with more podman calls (two calls a task instead of five). On
the 2-core reference machine 20 small tasks took 22.5 s that way and 9.4 s
this way (lab/experiments/connection_cost.sh); most tasks of a molecule run
are in the nested ``ansible-playbook`` runs of verify.yml, which inherit
the variable.

Test infrastructure only: the product's roles run on whatever connection a
user's inventory names, and nothing here ships in the collection.
"""

from __future__ import annotations

import shlex
from typing import Any

from ansible.module_utils.common.text.converters import to_native
from ansible_collections.containers.podman.plugins.connection.podman import (
    Connection as PodmanConnection,
)

DOCUMENTATION = """
name: podman
short_description: Run tasks in a podman container, the module on stdin
description:
  - containers.podman.podman with pipelining, for benchgate's molecule instances.
author: benchgate
options:
  remote_addr:
    description: The container's name or ID.
    default: inventory_hostname
    vars:
      - name: ansible_host
      - name: inventory_hostname
      - name: ansible_podman_host
  remote_user:
    description: The user inside the container (podman's default when unset).
    ini:
      - section: defaults
        key: remote_user
    env:
      - name: ANSIBLE_REMOTE_USER
    vars:
      - name: ansible_user
  podman_extra_args:
    description: Extra arguments for every podman call.
    default: ''
    ini:
      - section: defaults
        key: podman_extra_args
    vars:
      - name: ansible_podman_extra_args
    env:
      - name: ANSIBLE_PODMAN_EXTRA_ARGS
  podman_executable:
    description: The podman executable.
    default: podman
    vars:
      - name: ansible_podman_executable
    env:
      - name: ANSIBLE_PODMAN_EXECUTABLE
"""


class Connection(PodmanConnection):  # type: ignore[misc]
    """containers.podman.podman, with the module sent on stdin."""

    transport = "podman"
    has_pipelining = True

    def exec_command(self, cmd: str, in_data: bytes | None = None, sudoable: bool = False) -> Any:
        if in_data is None:
            return super().exec_command(cmd, in_data=in_data, sudoable=sudoable)
        # What the parent does, plus --interactive so that podman passes stdin on.
        self._connect()
        args = ["exec", "--interactive"]
        if self.user:
            args.extend(["--user", self.user])
        argv = shlex.split(to_native(cmd, errors="surrogate_or_strict"))
        return self._podman(args, argv, in_data)
