"""The hub's MCP face (/mcp) through the Python `mcp` SDK's own client over Streamable HTTP.

Run by test/clients/mcp.test.ts, which starts the hub and sets:
  KXM_MCP_URL      the hub's MCP endpoint (http://127.0.0.1:PORT/mcp)
  KXM_MCP_PROJECT  the project the agents act in
  KXM_MCP_TOKEN    that project's bearer token
The tests are collected only when KXM_MCP_URL is set: test/clients/python.test.ts runs this
directory for the generated client's tests and sets none of these, so they stay out of its count.

Each agent is one MCP session, opened with the 2025-era handshake (ClientSession.initialize), whose
headers name the agent (X-Kxm-Project, X-Kxm-Agent, Authorization: Bearer <project token>). The
headers go on the httpx2 client the transport uses. Tool results are checked on their structured
content (the REST JSON of the hub's answer), never on their text. A session that subscribes to a
resource (kxm://leases) is told of its changes by notifications/resources/updated on its GET stream.
The high-level `Client` in its default mode ("auto") negotiates instead: it lands on protocol
2026-07-28, which has no session, and its agent is named by the same headers on every request.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client, ClientSession, types
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

ENABLED = bool(os.environ.get("KXM_MCP_URL"))

TOOLS = {
    "whoami",
    "list_agents",
    "send_message",
    "ack_message",
    "reply_message",
    "cancel_message",
    "get_message",
    "acquire_lease",
    "renew_lease",
    "release_lease",
    "get_lease",
    "list_leases",
}

# Generous: a waiting acquire is answered only when the holder releases.
CALL_TIMEOUT_S = 90.0


@dataclass(frozen=True)
class McpEnv:
    url: str
    project: str
    token: str


@dataclass
class Exchange:
    method: str
    status: int
    headers: dict[str, str]


@dataclass
class Notices:
    """The notifications/resources/updated a session got (their URIs, in order), and a wake-up for who waits on them."""

    uris: list[str] = field(default_factory=list)
    news: anyio.Event = field(default_factory=anyio.Event)

    async def handle(self, message: Any) -> None:
        """The session's message_handler: records each resource update."""
        if isinstance(message, types.ResourceUpdatedNotification):
            self.uris.append(str(message.params.uri))
            self.news.set()
            self.news = anyio.Event()

    async def told(self, uri: str, after: int, timeout_s: float = 30.0) -> None:
        """Waits until `uri` is among the updates got from index `after` on."""
        with anyio.fail_after(timeout_s):
            while uri not in self.uris[after:]:
                await self.news.wait()


