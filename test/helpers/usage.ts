/**
 * A usage object's token counts without its cached share: which sequence (and so which cache) a
 * request lands on is the replica's choice, so tests that compare two answers' usage compare these.
 */
export function tokenCounts(
  usage: { prompt_tokens: number; completion_tokens: number; total_tokens: number } | undefined | null,
) {
  return usage
    ? {
        prompt_tokens: usage.prompt_tokens,
        completion_tokens: usage.completion_tokens,
        total_tokens: usage.total_tokens,
      }
    : usage;
}
