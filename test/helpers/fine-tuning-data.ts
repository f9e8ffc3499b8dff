/** The fine-tuning tests' chat dataset: "say X" → "X X X" over a few words, one example in six held out for validation. */
const WORDS = ["red", "blue", "green", "cat", "dog", "sun", "moon", "tree"];

/** `examples` chat lines (default 24: 20 to train, 4 to validate), as JSONL texts. */
export function sayDataset(examples = 24): { train: string; valid: string } {
  const train: string[] = [];
  const valid: string[] = [];
  for (let i = 0; i < examples; i++) {
    const w = WORDS[i % WORDS.length];
    const line = JSON.stringify({
      messages: [
        { role: "user", content: `say ${w}` },
        { role: "assistant", content: `${w} ${w} ${w}` },
      ],
    });
    (i % 6 === 0 ? valid : train).push(line);
  }
  return { train: `${train.join("\n")}\n`, valid: `${valid.join("\n")}\n` };
}
