// Builds the package into dist/: the library (src/) and a copy of the generated code (gen/ts),
// compiled to ESM JavaScript with type declarations. src/generated.ts points at the repository's
// gen/ts; in the package it points at the copy. The generated files are copied, never edited.
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";

const pkg = path.resolve(import.meta.dirname, "..");
const repo = path.resolve(pkg, "../..");
const build = path.join(pkg, "build");
const dist = path.join(pkg, "dist");
fs.rmSync(build, { recursive: true, force: true });
fs.rmSync(dist, { recursive: true, force: true });
fs.cpSync(path.join(pkg, "src"), path.join(build, "src"), { recursive: true });
fs.cpSync(path.join(repo, "gen", "ts"), path.join(build, "src", "gen"), { recursive: true });
const generated = path.join(build, "src", "generated.ts");
fs.writeFileSync(generated, fs.readFileSync(generated, "utf8").replaceAll("../../../gen/ts/", "./gen/"));
fs.writeFileSync(
  path.join(build, "tsconfig.json"),
  JSON.stringify({
    compilerOptions: {
      target: "ES2022",
      module: "NodeNext",
      moduleResolution: "NodeNext",
      declaration: true,
      strict: true,
      skipLibCheck: true,
      rootDir: "src",
      outDir: "../dist",
      types: ["node"],
      typeRoots: [path.join(repo, "node_modules", "@types")],
    },
    include: ["src"],
  }),
);
execFileSync(process.execPath, [path.join(repo, "node_modules", "typescript", "bin", "tsc"), "-p", path.join(build, "tsconfig.json")], {
  stdio: "inherit",
});
fs.rmSync(build, { recursive: true, force: true });
console.log(`built ${path.relative(repo, dist)}`);
