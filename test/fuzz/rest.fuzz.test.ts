// Property: every REST route (derived from the google.api.http rules of servedServices, as the
// hub derives them) refuses each hostile request with the documented status, code and body,
// never answers 5xx, stays up, and the batch changes nothing in the store.
import { afterAll, beforeAll, describe } from "vitest";
import { fc, test } from "@fast-check/vitest";
import { checkRest, describeRequest } from "./checks.js";
import { restCase, restRoutes as routes, routed } from "./generators.js";
import { params, report, runBatch, startWorld, stopWorld, timeoutFor, type World } from "./harness.js";
import { send } from "./raw.js";
import { label, materialize } from "./rest-cases.js";

let w: World;
beforeAll(async () => {
  w = await startWorld();
}, 60_000);
afterAll(async () => {
  report("rest");
  await stopWorld(w);
});

const anyCase = fc.oneof(...routes.map((r) => restCase(r, routed)));

describe("REST face: hostile requests to every route", () => {
  test.prop([fc.array(anyCase, { minLength: 1, maxLength: 6 })], params(800))(
    "are refused with the documented code and body, never 5xx, and change nothing",
    async (cases) => {
      await runBatch(w, cases, async (c) => {
        const { req, expect } = materialize(c, w);
        const res = await send(c.transport, w.port, req);
        return checkRest(c.route, label(c), res, expect, describeRequest(c.transport, req));
      });
    },
    timeoutFor(800),
  );
});
