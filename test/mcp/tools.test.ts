import { describe, expect, it } from "vitest";
import { listed, tools } from "../../src/mcp/tools.js";
import { docs } from "../../gen/ts/kxm/hub/v1/docs.js";

/**
 * The MCP tool table is read off the proto: the `(kxm.hub.v1.mcp_tool)` option of each RPC gives
 * the name and hints, the RPC's and the request fields' comments (gen/ts/kxm/hub/v1/docs.ts,
 * whose freshness scripts/check-gen.sh checks) give the descriptions. What a model sees must stay
 * what it was: the same tools, the same inputs, each described.
 */

/** Each tool's input fields, as models and their configurations know them. */
const inputs: Record<string, string[]> = {
  register: ["name", "purpose", "model", "host", "takeover"],
  whoami: [],
  list_agents: ["include_offline"],
  send_message: ["target", "content", "ttl_ms", "allow_offline", "idempotency_key"],
  read_inbox: ["after_cursor", "limit", "wait_ms"],
  ack_message: ["message_id"],
  reply_message: ["message_id", "content"],
  cancel_message: ["message_id"],
  get_message: ["message_id"],
  acquire_lease: ["name", "ttl_ms", "wait_ms"],
  renew_lease: ["name", "fencing_token", "ttl_ms"],
  release_lease: ["name", "fencing_token"],
  get_lease: ["name"],
  list_leases: ["include_expired", "page_size", "page_token"],
};

type Schema = { properties: Record<string, { description?: string; type?: string }>; required?: string[] };
const byName = new Map(tools.map((t) => [t.name, listed(t)]));
const schemaOf = (name: string) => byName.get(name)!.inputSchema as Schema;

describe("MCP tools from the proto", () => {
  it("offers exactly the hub's tools", () => {
    expect(tools.map((t) => t.name).sort()).toEqual(Object.keys(inputs).sort());
  });

  it("keeps each tool's input fields", () => {
    for (const [name, fields] of Object.entries(inputs)) expect(Object.keys(schemaOf(name).properties), name).toEqual(fields);
  });

  it("describes every tool and every input", () => {
    for (const [name, t] of byName) {
      expect(t.description.trim(), name).not.toBe("");
      for (const [field, p] of Object.entries((t.inputSchema as Schema).properties)) expect(p.description?.trim(), `${name}.${field}`).toBeTruthy();
    }
  });

  it("says what the fencing token is for and to renew long work", () => {
    const acquire = byName.get("acquire_lease")!.description;
    expect(acquire).toMatch(/fencing token/);
    expect(acquire).toMatch(/present it with every write/);
    expect(acquire).toMatch(/renew long work/);
  });

  it("names tools and refusal codes as the MCP face does", () => {
    const all = [...byName.values()].map((t) => [t.description, ...Object.values((t.inputSchema as Schema).properties).map((p) => p.description)].join("\n")).join("\n");
    expect(all).not.toMatch(/\b(AcquireLease|RenewLease|ReleaseLease|AckMessage|GetMessage|ReadInbox|LEASE_HELD|PROTOCOL_ERROR)\b/);
    expect(byName.get("acquire_lease")!.description).toMatch(/\blease_held\b/);
    expect(byName.get("send_message")!.description).toMatch(/\back_message\b/);
    expect(all).not.toMatch(/^Auth: /m);
  });

  it("never takes an identity: the session is the agent", () => {
    for (const [name] of byName) {
      for (const field of ["agent_id", "project", "agent_key"]) expect(Object.keys(schemaOf(name).properties), name).not.toContain(field);
    }
    expect(tools.find((t) => t.name === "whoami")!.bound).toEqual(["agent_id"]);
  });

  it("annotates what each call does", () => {
    const hints = (name: string) => byName.get(name)!.annotations;
    expect(hints("get_lease")).toMatchObject({ readOnlyHint: true, destructiveHint: false, idempotentHint: true });
    expect(hints("list_agents")).toMatchObject({ readOnlyHint: true });
    expect(hints("read_inbox")).toMatchObject({ readOnlyHint: true });
    expect(hints("release_lease")).toMatchObject({ readOnlyHint: false, destructiveHint: true });
    expect(hints("cancel_message")).toMatchObject({ readOnlyHint: false, destructiveHint: true });
    expect(hints("acquire_lease")).toMatchObject({ readOnlyHint: false, destructiveHint: false, idempotentHint: false });
    expect(hints("send_message")).toMatchObject({ readOnlyHint: false, idempotentHint: false });
    expect(hints("renew_lease")).toMatchObject({ readOnlyHint: false, destructiveHint: false, idempotentHint: true });
    for (const t of byName.values()) expect(t.annotations.openWorldHint).toBe(false);
  });

  it("requires what the proto marks required", () => {
    expect(schemaOf("acquire_lease").required).toEqual(["name"]);
    expect(schemaOf("renew_lease").required).toEqual(["name", "fencing_token"]);
    expect(schemaOf("send_message").required).toEqual(["target", "content"]);
    expect(schemaOf("list_leases").required).toBeUndefined();
  });

  it("has the comment of every method and request field in the generated docs", () => {
    for (const t of tools) {
      expect(docs[`${t.method.parent.typeName}.${t.method.name}`]?.trim(), t.name).toBeTruthy();
      for (const f of t.method.input.fields) expect(docs[`${t.method.input.typeName}.${f.name}`]?.trim(), `${t.method.input.typeName}.${f.name}`).toBeTruthy();
    }
  });
});
