// An agent of a hub with TLS and mutual TLS: it trusts the CA that signed the hub's certificate
// and presents this host's client certificate (one the hub's KXM_TLS_CLIENT_CA signed).
import { connect } from "@kxm/hub-client";

const { KXM_URL = "https://127.0.0.1:7331", KXM_TOKEN, KXM_TLS_CA, KXM_TLS_CLIENT_CERT, KXM_TLS_CLIENT_KEY } = process.env;
const hub = await connect({
  url: KXM_URL,
  token: KXM_TOKEN,
  project: "demo",
  name: "deployer",
  tls: { ca: KXM_TLS_CA, cert: KXM_TLS_CLIENT_CERT, key: KXM_TLS_CLIENT_KEY }, // PEM files (or PEM text)
});
await hub.withLease("deploy/prod", async ({ token }) => console.log(`deploying with fencing token ${token}`), { ttlMs: 10_000 });
await hub.close();
