"""An agent of a hub with TLS and mutual TLS: it trusts the CA that signed the hub's certificate
and presents this host's client certificate (one the hub's KXM_TLS_CLIENT_CA signed)."""
import asyncio
import os

import kxmhub


async def main() -> None:
    env = os.environ.get
    async with await kxmhub.connect(
        env("KXM_URL", "https://127.0.0.1:7331"), project="demo", name="deployer", token=env("KXM_TOKEN"),
        tls_ca=env("KXM_TLS_CA"), tls_cert=env("KXM_TLS_CLIENT_CERT"), tls_key=env("KXM_TLS_CLIENT_KEY"),  # PEM files
    ) as hub:
        async with hub.lease("deploy/prod", ttl=10) as lease:
            print(f"deploying with fencing token {lease.token}")


asyncio.run(main())
