/**
 * Image generation's metrics (docs/observability.md, "Images"), defined once: images made, their
 * denoising steps, the time per image and per step, by endpoint (`model_name`) and `version`. The
 * queue wait of image requests is the shared vllm:request_queue_time_seconds (request-metrics.ts).
 */
import { Counter, Histogram, type Registry } from "prom-client";
import type { Served } from "./request-metrics.ts";

export const PICTURE_METRICS = {
  images: "platform_images_total",
  steps: "platform_image_steps_total",
  imageSeconds: "platform_image_seconds",
  stepSeconds: "platform_image_step_seconds",
} as const;

const IMAGE_BUCKETS = [0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300];
const STEP_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5];

export type PictureMetrics = ReturnType<typeof pictureMetrics>;

export function pictureMetrics(registry: Registry) {
  const labelNames = ["model_name", "version"] as const;
  const images = new Counter({
    name: PICTURE_METRICS.images,
    help: "Images generated",
    labelNames,
    registers: [registry],
  });
  const steps = new Counter({
    name: PICTURE_METRICS.steps,
    help: "Denoising steps run for generated images",
    labelNames,
    registers: [registry],
  });
  const imageSeconds = new Histogram({
    name: PICTURE_METRICS.imageSeconds,
    help: "Time a replica took to make one image (its pipeline call, without the queue)",
    labelNames,
    buckets: IMAGE_BUCKETS,
    registers: [registry],
  });
  const stepSeconds = new Histogram({
    name: PICTURE_METRICS.stepSeconds,
    help: "Time per denoising step: an image's time over its steps",
    labelNames,
    buckets: STEP_BUCKETS,
    registers: [registry],
  });
  return {
    /** One image made in `seconds` of `stepCount` steps. */
    observe(served: Served, seconds: number, stepCount: number): void {
      images.inc(served);
      steps.inc(served, stepCount);
      imageSeconds.observe(served, seconds);
      if (stepCount > 0) stepSeconds.observe(served, seconds / stepCount);
    },
  };
}
