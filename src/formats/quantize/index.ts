/** The platform's own GGUF quantizer (int8 → Q8_0, int4 → Q4_0); its artifact-store cache is src/models/quantized.ts; docs/quantization.md. */
export { dequantizeQ4_0, dequantizeQ8_0, fp16ToFp32, fp32ToFp16, quantizeQ4_0, quantizeQ8_0 } from "./blocks.ts";
export { quantizeGguf, type QuantizeResult } from "./file.ts";
export {
  deployRefusal,
  isQuantizable,
  planQuantization,
  type Quantization,
  QuantizationError,
  type QuantizationPlan,
  TARGETS,
} from "./plan.ts";
