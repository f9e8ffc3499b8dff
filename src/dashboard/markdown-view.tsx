/** A service's overview as elements: markdown.ts's tree rendered by Preact, text only ever as text nodes. */
import { type Block, type Inline, parseMarkdown } from "./markdown.ts";

/** The overview: markdown.ts's tree as elements; text is only ever a text node. */
export function Markdown(props: { text: string }) {
  return <>{parseMarkdown(props.text).map(block)}</>;
}

function block(b: Block) {
  switch (b.kind) {
    case "heading": {
      // h1/h2 belong to the page; an overview's headings start below the service's own h3.
      const Tag = (["h4", "h5", "h6", "h6", "h6", "h6"] as const)[b.level - 1] ?? "h6";
      return <Tag>{b.children.map(inline)}</Tag>;
    }
    case "paragraph":
      return <p>{b.children.map(inline)}</p>;
    case "list": {
      const items = b.items.map((item) => <li>{item.map(inline)}</li>);
      return b.ordered ? <ol>{items}</ol> : <ul>{items}</ul>;
    }
    case "code":
      return (
        <pre>
          <code>{b.text}</code>
        </pre>
      );
  }
}

function inline(i: Inline) {
  switch (i.kind) {
    case "text":
      return i.text;
    case "code":
      return <code>{i.text}</code>;
    case "strong":
      return <strong>{i.children.map(inline)}</strong>;
    case "link":
      return (
        <a href={i.href} target="_blank" rel="noopener noreferrer nofollow">
          {i.children.map(inline)}
        </a>
      );
  }
}