@dataclass
class Agent:
    name: str
    session: ClientSession
    # Every HTTP exchange of the session, in order (the response event hook of its httpx2 client).
    exchanges: list[Exchange] = field(default_factory=list)
    # The resource updates the session was told of (resources/subscribe).
    notices: Notices = field(default_factory=Notices)

    async def call(self, tool: str, arguments: dict[str, Any] | None = None) -> tuple[bool, dict[str, Any]]:
        """One tool call: (is_error, structured content)."""
        result = await self.session.call_tool(tool, arguments or {}, read_timeout_seconds=CALL_TIMEOUT_S)
        assert result.structured_content is not None, f"{tool} answered without structured content: {result}"
        return bool(result.is_error), result.structured_content

    async def ok(self, tool: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
        is_error, out = await self.call(tool, arguments)
        assert not is_error, f"{tool}({arguments}) was refused: {out}"
        return out


def _recorder(exchanges: list[Exchange]) -> Callable[[httpx2.Response], Awaitable[None]]:
    async def record(response: httpx2.Response) -> None:
        exchanges.append(Exchange(response.request.method, response.status_code, {k.lower(): v for k, v in response.headers.items()}))

    return record


@asynccontextmanager
async def open_agent(env: McpEnv, name: str, *, token: str | None = None) -> AsyncIterator[Agent]:
    """An MCP session acting as agent `name`; leaving it ends the session (the transport sends DELETE)."""
    exchanges: list[Exchange] = []
    notices = Notices()
    headers = {
        "Authorization": f"Bearer {env.token if token is None else token}",
        "X-Kxm-Project": env.project,
        "X-Kxm-Agent": name,
    }
    # The GET stream carries the notifications; the transport opens it after initialize without
    # waiting, and its answer's head comes with its first event. So: wait until the GET is sent,
    # then make a round trip behind it.
    get_sent = anyio.Event()

    async def on_request(request: httpx2.Request) -> None:
        if request.method == "GET":
            get_sent.set()

    async with httpx2.AsyncClient(
        headers=headers,
        timeout=httpx2.Timeout(30, read=300),
        event_hooks={"request": [on_request], "response": [_recorder(exchanges)]},
    ) as http:
        async with streamable_http_client(env.url, http_client=http) as (read, write):
            async with ClientSession(read, write, message_handler=notices.handle) as session:
                await session.initialize()
                with anyio.fail_after(10):
                    await get_sent.wait()
                await session.send_ping()
                yield Agent(name=name, session=session, exchanges=exchanges, notices=notices)


def leaf_errors(exc: BaseException) -> list[BaseException]:
    """The exceptions inside (nested) exception groups, or the exception itself."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for e in exc.exceptions for leaf in leaf_errors(e)]
    return [exc]


@pytest.fixture(scope="module")
def mcp_env() -> McpEnv:
    names = ("KXM_MCP_URL", "KXM_MCP_PROJECT", "KXM_MCP_TOKEN")
    missing = [n for n in names if not os.environ.get(n)]
    if missing:
        pytest.fail(f"missing environment: {', '.join(missing)} (run via test/clients/mcp.test.ts)", pytrace=False)
    return McpEnv(url=os.environ["KXM_MCP_URL"], project=os.environ["KXM_MCP_PROJECT"], token=os.environ["KXM_MCP_TOKEN"])


class TestMcpFace:
    __test__ = ENABLED

    def test_tools_are_listed(self, mcp_env: McpEnv) -> None:
        async def main() -> None:
            async with open_agent(mcp_env, "py-lister") as a:
                listed = await a.session.list_tools()
                # The twelve tools of the face's first part, among whatever later parts add.
                assert TOOLS <= {t.name for t in listed.tools}
                acquire = next(t for t in listed.tools if t.name == "acquire_lease")
                assert acquire.input_schema.get("required") == ["name"]
                # No tool takes an identity: the session is the agent.
                for t in listed.tools:
                    assert "agent_id" not in (t.input_schema.get("properties") or {})

        anyio.run(main)

    def test_lease_handover_stale_token_and_mail(self, mcp_env: McpEnv) -> None:
        async def main() -> None:
            async with open_agent(mcp_env, "py-alpha") as a, open_agent(mcp_env, "py-beta") as b:
                me = await a.ok("whoami")
                assert me["agent"]["name"] == "py-alpha"
                assert me["agent"]["project"] == mcp_env.project
                assert (await b.ok("whoami"))["agent"]["name"] == "py-beta"

                first = (await a.ok("acquire_lease", {"name": "repo/main", "ttl_ms": 30_000}))["lease"]
                assert first["holderAgentName"] == "py-alpha"
                token = first["fencingToken"]
                assert isinstance(token, int)

                # B waits in line: its call stays open while A holds the lease.
                granted: dict[str, Any] = {}

                async def wait_for_lease() -> None:
                    granted["result"] = await b.call("acquire_lease", {"name": "repo/main", "ttl_ms": 30_000, "wait_ms": 60_000})

                async with anyio.create_task_group() as tg:
                    tg.start_soon(wait_for_lease)
                    waiters: list[Any] = []
                    with anyio.fail_after(20):
                        while not waiters:
                            await anyio.sleep(0.02)
                            waiters = (await a.ok("get_lease", {"name": "repo/main"}))["lease"].get("waiters") or []
                    assert "result" not in granted, "the waiting acquire was answered while the lease was held"
                    held = await a.ok("get_lease", {"name": "repo/main"})
                    assert held["lease"]["holderAgentName"] == "py-alpha"

                    released = await a.ok("release_lease", {"name": "repo/main", "fencing_token": token})
                    assert released["lease"]["name"] == "repo/main"

                is_error, out = granted["result"]
                assert not is_error, out
                assert out["lease"]["holderAgentName"] == "py-beta"
                assert out["lease"]["fencingToken"] == token + 1

                # A's old token no longer renews anything.
                is_error, out = await a.call("renew_lease", {"name": "repo/main", "fencing_token": token})
                assert is_error
                assert out["code"] == "lease_superseded", out
                assert out["error"]

                # Mail: A sends, B acknowledges and replies, A reads the reply.
                sent = (await a.ok("send_message", {"target": "py-beta", "content": "please review main"}))["message"]
                assert sent["fromName"] == "py-alpha"
                assert sent["toName"] == "py-beta"
                acked = (await b.ok("ack_message", {"message_id": sent["id"]}))["message"]
                assert acked["status"] == "delivered"
                replied = (await b.ok("reply_message", {"message_id": sent["id"], "content": "looks good"}))["message"]
                assert replied["id"] == sent["id"]
                read = (await a.ok("get_message", {"message_id": sent["id"]}))["message"]
                assert read["status"] == "replied"
                assert read["reply"]["content"] == "looks good"

                await b.ok("release_lease", {"name": "repo/main", "fencing_token": token + 1})

        anyio.run(main)

    # resources/subscribe is the 2025-era way (these sessions' era); the SDK warns that 2026-07-28 replaced it.
    @pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")
    def test_closing_a_session_releases_its_agents_leases_at_once(self, mcp_env: McpEnv) -> None:
        async def main() -> None:
            async with open_agent(mcp_env, "py-delta") as b:
                # B follows the project's leases: told of A's lease, and of its release, instead of polling.
                await b.session.subscribe_resource("kxm://leases")
                async with open_agent(mcp_env, "py-gamma") as a:
                    told = len(b.notices.uris)
                    held = (await a.ok("acquire_lease", {"name": "deploy/py", "ttl_ms": 300_000}))["lease"]
                    await b.notices.told("kxm://leases", told)
                    # The resource holds what list_leases answers.
                    read = await b.session.read_resource("kxm://leases")
                    assert isinstance(read, types.ReadResourceResult), read
                    content = read.contents[0]
                    assert isinstance(content, types.TextResourceContents), content
                    assert content.mime_type == "application/json"
                    assert json.loads(content.text) == await b.ok("list_leases")
                    told = len(b.notices.uris)
                    is_error, out = await b.call("acquire_lease", {"name": "deploy/py"})
                    assert is_error
                    assert out["code"] == "lease_held", out
                    assert out["lease"]["holderAgentName"] == "py-gamma"
                # Leaving the session sent DELETE, and the hub accepted it.
                deletes = [x for x in a.exchanges if x.method == "DELETE"]
                assert [x.status for x in deletes] == [200], a.exchanges
                await b.notices.told("kxm://leases", told)
                await b.session.unsubscribe_resource("kxm://leases")

                # No wait: the lease is free at once, on the next fencing token.
                after = (await b.ok("acquire_lease", {"name": "deploy/py"}))["lease"]
                assert after["holderAgentName"] == "py-delta"
                assert after["fencingToken"] == held["fencingToken"] + 1
                agents = (await b.ok("list_agents", {"include_offline": True}))["agents"]
                gamma = next(x for x in agents if x["name"] == "py-gamma")
                assert not gamma.get("online"), gamma
                await b.ok("release_lease", {"name": "deploy/py", "fencing_token": after["fencingToken"]})

        anyio.run(main)

    def test_a_wrong_token_is_refused_at_initialize_with_http_401(self, mcp_env: McpEnv) -> None:
        async def main() -> None:
            exchanges: list[Exchange] = []
            headers = {"Authorization": "Bearer not-the-token", "X-Kxm-Project": mcp_env.project, "X-Kxm-Agent": "py-mallory"}
            async with httpx2.AsyncClient(headers=headers, timeout=30, event_hooks={"response": [_recorder(exchanges)]}) as http:
                with pytest.raises(BaseException) as caught:
                    async with streamable_http_client(mcp_env.url, http_client=http) as (read, write):
                        async with ClientSession(read, write) as session:
                            await session.initialize()
            refusals = [e for e in leaf_errors(caught.value) if isinstance(e, MCPError)]
            assert refusals, f"initialize failed without an MCP error: {caught.value!r}"
            assert refusals[0].data["code"] == "invalid_auth", refusals[0].data
            # The one exchange was the initialize POST, refused with 401 and a Bearer challenge.
            assert [(x.method, x.status) for x in exchanges] == [("POST", 401)], exchanges
            assert exchanges[0].headers.get("www-authenticate") == "Bearer"

            # The refusal changed nothing: no agent of that name was registered.
            async with open_agent(mcp_env, "py-witness") as w:
                agents = (await w.ok("list_agents", {"include_offline": True}))["agents"]
                assert "py-mallory" not in {x["name"] for x in agents}

        anyio.run(main)

    def test_a_negotiating_client_lands_on_2026_07_28_and_acts_as_its_headers_agent(self, mcp_env: McpEnv) -> None:
        async def main() -> None:
            def headers(name: str) -> dict[str, str]:
                return {"Authorization": f"Bearer {mcp_env.token}", "X-Kxm-Project": mcp_env.project, "X-Kxm-Agent": name}

            async with (
                httpx2.AsyncClient(headers=headers("py-modern-a"), timeout=httpx2.Timeout(30, read=300)) as ha,
                httpx2.AsyncClient(headers=headers("py-modern-b"), timeout=httpx2.Timeout(30, read=300)) as hb,
                Client(streamable_http_client(mcp_env.url, http_client=ha)) as a,
                Client(streamable_http_client(mcp_env.url, http_client=hb)) as b,
            ):
                # The default mode probes server/discover: the hub serves the newest version.
                assert a.protocol_version == "2026-07-28"
                assert b.protocol_version == "2026-07-28"
                assert TOOLS <= {t.name for t in (await a.list_tools()).tools}

                async def ok(c: Client, tool: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
                    result = await c.call_tool(tool, arguments or {}, read_timeout_seconds=CALL_TIMEOUT_S)
                    assert not result.is_error, f"{tool}({arguments}) was refused: {result.structured_content}"
                    assert result.structured_content is not None
                    return result.structured_content

                assert (await ok(a, "whoami"))["agent"]["name"] == "py-modern-a"
                lease = (await ok(a, "acquire_lease", {"name": "modern/py", "ttl_ms": 30_000}))["lease"]
                held = await b.call_tool("acquire_lease", {"name": "modern/py"})
                assert held.is_error
                assert held.structured_content is not None and held.structured_content["code"] == "lease_held"
                sent = (await ok(a, "send_message", {"target": "py-modern-b", "content": "over to you"}))["message"]
                inbox = await ok(b, "read_inbox")
                assert sent["id"] in {e["message"]["id"] for e in inbox["events"] if "message" in e}
                await ok(b, "ack_message", {"message_id": sent["id"]})
                await ok(a, "release_lease", {"name": "modern/py", "fencing_token": lease["fencingToken"]})

        anyio.run(main)
