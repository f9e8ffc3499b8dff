/**
 * The dashboard's services pages' pure parts: the overview's Markdown (src/dashboard/markdown.ts),
 * which must never let a team's text become markup or a script URL, and a service's request rate,
 * errors and latency from the gateway's rpc metrics (src/dashboard/service-metrics.ts).
 */
import { describe, expect, it } from "vitest";
import { parseInline, parseMarkdown, safeHref } from "../../src/dashboard/markdown.ts";
import { parseMetrics } from "../../src/dashboard/metrics.ts";
import { servicePointBetween } from "../../src/dashboard/service-metrics.ts";

describe("overview markdown", () => {
  it("reads headings, paragraphs, lists and fenced code", () => {
    const md = [
      "# Items",
      "Stores items",
      "for the shop.",
      "",
      "- one",
      "- two",
      "  continued",
      "1. first",
      "2) second",
      "",
      "```ts",
      "const a = 1;",
      "",
      "# not a heading",
      "```",
      "### Three ###",
    ].join("\n");
    expect(parseMarkdown(md)).toEqual([
      { kind: "heading", level: 1, children: [{ kind: "text", text: "Items" }] },
      { kind: "paragraph", children: [{ kind: "text", text: "Stores items for the shop." }] },
      {
        kind: "list",
        ordered: false,
        items: [[{ kind: "text", text: "one" }], [{ kind: "text", text: "two continued" }]],
      },
      { kind: "list", ordered: true, items: [[{ kind: "text", text: "first" }], [{ kind: "text", text: "second" }]] },
      { kind: "code", lang: "ts", text: "const a = 1;\n\n# not a heading" },
      { kind: "heading", level: 3, children: [{ kind: "text", text: "Three" }] },
    ]);
  });

  it("an unclosed fence runs to the end", () => {
    expect(parseMarkdown("~~~\na\nb")).toEqual([{ kind: "code", lang: "", text: "a\nb" }]);
  });

  it("reads inline code, bold and http(s) links", () => {
    expect(parseInline("run `npm test` **now**, see [the docs](https://example.com/a?b=1) or [x](http://h)")).toEqual([
      { kind: "text", text: "run " },
      { kind: "code", text: "npm test" },
      { kind: "text", text: " " },
      { kind: "strong", children: [{ kind: "text", text: "now" }] },
      { kind: "text", text: ", see " },
      { kind: "link", href: "https://example.com/a?b=1", children: [{ kind: "text", text: "the docs" }] },
      { kind: "text", text: " or " },
      { kind: "link", href: "http://h/", children: [{ kind: "text", text: "x" }] },
    ]);
  });

  it("keeps HTML as text and makes no link of another scheme or a relative URL", () => {
    const blocks = parseMarkdown('<script>alert(1)</script>\n\n<img src=x onerror="alert(1)">');
    expect(blocks).toEqual([
      { kind: "paragraph", children: [{ kind: "text", text: "<script>alert(1)</script>" }] },
      { kind: "paragraph", children: [{ kind: "text", text: '<img src=x onerror="alert(1)">' }] },
    ]);
    for (const href of [
      "javascript:alert(1)",
      "JAVASCRIPT:alert(1)",
      "data:text/html,x",
      "/relative",
      "vbscript:x",
      " javascript:x",
    ])
      expect(safeHref(href), href).toBeNull();
    const links = parseInline("[a](javascript:alert(1)) [b](data:text/html;base64,PHNjcmlwdD4=) [c](/admin)");
    expect(links.some((i) => i.kind === "link")).toBe(false);
    expect(links.map((i) => (i.kind === "text" ? i.text : "")).join("")).toBe("a) b c");
  });

  it("never loops or throws on stray markers", () => {
    for (const text of ["`", "``", "**", "[", "[a](", "*", "** x**", "a ` b", "[](https://x)"])
      expect(() => parseInline(text)).not.toThrow();
    expect(parseInline("a ` b")).toEqual([{ kind: "text", text: "a ` b" }]);
  });
});

describe("service metrics", () => {
  const scrape = (ok: number, failed: number, fast: number, slow: number, at: number) =>
    parseMetrics(
      [
        `platform_rpc_requests_total{org="acme",service="items",method="platform.items.v1.ItemService/GetItem",code="ok"} ${ok}`,
        `platform_rpc_requests_total{org="acme",service="items",method="platform.items.v1.ItemService/GetItem",code="not_found"} ${failed}`,
        // Another organization's service of the same name counts for neither.
        `platform_rpc_requests_total{org="other",service="items",method="x.S/M",code="ok"} 1000`,
        `platform_rpc_request_duration_seconds_bucket{org="acme",service="items",method="m",le="0.01"} ${fast}`,
        `platform_rpc_request_duration_seconds_bucket{org="acme",service="items",method="m",le="0.1"} ${fast + slow}`,
        `platform_rpc_request_duration_seconds_bucket{org="acme",service="items",method="m",le="+Inf"} ${fast + slow}`,
      ].join("\n"),
      at,
    );

  it("calls and failed calls per second, p50 and p99 between two scrapes", () => {
    const p = servicePointBetween(scrape(10, 0, 10, 0, 0), scrape(30, 4, 28, 6, 2000), "acme", "items");
    expect(p.requestsPerSecond).toBe(12);
    expect(p.errorsPerSecond).toBe(2);
    expect(p.p50).toBeCloseTo(0.01 * (12 / 18), 5);
    expect(p.p99).toBeGreaterThan(0.01);
    expect(p.p99).toBeLessThanOrEqual(0.1);
  });

  it("nothing observed: zero rates and no latency", () => {
    const p = servicePointBetween(scrape(5, 1, 5, 0, 0), scrape(5, 1, 5, 0, 2000), "acme", "items");
    expect(p).toMatchObject({ requestsPerSecond: 0, errorsPerSecond: 0, p50: null, p99: null });
  });
});
