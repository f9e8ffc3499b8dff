/** GGUF files: the format's numbers, a header reader, the catalog's summary of one and a streaming writer (see each module). */
export * from "./format.ts";
export { type GgufInfo, type GgufTensorInfo, readGgufInfo } from "./read.ts";
export { GgufSummary, hasGgufMagic, summarizeGguf } from "./summary.ts";
export {
  encodeGguf,
  type GgufFile,
  type GgufLayout,
  type GgufMetadata,
  type GgufTensor,
  type GgufTensorHeader,
  layoutGguf,
  writeGguf,
  writeGgufFile,
} from "./write.ts";
