/** A table of rows with a header, or a hint when there are none: the dashboard's panels list things this way. */
import type { ComponentChildren } from "preact";

export function Table(props: { testId: string; head: string[]; empty?: string; children: ComponentChildren[] }) {
  if (props.children.length === 0) return <p class="hint">{props.empty ?? "none"}</p>;
  return (
    <table data-testid={props.testId}>
      <thead>
        <tr>
          {props.head.map((h) => (
            <th>{h}</th>
          ))}
        </tr>
      </thead>
      <tbody>{props.children}</tbody>
    </table>
  );
}
