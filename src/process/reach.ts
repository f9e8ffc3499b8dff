/** fetch of the platform, with a platform that cannot be reached as one line naming it and why. */
import { CommandError } from "./command-error.ts";

/** fetch `url`; where the platform at `baseUrl` cannot be reached, a CommandError naming it and why. */
export async function reach(baseUrl: string, url: string, init: RequestInit): Promise<Response> {
  try {
    return await fetch(url, init);
  } catch (e) {
    const cause = (e as { cause?: { code?: string } }).cause?.code ?? (e as Error).message;
    throw new CommandError(`cannot reach the platform at ${baseUrl} (${cause}). Is \`platform up\` running?`);
  }
}
