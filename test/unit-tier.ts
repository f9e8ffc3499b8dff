/**
 * Keeps the unit tier pure (docs/testing.md): a unit test that starts a process or listens on a
 * port fails, saying where such a test belongs, instead of slowing the tier down quietly.
 */
import childProcess from "node:child_process";
import { syncBuiltinESMExports } from "node:module";
import net from "node:net";

const refuse = (what: string) => () => {
  throw new Error(`a unit test ${what}: move its file to test/integration/ (docs/testing.md)`);
};
for (const name of ["spawn", "spawnSync", "exec", "execSync", "execFile", "execFileSync", "fork"] as const)
  Object.assign(childProcess, { [name]: refuse(`starts a process (child_process.${name})`) });
net.Server.prototype.listen = refuse("listens on a port") as typeof net.Server.prototype.listen;
syncBuiltinESMExports();
