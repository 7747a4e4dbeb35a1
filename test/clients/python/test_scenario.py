"""Issue #5 scenario with the generated Python client (kxm-hub-client, connectrpc runtime).

Two agents register, contend for a fenced lease (refusals decoded from google.rpc.ErrorInfo and
the kxm.hub.v1.Lease detail), message each other over Subscribe streams, and a runtime pushes
run facts. Runs once per wire protocol the runtime speaks: Connect (HTTP/1.1), gRPC (h2c) and
gRPC-Web (HTTP/1.1). The hub clock is a fake moved through the control port; nothing sleeps.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import AsyncIterator, Mapping
from typing import TypeVar

import pytest
from connectrpc.code import Code
from connectrpc.errors import ConnectError
from connectrpc.protocol import ProtocolType
from google.protobuf import json_format
from google.rpc import error_details_pb2
from kxm.hub.v1 import lease_pb2, peer_pb2, presence_pb2, sync_event_pb2, sync_pb2
from kxm.hub.v1.lease_connect import LeaseServiceClient
from kxm.hub.v1.peer_connect import PeerServiceClient
from kxm.hub.v1.presence_connect import PresenceServiceClient
from kxm.hub.v1.sync_connect import SyncServiceClient
from pyqwest import Client, HTTPTransport, HTTPVersion

from conftest import HubEnv

PROJECT = "clients"
RUNTIME_ID = "rtm_python0001"
FRAME_TIMEOUT_S = 10.0
CALL_TIMEOUT_MS = 10_000
STREAM_TIMEOUT_MS = 60_000
# Frames a stream may interleave with the ones a step waits for.
SKIPPED_FRAMES = ("ready", "presence", "keep_alive")

PROTOCOLS = {
    "connect": (ProtocolType.CONNECT, HTTPVersion.HTTP1),
    "grpc": (ProtocolType.GRPC, HTTPVersion.HTTP2),
    "grpc_web": (ProtocolType.GRPC_WEB, HTTPVersion.HTTP1),
}

T = TypeVar("T")


class Clients:
    """The four service clients over one HTTP transport and wire protocol."""

    def __init__(self, base_url: str, protocol: ProtocolType, http: Client) -> None:
        kw = {"protocol": protocol, "http_client": http, "timeout_ms": CALL_TIMEOUT_MS}
        self.presence = PresenceServiceClient(base_url, **kw)
        self.lease = LeaseServiceClient(base_url, **kw)
        self.peer = PeerServiceClient(base_url, **kw)
        self.sync = SyncServiceClient(base_url, **kw)


def error_details(err: ConnectError) -> tuple[error_details_pb2.ErrorInfo, lease_pb2.Lease | None]:
    """Decodes the ErrorInfo (required) and the Lease detail (if any) of a refusal.

    ErrorDetail.value() only understands the runtime's own protobuf-py message types, so with
    google.protobuf (protobuf=google stubs) the detail is decoded from type_name + message_bytes.
    """
    infos = [error_details_pb2.ErrorInfo.FromString(d.message_bytes) for d in err.details if d.type_name == "google.rpc.ErrorInfo"]
    leases = [lease_pb2.Lease.FromString(d.message_bytes) for d in err.details if d.type_name == "kxm.hub.v1.Lease"]
    types = [d.type_name for d in err.details]
    assert len(infos) == 1, f"expected one google.rpc.ErrorInfo detail, got {types}"
    assert len(leases) <= 1, f"expected at most one kxm.hub.v1.Lease detail, got {types}"
    return infos[0], leases[0] if leases else None


async def refused(call) -> ConnectError:
    """Awaits a call that must be refused and returns its ConnectError."""
    try:
        res = await call
    except ConnectError as err:
        return err
    pytest.fail(f"expected a refusal, got {type(res).__name__}: {res}")


async def next_frame(stream: AsyncIterator[peer_pb2.SubscribeResponse], want: str, what: str) -> peer_pb2.SubscribeResponse:
    """The next `want` frame of a Subscribe stream, skipping ready/presence/keep_alive frames.

    Bounded by FRAME_TIMEOUT_S so a missing frame fails the test instead of hanging it.
    """
    deadline = time.monotonic() + FRAME_TIMEOUT_S
    skipped: list[str] = []
    while True:
        remaining = deadline - time.monotonic()
        frame = None
        try:
            if remaining > 0:
                frame = await asyncio.wait_for(anext(stream), remaining)
        except StopAsyncIteration:
            pytest.fail(f"{what}: stream ended before a {want} frame (skipped {skipped})")
        except (TimeoutError, asyncio.TimeoutError):
            pass
        except ConnectError as err:
            # The runtime turns the cancellation of a pending read (wait_for's timeout) into
            # ConnectError(Code.CANCELED) instead of letting CancelledError through.
            if err.code != Code.CANCELED or time.monotonic() < deadline:
                raise
        if frame is None:
            pytest.fail(f"{what}: no {want} frame within {FRAME_TIMEOUT_S}s (skipped {skipped})")
        kind = frame.WhichOneof("event")
        if kind == want:
            return frame
        if kind not in SKIPPED_FRAMES:
            pytest.fail(f"{what}: unexpected {kind} frame while waiting for {want}: {frame}")
        skipped.append(kind)


def sync_event(project_id: str, run_id: str, sequence: int) -> sync_event_pb2.SyncEvent:
    """A valid kxm.sync-event.v1 event (the shape of test/sync/fixtures.ts syncEvent())."""
    sha = lambda c: "sha256:" + c * 64  # noqa: E731
    return json_format.ParseDict(
        {
            "schema": "kxm.sync-event.v1",
            "sourceEventId": f"evt_python{sequence:04d}",
            "projectId": project_id,
            "runId": run_id,
            "homeRuntimeId": RUNTIME_ID,
            "memoryRevision": "mem_memory0001",
            "eventType": "run.status_changed",
            "sequence": sequence,
            "occurredAt": "2026-01-01T12:00:00.123Z",
            "configRevision": sha("a"),
            "executorPolicyRevision": sha("b"),
            "toolPolicyRevision": sha("c"),
            "syncPolicyRevision": sha("d"),
            "redaction": {"version": "v1", "fieldsOmitted": [], "valuesReplaced": 0},
            "payload": {"status": "running", "workflowId": "wf-build", "displayTitle": f"Build step {sequence}"},
        },
        sync_event_pb2.SyncEvent(),
    )


async def register(c: Clients, auth: Mapping[str, str], name: str) -> tuple[presence_pb2.Agent, dict[str, str]]:
    res = await c.presence.register_agent(
        presence_pb2.RegisterAgentRequest(name=name, project=PROJECT, purpose="python client scenario"), headers=auth
    )
    assert res.agent.name == name
    assert res.agent.project == PROJECT
    assert res.agent.id.startswith("agt_")
    assert res.agent_key.startswith("key_")
    assert not res.resumed
    return res.agent, {**auth, "x-kxm-agent-id": res.agent.id, "x-kxm-agent-key": res.agent_key}


async def scenario(hub: HubEnv, protocol: ProtocolType, http_version: HTTPVersion, tag: str) -> None:
    uid = secrets.token_hex(4)
    auth = {"authorization": f"Bearer {hub.project_token}"}
    async with HTTPTransport(http_version=http_version) as transport:
        c = Clients(hub.hub_url, protocol, Client(transport))

        # 1. two agents register in project "clients"
        alpha, a_hdr = await register(c, auth, f"alpha-py-{tag}-{uid}")
        beta, b_hdr = await register(c, auth, f"beta-py-{tag}-{uid}")

        # 2. agent 1 acquires the lease (token 1) and renews it
        lease_name = f"deploy-py-{tag}-{uid}"
        got = await c.lease.acquire_lease(lease_pb2.AcquireLeaseRequest(name=lease_name, ttl_ms=5000), headers=a_hdr)
        assert got.lease.fencing_token == 1
        assert not got.renewed
        assert got.lease.holder_agent_id == alpha.id
        assert got.lease.holder_agent_name == alpha.name
        assert got.lease.resource == f"{PROJECT}/{lease_name}"
        renewed = await c.lease.renew_lease(lease_pb2.RenewLeaseRequest(name=lease_name, fencing_token=1, ttl_ms=5000), headers=a_hdr)
        assert renewed.renewed
        assert renewed.lease.fencing_token == 1

        # 3. agent 2 is refused: aborted, LEASE_HELD, holder named, the lease attached
        err = await refused(c.lease.acquire_lease(lease_pb2.AcquireLeaseRequest(name=lease_name, ttl_ms=5000), headers=b_hdr))
        assert err.code == Code.ABORTED, f"{err.code}: {err.message}"
        info, held = error_details(err)
        assert info.reason == "LEASE_HELD"
        assert info.domain == "kxm-hub"
        assert info.metadata["holderAgentName"] == alpha.name, dict(info.metadata)
        assert info.metadata["fencingToken"] == "1", dict(info.metadata)
        assert held is not None, "LEASE_HELD without a kxm.hub.v1.Lease detail"
        assert held.resource == f"{PROJECT}/{lease_name}"
        assert held.name == lease_name
        assert held.project == PROJECT
        assert held.holder_agent_id == alpha.id
        assert held.holder_agent_name == alpha.name
        assert held.fencing_token == 1
        assert held.expires_at.ToMilliseconds() > held.acquired_at.ToMilliseconds()

        # 4. the lease lapses on the hub clock; agent 2 takes over (token 2); agent 1 is superseded
        hub.advance(5001)
        took = await c.lease.acquire_lease(lease_pb2.AcquireLeaseRequest(name=lease_name, ttl_ms=5000), headers=b_hdr)
        assert took.lease.fencing_token == 2
        assert not took.renewed
        assert took.lease.holder_agent_id == beta.id
        assert took.lease.holder_agent_name == beta.name
        err = await refused(c.lease.renew_lease(lease_pb2.RenewLeaseRequest(name=lease_name, fencing_token=1, ttl_ms=5000), headers=a_hdr))
        assert err.code == Code.ABORTED, f"{err.code}: {err.message}"
        info, current = error_details(err)
        assert info.reason == "LEASE_SUPERSEDED"
        assert info.domain == "kxm-hub"
        assert info.metadata["holderAgentName"] == beta.name, dict(info.metadata)
        assert current is not None, "LEASE_SUPERSEDED without a kxm.hub.v1.Lease detail"
        assert current.fencing_token == 2
        assert current.holder_agent_id == beta.id

        # 5. messages over Subscribe streams
        b_stream = c.peer.subscribe(peer_pb2.SubscribeRequest(), headers=b_hdr, timeout_ms=STREAM_TIMEOUT_MS)
        a_stream = c.peer.subscribe(peer_pb2.SubscribeRequest(), headers=a_hdr, timeout_ms=STREAM_TIMEOUT_MS)
        try:
            ready = await next_frame(b_stream, "ready", "agent 2 subscribe")
            assert ready.ready.agent.id == beta.id
            content = f"deploy is yours ({tag} {uid})"
            sent = await c.peer.send_message(peer_pb2.SendMessageRequest(target=beta.name, content=content), headers=a_hdr)
            assert sent.message.status == peer_pb2.MESSAGE_STATUS_QUEUED
            assert sent.message.to_agent_id == beta.id
            assert sent.message.from_agent_id == alpha.id

            got_msg = await next_frame(b_stream, "message", "agent 2 inbox")
            assert got_msg.message.id == sent.message.id
            assert got_msg.message.content == content
            assert got_msg.message.from_name == alpha.name

            acked = await c.peer.ack_message(peer_pb2.AckMessageRequest(message_id=sent.message.id), headers=b_hdr)
            assert acked.message.status == peer_pb2.MESSAGE_STATUS_DELIVERED

            # agent 1's stream is open (ready seen) before agent 2 replies
            ready = await next_frame(a_stream, "ready", "agent 1 subscribe")
            assert ready.ready.agent.id == alpha.id
            reply_text = f"thanks, taking it from here ({tag} {uid})"
            replied = await c.peer.reply_message(peer_pb2.ReplyMessageRequest(message_id=sent.message.id, content=reply_text), headers=b_hdr)
            assert replied.message.status == peer_pb2.MESSAGE_STATUS_REPLIED

            got_reply = await next_frame(a_stream, "reply", "agent 1 replies")
            assert got_reply.reply.id == sent.message.id
            assert got_reply.reply.reply.content == reply_text
            assert got_reply.reply.status == peer_pb2.MESSAGE_STATUS_REPLIED
        finally:
            await b_stream.aclose()
            await a_stream.aclose()

        # 6. a runtime pushes three events of one run; the cursor reaches 3
        project_id, run_id = f"prj_py{uid}{tag.replace('_', '')}", f"run_py{uid}{tag.replace('_', '')}"
        pushed = await c.sync.push_events(
            sync_pb2.PushEventsRequest(project=PROJECT, runtime_id=RUNTIME_ID, events=[sync_event(project_id, run_id, n) for n in (1, 2, 3)]),
            headers=auth,
        )
        assert [r.outcome for r in pushed.results] == [sync_pb2.SYNC_OUTCOME_ACCEPTED] * 3, pushed
        assert [r.sequence for r in pushed.results] == [1, 2, 3]
        assert [(r.project_id, r.run_id, r.cursor) for r in pushed.cursors] == [(project_id, run_id, 3)]
        cursor = await c.sync.get_cursor(sync_pb2.GetCursorRequest(project=PROJECT, project_id=project_id, run_id=run_id), headers=auth)
        assert cursor.cursor.cursor == 3
        assert cursor.cursor.project_id == project_id
        assert cursor.cursor.run_id == run_id


@pytest.mark.parametrize("tag", list(PROTOCOLS))
def test_scenario(hub: HubEnv, tag: str) -> None:
    protocol, http_version = PROTOCOLS[tag]
    asyncio.run(scenario(hub, protocol, http_version, tag))
