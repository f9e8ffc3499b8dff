/** Doctor's first check: the CLI's version and the Node that runs it. */
import { PLATFORM_VERSION } from "../../contracts/version.ts";
import { type DoctorCheck, fail, ok } from "./check.ts";

const NODE_MAJOR = 24;

export const cliCheck: DoctorCheck = {
  id: "cli",
  name: "CLI",
  required: true,
  run: async () => {
    const node = process.versions.node;
    const details = { version: PLATFORM_VERSION, node };
    if (Number(node.split(".")[0]) < NODE_MAJOR)
      return fail(
        `platform ${PLATFORM_VERSION} on Node ${node}: Node ${NODE_MAJOR} or newer is needed`,
        `install Node ${NODE_MAJOR} (\`npm ci\` in the CLI's directory installs it for \`npx platform\`)`,
      );
    return ok(`platform ${PLATFORM_VERSION} on Node ${node}`, details);
  },
};
