/** OpenAI's model list and model entries. */

export type Model = { id: string; object: "model"; created: number; owned_by: string };
export type ModelList = { object: "list"; data: Model[] };

/** `created`: epoch milliseconds, as the platform records times (OpenAI's are seconds). */
export function modelEntry(id: string, created: number): Model {
  return { id, object: "model", created: Math.floor(created / 1000), owned_by: "platform" };
}
