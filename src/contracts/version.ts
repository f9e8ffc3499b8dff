/**
 * The platform's version (package.json's): the CLI prints it, the gateway reports it on /healthz,
 * and `platform doctor` compares the two.
 */
import pkg from "../../package.json" with { type: "json" };

export const PLATFORM_VERSION: string = pkg.version;
