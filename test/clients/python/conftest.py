"""Shared setup for the Python client tests (run by test/clients/python.test.ts).

The hub and its control port are started by the vitest side; the tests only read where they are:
  KXM_HUB_URL        base URL of the hub (Connect, gRPC, gRPC-Web on one port)
  KXM_CONTROL_URL    control port of the test hub (POST /advance?ms=N moves the hub clock)
  KXM_PROJECT_TOKEN  bearer token of project "clients"
A missing variable fails the tests; they never skip.
"""

from __future__ import annotations

import json
import os
import pathlib
import sys
import urllib.request
from dataclasses import dataclass

import pytest


@dataclass(frozen=True)
class HubEnv:
    hub_url: str
    control_url: str
    project_token: str

    def sleepers(self) -> int:
        """How many waits sleep on the hub clock (stream keep-alives, waiting acquires)."""
        with urllib.request.urlopen(f"{self.control_url}/sleepers", timeout=10) as res:
            return int(json.load(res)["sleepers"])

    def advance(self, ms: int) -> int:
        """Moves the hub's fake clock forward by `ms` and returns the hub's new now (ms)."""
        req = urllib.request.Request(f"{self.control_url}/advance?ms={ms}", method="POST", data=b"")
        with urllib.request.urlopen(req, timeout=10) as res:
            assert res.status == 200, f"control /advance answered {res.status}"
            return int(json.load(res)["nowMs"])


@pytest.fixture(scope="session")
def hub() -> HubEnv:
    names = ("KXM_HUB_URL", "KXM_CONTROL_URL", "KXM_PROJECT_TOKEN")
    missing = [n for n in names if not os.environ.get(n)]
    if missing:
        pytest.fail(f"missing environment: {', '.join(missing)} (run via test/clients/python.test.ts)", pytrace=False)
    return HubEnv(
        hub_url=os.environ["KXM_HUB_URL"].rstrip("/"),
        control_url=os.environ["KXM_CONTROL_URL"].rstrip("/"),
        project_token=os.environ["KXM_PROJECT_TOKEN"],
    )


@pytest.fixture(scope="session", autouse=True)
def installed_client_package() -> None:
    """The tests must exercise the pip-installed kxm-hub-proto and kxm-hub-client, never
    gen/python or clients/python on sys.path."""
    import kxm.hub.v1.lease_connect
    import kxmhub

    site = [pathlib.Path(p).resolve() for p in sys.path if p.endswith("site-packages")]
    for mod in (kxm.hub.v1.lease_connect, kxmhub):
        where = pathlib.Path(mod.__file__).resolve()
        if not any(s in where.parents for s in site):
            pytest.fail(f"{mod.__name__} imported from {where}, not from an installed package", pytrace=False)


def count_subscribes(session) -> list[int]:
    """Counts the Subscribe streams a kxmhub session opens: the returned list's one item."""
    count = [0]
    original = session.peer.subscribe

    def counted(req, *, headers=None, timeout_ms=None):
        count[0] += 1
        return original(req, headers=headers, timeout_ms=timeout_ms)

    session.peer.subscribe = counted
    return count
