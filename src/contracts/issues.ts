/**
 * How a zod validation failure is told to a person: each field with what is wrong, on one line,
 * and always what was expected. Zod's own wording ("Invalid input", "Invalid option", "Too small:
 * expected string to have >=1 characters") names neither the forms a union takes nor anything a
 * client can act on, so this module replaces it for every schema at once: the messages below are
 * zod's global error map (`z.config`), used wherever a schema gives no message of its own. Every
 * module that tells a zod failure to anyone does so through `describeIssues`, so importing it
 * installs the map before the first failure is worded.
 */
import { z } from "zod";

/**
 * Turns zod issues into one line per field, e.g.
 * `resources.memory: expected "<n>Gi" (or "<n>Mi")` or `messages[0].role: expected one of ...`.
 */
export function describeIssues(error: z.ZodError): string {
  return error.issues
    .map((issue) => {
      const path = pathOf(issue.path) || "(document)";
      if (issue.code === "unrecognized_keys") {
        return `${path === "(document)" ? "" : `${path}: `}unknown field(s) ${issue.keys.map((k) => `"${k}"`).join(", ")}`;
      }
      return `${path}: ${issue.message}`;
    })
    .join("; ");
}

/** A field's path as clients write it: `messages[0].content`, `prompt[1][3]`. */
function pathOf(path: readonly PropertyKey[]): string {
  return path.reduce<string>(
    (text, key) => (typeof key === "number" ? `${text}[${key}]` : text ? `${text}.${String(key)}` : String(key)),
    "",
  );
}

type RawIssue = z.core.$ZodRawIssue;

/** What a value of this type is called: "a string", "an array", `"auto"` ... */
const TYPE_NAMES: Record<string, string> = {
  string: "a string",
  number: "a number",
  int: "an integer",
  bigint: "an integer",
  boolean: "true or false",
  null: "null",
  undefined: "nothing",
  object: "an object",
  record: "an object",
  map: "an object",
  array: "an array",
  tuple: "an array",
  set: "an array",
  date: "a date",
  file: "a file",
  nan: "not a number (NaN)",
};

const quoted = (values: readonly unknown[]) => values.map((v) => (typeof v === "string" ? `"${v}"` : String(v)));

/** "a, b or c". */
function either(names: string[]): string {
  const unique = [...new Set(names)];
  return unique.length <= 1 ? (unique[0] ?? "") : `${unique.slice(0, -1).join(", ")} or ${unique.at(-1)}`;
}

/** The forms a schema accepts, each as a phrase: what a union of them expects. */
function formsOf(schema: z.core.$ZodType): string[] {
  const def = schema._zod.def as z.core.$ZodTypeDef & Record<string, unknown>;
  switch (def.type) {
    case "union":
      return (def.options as z.core.$ZodType[]).flatMap(formsOf);
    case "enum":
      return quoted(Object.values(def.entries as Record<string, unknown>));
    case "literal":
      return quoted(def.values as unknown[]);
    case "optional":
    case "nullable":
    case "default":
    case "prefault":
    case "catch":
    case "readonly":
    case "nonoptional":
      return formsOf(def.innerType as z.core.$ZodType);
    case "pipe":
      return formsOf(def.in as z.core.$ZodType);
    case "lazy":
      return formsOf((def.getter as () => z.core.$ZodType)());
    default:
      return [TYPE_NAMES[def.type] ?? `a ${def.type}`];
  }
}

/** What was sent instead, by its type (never its value, which may be long or private). */
function received(input: unknown): string {
  if (input === null) return "null";
  if (Array.isArray(input)) return "an array";
  if (typeof input === "boolean") return "a boolean";
  if (typeof input === "number" && Number.isNaN(input)) return TYPE_NAMES.nan as string;
  return TYPE_NAMES[typeof input] ?? typeof input;
}

/** What a length counts, singular and plural. */
const UNITS: Record<string, [string, string]> = {
  string: ["character", "characters"],
  array: ["item", "items"],
  set: ["item", "items"],
  map: ["entry", "entries"],
  file: ["byte", "bytes"],
};

