/** What the operator dashboard's panels share: the action runner's type and form field readers. */
export type Act = (what: string, action: () => Promise<unknown>) => Promise<void>;
export const formOf = (e: Event) => new FormData(e.currentTarget as HTMLFormElement);
export const text = (f: FormData, name: string) => String(f.get(name) ?? "").trim();
/** An optional positive integer field: empty means "not set". */
export const optionalInt = (f: FormData, name: string): number | undefined =>
  text(f, name) === "" ? undefined : Number(text(f, name));
