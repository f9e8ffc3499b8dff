/** The credentials file lives in src/client/credentials.ts; this name stays for the command modules that import it here. */
export * from "../client/credentials.ts";