/** "at least 1 character", "2 or more", "less than 1". */
function bound(issue: { origin: string; inclusive?: boolean; exact?: boolean }, limit: string, least: boolean): string {
  const unit = UNITS[issue.origin];
  if (unit) {
    const count = `${limit} ${unit[limit === "1" ? 0 : 1]}`;
    return issue.exact ? `exactly ${count}` : `${least ? "at least" : "at most"} ${count}`;
  }
  if (issue.exact) return `exactly ${limit}`;
  if (issue.inclusive === false) return `${least ? "more" : "less"} than ${limit}`;
  return `${limit} or ${least ? "more" : "less"}`;
}

const FORMATS: Record<string, string> = {
  url: "a URL",
  email: "an email address",
  uuid: "a UUID",
  datetime: "an ISO 8601 date and time",
  date: "an ISO 8601 date",
  time: "an ISO 8601 time",
  duration: "an ISO 8601 duration",
  base64: "base64 text",
  json_string: "a JSON text",
};

/** Zod's issue in this module's words; undefined leaves zod's own (no issue here comes without one). */
function expectedOf(issue: RawIssue): string | undefined {
  switch (issue.code) {
    case "invalid_type": {
      const expected = TYPE_NAMES[issue.expected] ?? `a ${issue.expected}`;
      if (issue.input === undefined) return `missing; expected ${expected}`;
      // A number that is not an integer: its value is the whole story (and is never worth echoing).
      if (issue.expected === "int" && typeof issue.input === "number") return `expected ${expected}`;
      return `expected ${expected}, got ${received(issue.input)}`;
    }
    case "invalid_value":
      return issue.values.length === 1
        ? `expected ${quoted(issue.values)[0]}`
        : `expected one of ${quoted(issue.values).join(", ")}`;
    case "invalid_union": {
      // A discriminated union's tag (the issue's path names it), or the forms a plain union takes.
      if (issue.inclusive === false) return "matches more than one of the forms it may take; send exactly one";
      if (issue.options?.length) return `expected one of ${quoted(issue.options).join(", ")}`;
      if (!issue.inst) return undefined;
      const options = (issue.inst as z.core.$ZodUnion)._zod.def.options;
      const forms = `expected ${either(options.flatMap(formsOf))}`;
      // The one form the value's type fits, if only one does: what the value lacks there is the news.
      const fits = issue.errors.flatMap((errors, i) =>
        errors.every((e) => e.path.length === 0 && (e.code === "invalid_type" || e.code === "invalid_value"))
          ? []
          : [{ form: either(formsOf(options[i] as z.core.$ZodType)), error: errors[0] as z.core.$ZodIssue }],
      );
      const [fit] = fits;
      if (fits.length !== 1 || !fit) return forms;
      return `${forms} (as ${fit.form}, ${pathOf(fit.error.path) || "it"}: ${fit.error.message})`;
    }
    case "too_small":
      return `expected ${bound(issue, String(issue.minimum), true)}`;
    case "too_big":
      return `expected ${bound(issue, String(issue.maximum), false)}`;
    case "invalid_format": {
      if (issue.format === "regex") return `expected a string matching ${issue.pattern}`;
      if (issue.format === "starts_with") return `expected a string starting with "${issue.prefix}"`;
      if (issue.format === "ends_with") return `expected a string ending with "${issue.suffix}"`;
      if (issue.format === "includes") return `expected a string containing "${issue.includes}"`;
      return `expected ${FORMATS[issue.format] ?? `a string in ${issue.format} format`}`;
    }
    case "not_multiple_of":
      return `expected a multiple of ${String(issue.divisor)}`;
    case "invalid_key":
      return `is not an accepted key (${issue.issues.map((i) => i.message).join("; ")})`;
    case "invalid_element":
      return `holds a value that is not accepted (${issue.issues.map((i) => i.message).join("; ")})`;
    case "custom":
      return "is not accepted here";
    default:
      return undefined;
  }
}

z.config({ customError: expectedOf });
