import { createHash } from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import type { NodeRequest as Req, NodeResponse as Res } from "../http/types.js";
import { packagePath } from "../package-root.js";

/** Where `scripts/build-ui.mjs` writes the page (ui/dist). */
export const defaultPageDir = packagePath("ui", "dist");

/**
 * The page may load its own script and stylesheet and call its own origin, nothing else: no
 * inline script or style, no frames, no form posts elsewhere.
 */
export const pageCsp = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "connect-src 'self'",
  "img-src 'self' data:",
  "base-uri 'none'",
  "form-action 'none'",
  "frame-ancestors 'none'",
].join("; ");

const types: Record<string, string> = {
  ".js": "text/javascript; charset=utf-8",
  ".css": "text/css; charset=utf-8",
};

interface Asset {
  body: Buffer;
  gzip?: Buffer;
  type: string;
}

/**
 * The operator page, built ahead (ui/dist): `/` is its index.html, revalidated on every load;
 * `/assets/<name>` its script and stylesheet, named by their content's hash and so cached for
 * good. Read once at start; only the files the build wrote are served, nothing named by a
 * request is looked up on disk. Undefined when the page is not built.
 */
export function loadOperatorPage(dir: string = defaultPageDir) {
  const indexPath = path.join(dir, "index.html");
  if (!fs.existsSync(indexPath)) return undefined;
  const index = fs.readFileSync(indexPath);
  const etag = `"${createHash("sha256").update(index).digest("base64url").slice(0, 22)}"`;
  const assets = new Map<string, Asset>();
  const assetDir = path.join(dir, "assets");
  for (const name of fs.existsSync(assetDir) ? fs.readdirSync(assetDir) : []) {
    const type = types[path.extname(name)];
    if (!type) continue;
    const gz = path.join(assetDir, `${name}.gz`);
    assets.set(name, { body: fs.readFileSync(path.join(assetDir, name)), type, ...(fs.existsSync(gz) && { gzip: fs.readFileSync(gz) }) });
  }

  const send = (req: Req, res: Res, status: number, headers: Record<string, string>, body?: Buffer) => {
    res.writeHead(status, { "x-content-type-options": "nosniff", ...headers, ...(body && { "content-length": String(body.length) }) });
    if (body && req.method !== "HEAD") res.end(body);
    else res.end();
  };

  /** Answers `/` and the page's assets (GET and HEAD); false for anything else. */
  return function servePage(req: Req, res: Res, pathname: string): boolean {
    if (req.method !== "GET" && req.method !== "HEAD") return false;
    if (pathname === "/") {
      const headers = {
        "content-type": "text/html; charset=utf-8",
        "cache-control": "no-cache",
        "content-security-policy": pageCsp,
        "x-frame-options": "DENY",
        etag,
      };
      if (req.headers["if-none-match"] === etag) send(req, res, 304, headers);
      else send(req, res, 200, headers, index);
      return true;
    }
    const asset = pathname.startsWith("/assets/") ? assets.get(pathname.slice("/assets/".length)) : undefined;
    if (!asset) return false;
    const gzip = asset.gzip !== undefined && /\bgzip\b/.test(String(req.headers["accept-encoding"] ?? ""));
    send(
      req,
      res,
      200,
      {
        "content-type": asset.type,
        "cache-control": "public, max-age=31536000, immutable",
        vary: "accept-encoding",
        ...(gzip && { "content-encoding": "gzip" }),
      },
      gzip ? asset.gzip : asset.body,
    );
    return true;
  };
}
