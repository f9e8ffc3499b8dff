/**
 * The little of oidc-provider's API the sign-in test uses: the package ships no types of its own,
 * and a provider run by one test needs no more than this.
 */
declare module "oidc-provider" {
  import type { IncomingMessage, ServerResponse } from "node:http";

  type Account = { accountId: string; claims: () => Record<string, unknown> };

  export type Configuration = {
    clients?: Record<string, unknown>[];
    /** Scope → the claims it releases. */
    claims?: Record<string, string[]>;
    /** false: the claims of the requested scopes go in the ID token as well. */
    conformIdTokenClaims?: boolean;
    cookies?: { keys?: string[] };
    ttl?: Record<string, number>;
    findAccount?: (ctx: unknown, id: string) => Account | undefined;
  };

  export default class Provider {
    constructor(issuer: string, configuration?: Configuration);
    callback(): (req: IncomingMessage, res: ServerResponse) => void;
  }
}
