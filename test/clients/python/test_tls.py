"""The Python library over TLS (`tls_ca`) and mutual TLS (`tls_cert`, `tls_key`), against two hubs
test/clients/python.test.ts starts for it:
  KXM_TLS_HUB_URL    a hub with TLS (https://127.0.0.1:PORT)
  KXM_MTLS_HUB_URL   a hub with mutual TLS (its client CA the same CA)
  KXM_TLS_CA         the CA that signed the hubs' certificate (and the client certificate)
  KXM_TLS_CLIENT_CERT, KXM_TLS_CLIENT_KEY   a client certificate that CA signed
A failed handshake is HubError tls_failed with its TLS reason, never a transient "unavailable".
"""

from __future__ import annotations

import asyncio
import os
import secrets
from dataclasses import dataclass

import kxmhub
import pytest
from connectrpc.protocol import ProtocolType

PROJECT = "clients"


@dataclass(frozen=True)
class TlsEnv:
    tls_url: str
    mtls_url: str
    ca: str
    cert: str
    key: str
    token: str


@pytest.fixture(scope="module")
def tls() -> TlsEnv:
    names = ("KXM_TLS_HUB_URL", "KXM_MTLS_HUB_URL", "KXM_TLS_CA", "KXM_TLS_CLIENT_CERT", "KXM_TLS_CLIENT_KEY", "KXM_PROJECT_TOKEN")
    missing = [n for n in names if not os.environ.get(n)]
    if missing:
        pytest.fail(f"missing environment: {', '.join(missing)} (run via test/clients/python.test.ts)", pytrace=False)
    e = os.environ
    return TlsEnv(e["KXM_TLS_HUB_URL"], e["KXM_MTLS_HUB_URL"], e["KXM_TLS_CA"], e["KXM_TLS_CLIENT_CERT"], e["KXM_TLS_CLIENT_KEY"], e["KXM_PROJECT_TOKEN"])


async def refused(url: str, token: str, **kw) -> kxmhub.HubError:
    with pytest.raises(kxmhub.HubError) as caught:
        await kxmhub.connect(url, project=PROJECT, name=f"refused-{secrets.token_hex(4)}", token=token, heartbeat=3600, **kw)
    return caught.value


@pytest.mark.parametrize("protocol", [ProtocolType.CONNECT, ProtocolType.GRPC], ids=["connect", "grpc"])
def test_tls_hub_with_its_ca(tls: TlsEnv, protocol: ProtocolType) -> None:
    async def run() -> None:
        async with await kxmhub.connect(tls.tls_url, project=PROJECT, name=f"tls-{secrets.token_hex(4)}", token=tls.token, heartbeat=3600, protocol=protocol, tls_ca=tls.ca) as s:
            async with s.lease(f"py-tls-{secrets.token_hex(4)}", ttl=10) as lease:
                assert lease.token == 1

    asyncio.run(run())


def test_tls_files_with_an_http_url_are_refused(tls: TlsEnv) -> None:
    """TLS files for a hub reached in clear would not be used: refused, nothing sent in clear."""

    async def run() -> None:
        e = await refused(tls.tls_url.replace("https://", "http://", 1), tls.token, tls_ca=tls.ca)
        assert e.code == "invalid_tls_config" and "not https://" in e.message, e

    asyncio.run(run())


def test_tls_hub_without_its_ca_or_with_an_unreadable_one(tls: TlsEnv, tmp_path) -> None:
    async def run() -> None:
        e = await refused(tls.tls_url, tls.token)
        assert (e.code, e.transient, e.metadata.get("tlsCode")) == ("tls_failed", False, "CERTIFICATE_VERIFY_FAILED"), e
        missing = tmp_path / "missing.pem"
        e = await refused(tls.tls_url, tls.token, tls_ca=missing)
        assert (e.code, e.message) == ("invalid_tls_config", f"cannot read tls_ca {missing}: No such file or directory")

    asyncio.run(run())


def test_mutual_tls_hub_served_with_its_client_certificate_only(tls: TlsEnv) -> None:
    async def run() -> None:
        async with await kxmhub.connect(tls.mtls_url, project=PROJECT, name=f"mtls-{secrets.token_hex(4)}", token=tls.token, heartbeat=3600, tls_ca=tls.ca, tls_cert=tls.cert, tls_key=tls.key) as s:
            assert (await s.acquire(f"py-mtls-{secrets.token_hex(4)}", ttl=10)).token == 1
        e = await refused(tls.mtls_url, tls.token, tls_ca=tls.ca)
        assert (e.code, e.metadata.get("tlsCode")) == ("tls_failed", "TLSV13_ALERT_CERTIFICATE_REQUIRED"), e
        assert "certificate required" in e.message

    asyncio.run(run())
