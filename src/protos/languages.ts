/** The languages stubs are generated in (a workspace's `language`): generate.ts writes them, buf.ts's workspace names one. */
export const LANGUAGES = ["node", "python"] as const;
export type Language = (typeof LANGUAGES)[number];
