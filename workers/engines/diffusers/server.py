#!/usr/bin/env python3
"""
The diffusers engine's child process (workers/engines/diffusers.ts starts it under the pipe watchdog):
loads one pipeline directory with DiffusionPipeline.from_pretrained and serves it over HTTP on a
loopback port (the watchdog holds the child's stdin, so stdio cannot carry the protocol; docs/engines.md).

  GET  /health    200 once the pipeline is loaded (the port is bound only then)
  GET  /info      the pipeline's class, default size, scheduler, device and dtype
  GET  /queue     {"waiting": requests not yet in a pipeline call, "running": images in the current one}
  POST /generate  {"id", "prompt", "negative_prompt"?, "width", "height", "steps", "guidance", "seed"}
                  answers NDJSON lines: {"type":"step","step":k,"steps":n} per denoising step, then
                  {"type":"done","png":<base64>,"prompt_tokens":t,"batch":b} (b: the images its pipeline
                  call made) or {"type":"cancelled"} or {"type":"error","message"}
  POST /cancel    {"id"}: a waiting request leaves the queue at once; a running one stops at its next
                  step (callback_on_step_end) once every image of its call is cancelled

One thread runs the pipeline. Requests waiting with the same size, steps, guidance and negative prompt
presence go in one pipeline call (up to --max-batch): each image has its own torch.Generator seeded
with its request's seed, so its initial noise is the one it would have alone.
"""
import argparse
import base64
import hmac
import os
import io
import json
import queue
import sys
import threading
import warnings
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import torch
from diffusers import DiffusionPipeline

# torch_dtype, which every diffusers release takes; newer ones also name it dtype and warn about the old name.
warnings.filterwarnings("ignore", message=".*torch_dtype.*")

DTYPES = {"float32": torch.float32, "float": torch.float32, "float16": torch.float16, "half": torch.float16, "bfloat16": torch.bfloat16}
MAX_BODY = 1 << 20


class Request:
    def __init__(self, body):
        self.id = str(body["id"])
        self.prompt = str(body["prompt"])
        self.negative = body.get("negative_prompt")
        self.width = int(body["width"])
        self.height = int(body["height"])
        self.steps = int(body["steps"])
        self.guidance = float(body["guidance"])
        self.seed = int(body["seed"])
        self.events = queue.Queue()
        self.cancelled = False

    def key(self):
        return (self.width, self.height, self.steps, self.guidance, self.negative is None)


