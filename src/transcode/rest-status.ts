import type { HeaderView } from "../http/header-bag.js";

/**
 * Success statuses of the REST face where the reference does not answer 200. Keyed by method
 * name; the function sees the response message and its headers.
 */
export const restSuccessStatus: Record<string, (res: Record<string, unknown>, headers: HeaderView) => number> = {
  RegisterAgent: (res) => (res.resumed ? 200 : 201),
  UnregisterAgent: () => 204,
  ReportRuntimePresence: (_res, headers) => (headers.get("x-kxm-created") === "1" ? 201 : 200),
  SendMessage: (res) => (res.idempotent ? 200 : 202),
  CreateProjectToken: () => 201,
};
