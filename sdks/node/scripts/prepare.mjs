// npm runs this "prepare" script after `npm ci` / `npm install` in this
// folder, before `npm pack` and `npm publish`, and — the case it exists
// for — in the folder itself when another project runs
// `npm install <clone>/sdks/node`. In that last case npm links the folder
// without installing its devDependencies, so TypeScript is missing: install
// them here from package-lock.json first (scripts off, so this script does
// not run again), then compile src/ into dist/.
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const npm = process.platform === "win32" ? "npm.cmd" : "npm";

function run(args) {
  const r = spawnSync(npm, args, { cwd: root, stdio: "inherit", shell: process.platform === "win32" });
  if (r.status !== 0) process.exit(r.status ?? 1);
}

if (!existsSync(join(root, "node_modules", "typescript", "package.json"))) {
  // --include=dev: the caller's --omit=dev (passed down in npm_config_omit)
  // would leave TypeScript out again.
  run(["ci", "--ignore-scripts", "--include=dev", "--no-audit", "--no-fund"]);
}
run(["run", "build"]);
