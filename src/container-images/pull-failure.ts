/**
 * Why a pull failed, in the platform's words (docs/security.md, "Outbound calls a tenant names"):
 * skopeo's, an engine's or the kubelet's output classified, never echoed.
 */

/** What a failure names: the image, and the fix for a refused credential. */
export type PullNames = {
  /** `host[:port]/path`. */
  repository: string;
  digest: string;
  /** The credentials file the pull used, when any. */
  authFile?: string;
  /** What a refused pull says after "not logged in to <host>"; default: the operator's file. */
  refusedHint?: string;
};

/**
 * A failed pull in the platform's words, naming the registry: nothing the registry (or skopeo, or
 * a container engine) printed is echoed, since a registry a tenant names could put anything there
 * (docs/security.md, "Outbound calls a tenant names"). `refused`: the kinds of address the guarded
 * proxy refused during the pull; `engine`: docker or podman, when one pulled instead of skopeo.
 */
export function pullFailure(options: PullNames, text: string, refused: readonly string[] = [], engine?: string): Error {
  const what = `${options.repository}@${options.digest}`;
  const host = options.repository.split("/")[0] as string;
  const say = (why: string) => new Error(`pulling ${what}${engine ? ` with ${engine}` : ""} failed: ${why}`);
  if (refused[0] === "plain http")
    return say(`${host} sent the pull to a plain-HTTP address, which is refused off this machine's loopback`);
  if (refused.length > 0)
    return say(
      `a connection of the pull went to a ${refused[0]} address, which image registries may not be at (${host} redirected there, or its name changed address)`,
    );
  if (/unauthorized|authentication required|\b401\b|denied|invalid username\/password/i.test(text))
    return say(
      `not logged in to ${host}${options.refusedHint ?? (options.authFile ? " (the platform's pull session, PLATFORM_IMAGE_PULL_AUTH_FILE, is not accepted)" : " (the platform has no pull session: PLATFORM_IMAGE_PULL_AUTH_FILE)")}`,
    );
  if (/manifest unknown/i.test(text))
    return say(`the registry holds no image with that digest in ${options.repository}`);
  if (/no such host|server misbehaving|name resolution|Name or service not known/i.test(text))
    return say(`${host} does not resolve; check the repository's host`);
  if (/connection refused/i.test(text)) return say(`${host} refused the connection; is the registry running?`);
  if (/timeout|timed out|deadline exceeded/i.test(text)) return say(`${host} did not answer in time`);
  if (/x509|certificate/i.test(text)) return say(`${host}'s TLS certificate is not trusted by this machine`);
  if (/HTTP response to HTTPS client/i.test(text))
    return say(`${host} answers plain HTTP; a registry off this machine's loopback must serve HTTPS`);
  if (/toomanyrequests|\b429\b/i.test(text))
    return say(`${host} is limiting requests (HTTP 429); the pull is retried later`);
  if (/\b502\b|bad gateway/i.test(text)) return say(`${host} could not be reached`);
  return say(`${host} did not serve the image (${engine ?? "the scaler's skopeo"} could not copy it)`);
}
