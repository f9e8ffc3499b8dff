/** `platform training submit --dataset`: a fine-tuning job (docs/fine-tuning.md). */
import { CliError } from "./errors.ts";
import type { SubmitOptions } from "./training.ts";

export async function submitFineTune(_opts: SubmitOptions): Promise<void> {
  throw new CliError("fine-tuning is not built yet", 1);
}
