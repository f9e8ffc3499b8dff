/** Fine-tuning datasets are checked line by line before anything trains (src/finetuning/dataset.ts). */
import { Readable } from "node:stream";
import { describe, expect, it } from "vitest";
import { validateDataset } from "../../src/finetuning/dataset.ts";

const limits = { maxBytes: 1 << 20, maxLines: 100, maxLineBytes: 1 << 16 };
const check = (text: string, l = limits) =>
  validateDataset(Readable.from([Buffer.from(text)]), "training_file", '"t.jsonl"', l);
const chat = (role: string, content: unknown = "x") =>
  JSON.stringify({
    messages: [
      { role: "user", content: "q" },
      { role, content },
    ],
  });

describe("fine-tuning dataset validation", () => {
  it("accepts chat lines and prompt/completion lines, with their digest and count", async () => {
    const text = `${chat("assistant")}\n\n${chat("assistant")}\n`;
    const summary = await check(text);
    expect(summary).toMatchObject({ lines: 2, format: "chat", bytes: text.length });
    expect(summary.sha256).toMatch(/^[0-9a-f]{64}$/);
    expect(await check('{"prompt": "a", "completion": "b"}')).toMatchObject({ lines: 1, format: "prompt_completion" });
  });

  it("names each bad line and its field", async () => {
    const text = [
      chat("assistant"),
      chat("tool"),
      chat("assistant", 5),
      chat("assistant", ""),
      JSON.stringify({ messages: [] }),
      JSON.stringify({ prompt: "p" }),
      "[1, 2]",
      JSON.stringify({ text: "hi" }),
    ].join("\n");
    const error = (await check(text).catch((e: unknown) => e)) as {
      status: number;
      code: string;
      message: string;
      param: string;
    };
    expect(error).toMatchObject({ status: 400, code: "invalid_training_file", param: "training_file" });
    for (const part of [
      'training_file: "t.jsonl" has 7 invalid lines',
      "line 2: messages[1].role: expected one of system, user, assistant",
      "line 3: messages[1].content: expected a string",
      "line 4: messages[1].content: an assistant turn may not be empty",
      "line 5: messages: expected a non-empty array of {role, content}",
      "line 6: completion: expected a non-empty string",
      "line 7: expected a JSON object",
      'line 8: expected "messages" (chat) or "prompt" and "completion"',
    ])
      expect(error.message).toContain(part);
  });

  it("reports the first 20 bad lines and counts the rest", async () => {
    const text = Array.from({ length: 25 }, () => "nope").join("\n");
    const error = (await check(text).catch((e: unknown) => e)) as Error;
    expect(error.message).toContain("line 20: not valid JSON");
    expect(error.message).not.toContain("line 21:");
    expect(error.message).toContain("and 5 more bad lines");
  });

  it("bounds the size and the number of examples, and refuses an empty file", async () => {
    const many = Array.from({ length: 3 }, () => chat("assistant")).join("\n");
    await expect(check(many, { ...limits, maxLines: 2 })).rejects.toMatchObject({
      status: 413,
      code: "file_too_large",
    });
    await expect(check(many, { ...limits, maxBytes: 10 })).rejects.toMatchObject({ status: 413 });
    await expect(check("\n\n")).rejects.toMatchObject({
      status: 400,
      message: 'training_file: "t.jsonl" has no examples',
    });
  });
});
