/**
 * A service's overview (Markdown a team wrote, docs/services.md) parsed into a small tree that
 * services.tsx renders as Preact elements: every piece of text becomes a text node, which Preact
 * escapes, and there is no path to raw HTML at all (`<script>` in an overview is shown as text).
 * Only what overviews need is understood: ATX headings, paragraphs, `-`/`*`/`+` and `1.` lists,
 * fenced code blocks, inline code, **bold** and links; a link is kept only when its target is an
 * absolute http(s) URL, so `javascript:` and the like stay text. No DOM here: unit-tested in Node.
 */

export type Inline =
  | { kind: "text"; text: string }
  | { kind: "code"; text: string }
  | { kind: "strong"; children: Inline[] }
  | { kind: "link"; href: string; children: Inline[] };

export type Block =
  | { kind: "heading"; level: number; children: Inline[] }
  | { kind: "paragraph"; children: Inline[] }
  | { kind: "list"; ordered: boolean; items: Inline[][] }
  | { kind: "code"; lang: string; text: string };

const FENCE = /^\s{0,3}(`{3,}|~{3,})\s*([^`\s]*)/;
const HEADING = /^\s{0,3}(#{1,6})(?:\s+(.*?))?\s*#*\s*$/;
const BULLET = /^\s{0,3}[-*+]\s+(.*)$/;
const NUMBERED = /^\s{0,3}\d{1,9}[.)]\s+(.*)$/;

export function parseMarkdown(markdown: string): Block[] {
  const lines = markdown.replace(/\r\n?/g, "\n").split("\n");
  const blocks: Block[] = [];
  let paragraph: string[] = [];
  let list: { ordered: boolean; items: string[] } | null = null;
  const flush = () => {
    if (paragraph.length > 0) blocks.push({ kind: "paragraph", children: parseInline(paragraph.join(" ")) });
    if (list) blocks.push({ kind: "list", ordered: list.ordered, items: list.items.map(parseInline) });
    paragraph = [];
    list = null;
  };
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i] as string;
    const fence = FENCE.exec(line);
    if (fence) {
      flush();
      const marker = fence[1] as string;
      const body: string[] = [];
      // The block ends at a fence of the same character at least as long, or at the end.
      while (
        ++i < lines.length &&
        !new RegExp(`^\\s{0,3}${marker[0]}{${marker.length},}\\s*$`).test(lines[i] as string)
      )
        body.push(lines[i] as string);
      blocks.push({ kind: "code", lang: fence[2] ?? "", text: body.join("\n") });
      continue;
    }
    if (line.trim() === "") {
      flush();
      continue;
    }
    const heading = HEADING.exec(line);
    if (heading) {
      flush();
      blocks.push({ kind: "heading", level: (heading[1] as string).length, children: parseInline(heading[2] ?? "") });
      continue;
    }
    const bullet = BULLET.exec(line);
    const numbered = bullet ? null : NUMBERED.exec(line);
    const item = bullet ?? numbered;
    if (item) {
      const ordered = numbered !== null;
      if (paragraph.length > 0 || (list && list.ordered !== ordered)) flush();
      list ??= { ordered, items: [] };
      list.items.push(item[1] as string);
      continue;
    }
    // A line under a list item continues it (lazy continuation); otherwise it is paragraph text.
    if (list) {
      const last = list.items.length - 1;
      list.items[last] = `${list.items[last]} ${line.trim()}`;
      continue;
    }
    paragraph.push(line.trim());
  }
  flush();
  return blocks;
}

/** An absolute http(s) URL as written, or null: anything else is not made a link. */
export function safeHref(href: string): string | null {
  let url: URL;
  try {
    url = new URL(href);
  } catch {
    return null;
  }
  return url.protocol === "http:" || url.protocol === "https:" ? url.href : null;
}

/** Inline code, **bold** and [links](url); everything else is text. */
export function parseInline(text: string): Inline[] {
  const out: Inline[] = [];
  const push = (piece: Inline) => {
    const last = out.at(-1);
    if (piece.kind === "text" && last?.kind === "text") last.text += piece.text;
    else out.push(piece);
  };
  let i = 0;
  while (i < text.length) {
    const rest = text.slice(i);
    const code = /^(`+)([\s\S]*?[^`])\1(?!`)/.exec(rest);
    if (code) {
      push({ kind: "code", text: (code[2] as string).trim() });
      i += code[0].length;
      continue;
    }
    const link = /^\[([^\]]*)\]\(\s*<?([^\s)>]*)>?(?:\s+"[^"]*")?\s*\)/.exec(rest);
    if (link) {
      const children = parseInline(link[1] as string);
      const href = safeHref(link[2] as string);
      if (href) push({ kind: "link", href, children });
      else for (const c of children) push(c);
      i += link[0].length;
      continue;
    }
    const strong = /^\*\*(?=\S)([\s\S]*?\S)\*\*/.exec(rest);
    if (strong) {
      push({ kind: "strong", children: parseInline(strong[1] as string) });
      i += strong[0].length;
      continue;
    }
    // Plain text up to the next character that may start something.
    const plain = /^[\s\S][^`[*]*/.exec(rest) as RegExpExecArray;
    push({ kind: "text", text: plain[0] });
    i += plain[0].length;
  }
  return out;
}
