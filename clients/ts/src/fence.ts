import type { Client } from "@connectrpc/connect";
import { callError, HubError } from "./errors.js";
import { FenceReason, type Lease, type LeaseService } from "./generated.js";

/**
 * What a fencing token is for a lease, at the hub's clock: `valid` only for `current` (the live
 * holder's current token). `superseded`: a later grant exists; `expired`: the current token of a
 * lease that lapsed; `released`: the current token of a released lease; `unknown`: the hub never
 * issued it for that lease of the project. `lease`: the lease as it stands, when someone holds it
 * (for `current`, `expired`, and `superseded` while it is held).
 */
export interface FenceCheck {
  valid: boolean;
  reason: "current" | "superseded" | "expired" | "released" | "unknown";
  lease?: Lease;
}

const reasons: Record<FenceReason, FenceCheck["reason"] | undefined> = {
  [FenceReason.UNSPECIFIED]: undefined,
  [FenceReason.CURRENT]: "current",
  [FenceReason.SUPERSEDED]: "superseded",
  [FenceReason.EXPIRED]: "expired",
  [FenceReason.RELEASED]: "released",
  [FenceReason.UNKNOWN]: "unknown",
};

/**
 * Asks the hub whether `fencingToken` is the live holder's current token for lease `name`: what a
 * resource the lease protects checks before it accepts a write carrying the token. Accept only
 * when `valid`. Over a session's client it checks the agent's project; over a client carrying
 * the project token alone (a resource is not an agent), name the project in `project`. Throws
 * HubError (`lease_token_required`, `protocol_error`, `invalid_auth`).
 */
export async function checkFence(
  leases: Client<typeof LeaseService>,
  name: string,
  fencingToken: bigint | number,
  o: { project?: string; signal?: AbortSignal } = {},
): Promise<FenceCheck> {
  if (typeof fencingToken === "number" && !Number.isSafeInteger(fencingToken)) throw new HubError("protocol_error", "fencingToken must be an integer");
  let r;
  try {
    r = await leases.checkFence({ name, fencingToken: BigInt(fencingToken), project: o.project }, { signal: o.signal });
  } catch (e) {
    throw callError(e, o.signal);
  }
  const reason = reasons[r.reason];
  if (!reason) throw new HubError("unknown", `the hub answered an unknown fence reason ${r.reason}`);
  return { valid: r.valid && reason === "current", reason, ...(r.lease && { lease: r.lease }) };
}
