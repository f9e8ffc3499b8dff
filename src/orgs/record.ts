/** An organization as stored: its id (a DNS label, src/contracts/orgs.ts), a display name, when it was made. */
import { z } from "zod";
import { OrgId } from "../contracts/orgs.ts";

export const Org = z.object({
  id: OrgId,
  name: z.string().min(1).max(100),
  /** Epoch seconds, as keys'; 0 for the install's own organization, which was never created. */
  created: z.number().int(),
});
export type Org = z.infer<typeof Org>;
