/**
 * Which files of a diffusers pipeline directory belong to it (docs/images.md): model_index.json at
 * the top (checkpoint.ts takes it), and in each component folder (unet/, vae/, text_encoder/,
 * tokenizer/, scheduler/, ...) its configuration, tokenizer and safetensors files. Kept apart from
 * diffusers.ts, which reads them, so checkpoint.ts can ask without importing the reader.
 */
import { lstat, readdir } from "node:fs/promises";
import { join } from "node:path";

/** diffusers' component folder names (StableDiffusion*, SDXL, SD3, Flux, Kandinsky, ControlNet pipelines). */
const COMPONENTS = new Set([
  "unet",
  "transformer",
  "vae",
  "text_encoder",
  "text_encoder_2",
  "text_encoder_3",
  "tokenizer",
  "tokenizer_2",
  "tokenizer_3",
  "scheduler",
  "feature_extractor",
  "image_encoder",
  "safety_checker",
  "controlnet",
  "prior",
  "decoder",
  "movq",
  "vqvae",
]);

const FILE = /^[A-Za-z0-9_][A-Za-z0-9_.-]{0,199}\.(json|txt|model|safetensors)$/;

export function isPipelineComponent(name: string): boolean {
  return COMPONENTS.has(name);
}

/** `<component>/<file>`: a configuration, tokenizer or safetensors file of a known component folder. */
export function isPipelineFile(path: string): boolean {
  const [dir, file, ...rest] = path.split("/");
  return rest.length === 0 && file !== undefined && COMPONENTS.has(dir as string) && FILE.test(file);
}

/**
 * A local component folder's files, as `<component>/<file>` with their sizes. Regular files only:
 * a symbolic link is refused by `linked` (the import never follows one on the server).
 */
export async function componentFiles(
  root: string,
  component: string,
  linked: (name: string) => Error,
): Promise<{ name: string; size: number }[]> {
  const out: { name: string; size: number }[] = [];
  for (const entry of await readdir(join(root, component), { withFileTypes: true })) {
    const name = `${component}/${entry.name}`;
    if (!isPipelineFile(name)) continue;
    if (entry.isSymbolicLink()) throw linked(name);
    if (entry.isFile()) out.push({ name, size: (await lstat(join(root, name))).size });
  }
  return out;
}
