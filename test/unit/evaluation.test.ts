/**
 * Evaluation without a model: datasets parsed (bad lines named), the numbers (lm-eval's mean and
 * stderr, pooled perplexity and its delta-method stderr, paired and unpaired comparisons), and an
 * lm-eval task YAML turned into dataset lines by `training evaluate --task`.
 */
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { taskDataset } from "../../src/evaluation/lm-eval-task.ts";
import { DatasetError, parseDataset } from "../../src/evaluation/dataset.ts";
import { compare, summarize } from "../../src/evaluation/metrics.ts";
import { parseTarget } from "../../src/evaluation/record.ts";

const jsonl = (lines: unknown[]) =>
  Buffer.from(lines.map((l) => (typeof l === "string" ? l : JSON.stringify(l))).join("\n"));

describe("datasets", () => {
  it("reads the metric from the first line and keeps line numbers past blank lines", async () => {
    const parsed = await parseDataset(jsonl([{ text: "a" }, "", { text: "b" }]), undefined);
    expect(parsed.metric).toBe("perplexity");
    expect(parsed.items.map((i) => i.line)).toEqual([1, 3]);
    expect(parsed.sha256).toMatch(/^[0-9a-f]{64}$/);
    expect((await parseDataset(jsonl([{ context: "c", choices: ["x", "y"], answer: 1 }]), undefined)).metric).toBe(
      "accuracy",
    );
    expect((await parseDataset(jsonl([{ prompt: "p", answer: "a" }]), undefined)).metric).toBe("exact_match");
  });

  it("names every bad line with the field and what it expects", async () => {
    const bad = jsonl([
      { context: "c", choices: ["x"], answer: 0 },
      "[1]",
      { context: "   ", choices: ["x", "y"], answer: 0 },
      { context: "c", choices: ["x", "y"], answer: 1.5 },
    ]);
    await expect(parseDataset(bad, "accuracy")).rejects.toThrow(
      /^line 1: choices: expected an array of 2 to 64 non-empty strings; line 2: expected a JSON object such as .*; line 3: context: expected a string that is not only spaces; line 4: answer: expected the index of the right choice, 0 to 1$/,
    );
    await expect(parseDataset(jsonl([{ text: "a" }]), "exact_match")).rejects.toThrow(
      'line 1: prompt: expected a non-empty string (a exact_match line is {"prompt": "...", "answer": "..."})',
    );
    await expect(parseDataset(Buffer.from("\n\n"), undefined)).rejects.toBeInstanceOf(DatasetError);
  });

  it("counts the bad lines past the first ten", async () => {
    const lines = Array.from({ length: 15 }, () => "{");
    await expect(parseDataset(jsonl(lines), "perplexity")).rejects.toThrow(
      /line 10: not valid JSON; and 5 more bad lines$/,
    );
  });

  it("bounds a dataset's items and bytes", async () => {
    const many = Buffer.from(`${'{"text": "a"}\n'.repeat(10_001)}`);
    await expect(parseDataset(many, undefined)).rejects.toThrow(/more than 10000 items/);
    await expect(parseDataset(Buffer.alloc(16 * 1024 * 1024 + 1, 0x20), undefined)).rejects.toThrow(
      /larger than 16777216 bytes/,
    );
  });

  it("parses targets", () => {
    expect(parseTarget("tiny@v1")).toEqual({ model: "tiny", version: "v1" });
    expect(parseTarget("tiny@v1:sql")).toEqual({ model: "tiny", version: "v1", adapter: "sql" });
    expect(parseTarget("tiny")).toBeUndefined();
    expect(parseTarget("tiny@v1:")).toBeUndefined();
  });
});

