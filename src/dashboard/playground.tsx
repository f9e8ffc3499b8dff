/**
 * An image endpoint's playground (docs/images.md, "Dashboard"): prompt, size, steps and seed, sent to
 * POST /v1/images/generations with the signed-in key as b64_json, and the image shown in the page.
 */
import { useState } from "preact/hooks";
import { api } from "./api.ts";
import { formOf, text } from "./forms.ts";

type ImagesResponse = { data: { b64_json: string; seed: number }[]; usage: { steps: number } };

/** Diffusers endpoints make images: a card shows the playground for them. */
export function isImageEndpoint(e: { framework?: string; config: { model: { framework?: string } } }): boolean {
  return (e.framework ?? e.config.model.framework) === "diffusers";
}

export function Playground(props: { endpoint: string }) {
  const [image, setImage] = useState<{ src: string; seed: number; steps: number } | null>(null);
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string | null>(null);
  const generate = (ev: Event) => {
    ev.preventDefault();
    const f = formOf(ev);
    const steps = text(f, "steps");
    const seed = text(f, "seed");
    const body = {
      model: props.endpoint,
      prompt: text(f, "prompt"),
      size: text(f, "size") || "auto",
      response_format: "b64_json",
      ...(steps ? { num_inference_steps: Number(steps) } : {}),
      ...(seed ? { seed: Number(seed) } : {}),
    };
    setBusy(true);
    setError(null);
    api<ImagesResponse>("POST", "/v1/images/generations", body)
      .then((r) => {
        const first = r.data[0];
        if (first) setImage({ src: `data:image/png;base64,${first.b64_json}`, seed: first.seed, steps: r.usage.steps });
      })
      .catch((e: unknown) => setError((e as Error).message))
      .finally(() => setBusy(false));
  };
  return (
    <details class="playground" data-testid="playground" open>
      <summary>Playground</summary>
      <form onSubmit={generate} data-testid="playground-form">
        <label>
          prompt <input name="prompt" required maxLength={16000} placeholder="a photo of a red cat" />
        </label>
        <label>
          size <input name="size" placeholder="auto" pattern="auto|\d{1,5}x\d{1,5}" size={9} />
        </label>
        <label>
          steps <input name="steps" type="number" min="1" max="500" size={4} />
        </label>
        <label>
          seed <input name="seed" type="number" min="0" size={10} />
        </label>
        <button type="submit" disabled={busy}>
          {busy ? "Generating…" : "Generate"}
        </button>
      </form>
      {error && <p class="error">{error}</p>}
      {image && (
        <figure>
          <img src={image.src} alt="generated" data-testid="playground-image" />
          <figcaption>
            seed {image.seed}, {image.steps} steps
          </figcaption>
        </figure>
      )}
    </details>
  );
}