class Engine:
    def __init__(self, args):
        cuda = args.device != "cpu" and torch.cuda.is_available()
        self.device = "cuda" if cuda else "cpu"
        dtype = DTYPES.get(args.dtype)
        if dtype is None:
            # auto: half precision on a GPU, float32 on the CPU (where float16 is slow or unsupported).
            dtype = torch.float16 if cuda else torch.float32
        self.dtype = dtype
        self.pipe = DiffusionPipeline.from_pretrained(args.model, torch_dtype=dtype, local_files_only=True)
        self.pipe = self.pipe.to(self.device)
        self.pipe.set_progress_bar_config(disable=True)
        self.max_batch = max(1, args.max_batch)
        self.pending = []
        self.running = []
        self.lock = threading.Condition()
        self.by_id = {}

    def info(self):
        unet = getattr(self.pipe, "unet", None) or getattr(self.pipe, "transformer", None)
        sample = getattr(unet.config, "sample_size", None) if unet is not None else None
        scale = getattr(self.pipe, "vae_scale_factor", 8)
        size = sample * scale if isinstance(sample, int) else None
        return {
            "pipeline": type(self.pipe).__name__,
            "default_size": size,
            "vae_scale_factor": scale,
            "scheduler": type(self.pipe.scheduler).__name__,
            "device": self.device,
            "dtype": str(self.dtype).replace("torch.", ""),
            "max_batch": self.max_batch,
        }

    def submit(self, req):
        with self.lock:
            self.by_id[req.id] = req
            self.pending.append(req)
            self.lock.notify()

    def queue(self):
        with self.lock:
            return {"waiting": len(self.pending), "running": len(self.running)}

    def cancel(self, rid):
        with self.lock:
            req = self.by_id.get(rid)
            if req is None:
                return False
            req.cancelled = True
            # Still waiting: answered now, not when its turn comes (a whole pipeline call later).
            if req in self.pending:
                self.pending.remove(req)
                self.by_id.pop(rid, None)
                req.events.put({"type": "cancelled"})
            return True

    def take(self):
        """The oldest waiting request and those of the same shape behind it, up to max_batch."""
        with self.lock:
            while not self.pending:
                self.lock.wait()
            first = self.pending.pop(0)
            batch = [first]
            for r in list(self.pending):
                if len(batch) >= self.max_batch:
                    break
                if r.key() == first.key():
                    self.pending.remove(r)
                    batch.append(r)
            return batch

    def run(self):
        while True:
            batch = []
            for r in self.take():
                if r.cancelled:
                    r.events.put({"type": "cancelled"})
                else:
                    batch.append(r)
            with self.lock:
                self.running = batch
            if batch:
                try:
                    self.generate(batch)
                except Exception as e:  # the request's failure, not the server's
                    for r in batch:
                        r.events.put({"type": "error", "message": f"{type(e).__name__}: {e}"[:2000]})
            with self.lock:
                self.running = []
                for r in batch:
                    self.by_id.pop(r.id, None)

    def generate(self, batch):
        first = batch[0]

        def on_step(pipe, step, timestep, kwargs):
            for r in batch:
                if not r.cancelled:
                    r.events.put({"type": "step", "step": step + 1, "steps": first.steps})
            if all(r.cancelled for r in batch):
                pipe._interrupt = True
            return kwargs

        generators = [torch.Generator(device="cpu").manual_seed(r.seed) for r in batch]
        kwargs = {}
        if first.negative is not None:
            kwargs["negative_prompt"] = [r.negative for r in batch]
        out = self.pipe(
            prompt=[r.prompt for r in batch],
            width=first.width,
            height=first.height,
            num_inference_steps=first.steps,
            guidance_scale=first.guidance,
            generator=generators,
            callback_on_step_end=on_step,
            output_type="pil",
            **kwargs,
        )
        for r, image in zip(batch, out.images):
            if r.cancelled:
                r.events.put({"type": "cancelled"})
                continue
            buf = io.BytesIO()
            image.save(buf, format="PNG")
            png = base64.b64encode(buf.getvalue()).decode("ascii")
            r.events.put({"type": "done", "png": png, "prompt_tokens": self.tokens(r), "batch": len(batch)})

    def tokens(self, r):
        """The text encoder's tokens of the prompt and negative prompt (what it reads: truncated to its length)."""
        tok = getattr(self.pipe, "tokenizer", None)
        if tok is None:
            return 0
        texts = [r.prompt] + ([r.negative] if r.negative is not None else [])
        return sum(len(tok(t, truncation=True).input_ids) for t in texts)


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        # A client that went away (the engine cancelled, the worker stopped) is not worth a traceback.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


def handler_for(engine):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def reply(self, status, body):
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def body(self):
            n = int(self.headers.get("content-length") or 0)
            if n > MAX_BODY:
                raise ValueError("body too large")
            return json.loads(self.rfile.read(n) or b"{}")

        def authorized(self):
            # The worker's secret (DIFFUSERS_TOKEN): no other loopback client may drive the engine.
            token = os.environ.get("DIFFUSERS_TOKEN", "")
            given = self.headers.get("authorization") or ""
            if token and hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
                return True
            self.reply(401, {"error": "unauthorized"})
            return False

        def do_GET(self):
            if self.path != "/health" and not self.authorized():
                return
            if self.path == "/health":
                self.reply(200, {"ok": True})
            elif self.path == "/info":
                self.reply(200, engine.info())
            elif self.path == "/queue":
                self.reply(200, engine.queue())
            else:
                self.reply(404, {"error": "not found"})

        def do_POST(self):
            if not self.authorized():
                return
            try:
                body = self.body()
            except Exception as e:
                return self.reply(400, {"error": str(e)[:500]})
            if self.path == "/cancel":
                return self.reply(200, {"cancelled": engine.cancel(str(body.get("id")))})
            if self.path != "/generate":
                return self.reply(404, {"error": "not found"})
            try:
                req = Request(body)
            except Exception as e:
                return self.reply(400, {"error": f"bad request: {e}"[:500]})
            engine.submit(req)
            self.send_response(200)
            self.send_header("content-type", "application/x-ndjson")
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            while True:
                event = req.events.get()
                line = (json.dumps(event) + "\n").encode()
                try:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                    self.wfile.flush()
                except OSError:
                    # The engine went away: nobody waits for this image.
                    req.cancelled = True
                    return
                if event["type"] != "step":
                    break
            self.wfile.write(b"0\r\n\r\n")

    return Handler


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.add_argument("--dtype", default="auto")
    p.add_argument("--max-batch", type=int, default=1)
    p.add_argument("--threads", type=int, default=0)
    args = p.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    engine = Engine(args)
    threading.Thread(target=engine.run, daemon=True).start()
    server = Server(("127.0.0.1", args.port), handler_for(engine))
    print(f"diffusers engine ready: {json.dumps(engine.info())}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
