import { describe, expect, it } from "vitest";
import { create } from "@bufbuild/protobuf";
import { createContextValues, type HandlerContext } from "@connectrpc/connect";
import { createInProcessCaller, type UnaryRules } from "../../src/wire/in-process.js";
import { HeaderBag } from "../../src/http/header-bag.js";
import { GetLeaseRequestSchema, LeaseService } from "../../gen/ts/kxm/hub/v1/lease_pb.js";

const getLease = "/kxm.hub.v1.LeaseService/GetLease";
/** What the implementation answered, as the rules get it. */
const answered: { header?: Headers; trailer?: Headers }[] = [];
/** The rules as a plain pass-through: what is under test is the context the implementation sees. */
const passThrough: UnaryRules = {
  async run(_method, _input, signal, invoke) {
    const out = await invoke(signal);
    answered.push({ header: out.header, trailer: out.trailer });
    return { message: out.message, header: out.header ?? new Headers(), trailer: out.trailer ?? new Headers() };
  },
};

describe("a unary call made in-process through the rules", () => {
  it("gives the implementation connect's context, its headers made on first use, with no accessor of its own", async () => {
    const seen: HandlerContext[] = [];
    const shutdown = new AbortController();
    const wire = { mode: "fast" as const, fastServed: 0, directServed: 0 };
    const call = createInProcessCaller(
      (router) =>
        router.service(LeaseService, {
          getLease(req, ctx) {
            seen.push(ctx);
            expect(ctx.requestHeader.get("x-request-id")).toBe("r-1");
            ctx.responseHeader.set("x-answer", req.name);
            if (req.name === "with-trailer") ctx.responseTrailer.set("x-after", "1");
            return {};
          },
        }),
      [],
      shutdown.signal,
      { rules: passThrough, wire },
    );
    const values = createContextValues();
    const first = await call(getLease, { message: create(GetLeaseRequestSchema, { name: "plain" }), header: new HeaderBag({ "x-request-id": "r-1" }), contextValues: values }, "connect");
    const gone = new AbortController();
    const second = await call(getLease, {
      message: create(GetLeaseRequestSchema, { name: "with-trailer" }),
      header: new HeaderBag({ "x-request-id": "r-1" }),
      contextValues: createContextValues(),
      signal: gone.signal,
    });
    expect(wire.directServed).toBe(2);
    expect(first.header.get("x-answer")).toBe("plain");
    expect(answered[0]!.trailer).toBeUndefined(); // never touched: none made
    expect(answered[1]!.trailer).toBeInstanceOf(Headers);
    expect(second.trailer.get("x-after")).toBe("1");

    const [a, b] = seen as [HandlerContext, HandlerContext];
    expect(a.method.name).toBe("GetLease");
    expect(a.service.typeName).toBe("kxm.hub.v1.LeaseService");
    expect(a.requestMethod).toBe("POST");
    expect(a.protocolName).toBe("connect");
    expect(b.protocolName).toBe("rest");
    expect(a.values).toBe(values);
    expect(a.timeoutMs()).toBeUndefined();
    expect(a.signal).toBe(shutdown.signal); // no signal of the call's own: the hub's shutdown
    expect(b.signal).toBe(gone.signal);
    // Every context of one shape: an object literal with getters gets a hidden class per call,
    // which V8 makes in the old generation, keeping each call alive past young collections (D57).
    for (const ctx of seen) {
      const accessors = Object.entries(Object.getOwnPropertyDescriptors(ctx)).filter(([, d]) => d.get !== undefined || d.set !== undefined);
      expect(accessors.map(([k]) => k)).toEqual([]);
    }
    expect(Object.getPrototypeOf(a)).toBe(Object.getPrototypeOf(b));
  });
});