describe("numbers", () => {
  it("accuracy: the mean and lm-eval's mean_stderr", () => {
    const r = summarize("accuracy", [{ x: 1 }, { x: 0 }, { x: 1 }, { x: 1 }]);
    expect(r.value).toBe(0.75);
    // sample stddev (n − 1) of [1,0,1,1] is 0.5; over √4
    expect(r.stderr).toBeCloseTo(0.25, 15);
    expect(summarize("exact_match", [{ x: 1 }]).stderr).toBeNull();
  });

  it("perplexity: pooled over the tokens, with the delta method's stderr", () => {
    const scores = [
      { x: 10, tokens: 5 },
      { x: 30, tokens: 10 },
      { x: 6, tokens: 5 },
    ];
    const r = summarize("perplexity", scores);
    expect(r.value).toBeCloseTo(Math.exp(46 / 20), 12);
    expect(r.tokens).toBe(20);
    const rate = 46 / 20;
    const psi = scores.map((s) => (Math.exp(rate) * (s.x - rate * s.tokens)) / (20 / 3));
    const mu = psi.reduce((a, b) => a + b, 0) / 3;
    const sd = Math.sqrt(psi.reduce((a, b) => a + (b - mu) ** 2, 0) / 2);
    expect(r.stderr).toBeCloseTo(sd / Math.sqrt(3), 12);
  });

  it("compares paired on the same dataset, unpaired otherwise", () => {
    const a = [{ x: 1 }, { x: 0 }, { x: 1 }, { x: 0 }];
    const b = [{ x: 1 }, { x: 1 }, { x: 1 }, { x: 0 }];
    const ra = summarize("accuracy", a);
    const rb = summarize("accuracy", b);
    const paired = compare(
      "accuracy",
      { value: ra.value, stderr: ra.stderr, sha256: "d", scores: a },
      { value: rb.value, stderr: rb.stderr, sha256: "d", scores: b },
    );
    expect(paired.method).toBe("paired");
    expect(paired.difference).toBeCloseTo(0.25, 15);
    // per-item differences [0,1,0,0]: stddev 0.5, over √4
    expect(paired.stderr).toBeCloseTo(0.25, 15);
    expect(paired.ci95?.[0]).toBeCloseTo(0.25 - 1.959963984540054 * 0.25, 12);
    const unpaired = compare(
      "accuracy",
      { value: ra.value, stderr: ra.stderr, sha256: "d1", scores: a },
      { value: rb.value, stderr: rb.stderr, sha256: "d2", scores: b },
    );
    expect(unpaired.method).toBe("unpaired");
    expect(unpaired.stderr).toBeCloseTo(Math.sqrt((ra.stderr as number) ** 2 + (rb.stderr as number) ** 2), 15);
  });
});

describe("lm-eval task YAML (--task)", () => {
  const dir = mkdtempSync(join(tmpdir(), "platform-task-test-"));
  const write = (name: string, text: string) => {
    writeFileSync(join(dir, name), text);
    return join(dir, name);
  };

  it("turns a multiple_choice task into accuracy lines, with its target_delimiter and description", async () => {
    write("docs.jsonl", `${JSON.stringify({ q: "Sky is", opts: ["blue", "green"], label: "blue" })}\n`);
    const yaml = write(
      "mc.yaml",
      [
        "task: t",
        "dataset_path: json",
        "dataset_kwargs:",
        "  data_files:",
        "    test: docs.jsonl",
        "test_split: test",
        "output_type: multiple_choice",
        'description: "Answer. "',
        'doc_to_text: "Q: {{ q }}"',
        "doc_to_choice: opts",
        "doc_to_target: label",
      ].join("\n"),
    );
    const out = await taskDataset(yaml);
    expect(out.metric).toBe("accuracy");
    expect(JSON.parse(readFileSync(out.path, "utf8"))).toEqual({
      context: "Answer. Q: Sky is",
      choices: [" blue", " green"],
      answer: 0,
    });
  });

  it("refuses what it would not honour, naming the key", async () => {
    const base = ["dataset_path: json", "dataset_kwargs:", "  data_files: docs.jsonl", "test_split: test"];
    await expect(taskDataset(write("a.yaml", [...base, "output_type: loglikelihood"].join("\n")))).rejects.toThrow(
      /output_type: loglikelihood is not supported/,
    );
    await expect(
      taskDataset(write("b.yaml", [...base, "output_type: multiple_choice", "num_fewshot: 5"].join("\n"))),
    ).rejects.toThrow(/num_fewshot: not supported/);
    await expect(
      taskDataset(
        write("c.yaml", ["dataset_path: hellaswag", "test_split: test", "output_type: multiple_choice"].join("\n")),
      ),
    ).rejects.toThrow(/hub datasets are not read/);
    await expect(
      taskDataset(
        write(
          "d.yaml",
          [
            ...base,
            "output_type: generate_until",
            "doc_to_text: q",
            "doc_to_target: label",
            "generation_kwargs:",
            "  until: ['.']",
          ].join("\n"),
        ),
      ),
    ).rejects.toThrow(/generation_kwargs.until/);
  });
});
