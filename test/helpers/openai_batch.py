"""Runs one chat batch through the official OpenAI Python client, as a user of
OpenAI's Batch API would, against the platform (test/e2e/batch-api.test.ts).

Usage: OPENAI_API_KEY=... python3 openai_batch.py <base url ending in /v1> < requests.jsonl
Prints one JSON object: the finished batch as the client parsed it, and the
lines of its output and error files (null where the batch has no such file).
"""
import json
import os
import sys
import time

from openai import OpenAI

client = OpenAI(base_url=sys.argv[1], api_key=os.environ["OPENAI_API_KEY"], max_retries=0)
requests = sys.stdin.buffer.read()
uploaded = client.files.create(file=("requests.jsonl", requests), purpose="batch")
batch = client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h")
deadline = time.monotonic() + 60
while batch.status not in ("completed", "failed", "cancelled", "expired"):
    if time.monotonic() > deadline:
        sys.exit(f"batch {batch.id} still {batch.status} after 60 s")
    time.sleep(0.2)
    batch = client.batches.retrieve(batch.id)


def lines(file_id):
    if file_id is None:
        return None
    return [json.loads(line) for line in client.files.content(file_id).text.splitlines() if line]


print(json.dumps({"batch": batch.model_dump(), "output": lines(batch.output_file_id), "errors": lines(batch.error_file_id)}))
