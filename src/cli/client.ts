/** The API client lives in src/client/api.ts; this name stays for the command modules that import it here. */
export { ApiClient } from "../client/api.ts";
