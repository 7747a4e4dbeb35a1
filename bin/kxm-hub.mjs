#!/usr/bin/env node
// The `kxm-hub` command: registers tsx (the hub runs from its TypeScript sources, no build step)
// and hands over to src/main.ts, which reads process.argv.
import "tsx";

await import("../src/main.ts");
