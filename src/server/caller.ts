import { type HandlerContext } from "@connectrpc/connect";
import type { AgentCaller, Caller } from "../caller.js";
import { errors } from "../errors.js";
import { projectName } from "../validate.js";
import { kCaller } from "../http/context.js";

/** The authenticated caller; the auth interceptor guarantees one on every call. */
export function callerOf(ctx: HandlerContext): Caller {
  const caller = ctx.values.get(kCaller);
  if (!caller) throw errors.internal(new Error("handler reached without an authenticated caller"));
  return caller;
}

/** The authenticated agent (methods whose auth rule is "agent"). */
export function agentOf(ctx: HandlerContext): AgentCaller {
  const caller = callerOf(ctx);
  if (caller.kind !== "agent") throw errors.internal(new Error("agent method reached without an agent caller"));
  return caller;
}

/** The project a read is about: an agent's own, or the one an operator's token named. */
export function readProjectOf(ctx: HandlerContext): { project: string } {
  const caller = callerOf(ctx);
  if (caller.kind === "agent" || caller.kind === "project") return { project: caller.project };
  throw errors.internal(new Error("project read reached without an agent or project caller"));
}

/** The project an operator acts on (auth rule "operator"): a project token's own, or the one an admin named. */
export function operatorProjectOf(ctx: HandlerContext, requested: string): string {
  const caller = callerOf(ctx);
  if (caller.kind === "project") return caller.project;
  if (caller.kind === "admin") return projectName("project", requested);
  throw errors.internal(new Error("operator method reached without an operator caller"));
}
