/** What every converter is (index.ts picks one per architecture; llama.ts, bert.ts implement it). */
/** What a converter reports about the file it wrote (the registry stores it with the version). */
export type ConversionResult = {
  /** config.json's `architectures[0]`, e.g. "LlamaForCausalLM". */
  architecture: string;
  /** The GGUF `general.architecture` written, e.g. "llama". */
  ggufArchitecture: string;
  /** What the model is for: text generation or embeddings. */
  task: "generate" | "embed";
};

/** A converter: reads the checkpoint in `dir` (whose config.json is `config`) and writes `outPath`. */
export type Converter = (dir: string, config: Record<string, unknown>, outPath: string) => Promise<ConversionResult>;
