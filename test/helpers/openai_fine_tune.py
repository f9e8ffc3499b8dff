"""Runs one fine-tuning job through the official OpenAI Python client, with OpenAI's own fields only,
as a user of OpenAI's fine-tuning API would, against the platform (test/integration/fine-tuning.test.ts).

Usage: OPENAI_API_KEY=... python3 openai_fine_tune.py <base url ending in /v1> <model> <train.jsonl> <valid.jsonl>
Prints one JSON object: the finished job, its events (oldest first) and its checkpoints, as the client parsed them.
"""
import json
import os
import sys
import time

from openai import OpenAI

base_url, model, train_path, valid_path = sys.argv[1:5]
client = OpenAI(base_url=base_url, api_key=os.environ["OPENAI_API_KEY"], max_retries=0)
with open(train_path, "rb") as f:
    train = client.files.create(file=f, purpose="fine-tune")
with open(valid_path, "rb") as f:
    valid = client.files.create(file=f, purpose="fine-tune")
job = client.fine_tuning.jobs.create(
    model=model,
    training_file=train.id,
    validation_file=valid.id,
    suffix="py-words",
    seed=11,
    method={"type": "supervised", "supervised": {"hyperparameters": {"n_epochs": 2, "batch_size": 1}}},
)
deadline = time.monotonic() + 240
while job.status not in ("succeeded", "failed", "cancelled"):
    if time.monotonic() > deadline:
        sys.exit(f"job {job.id} still {job.status} after 240 s")
    time.sleep(0.5)
    job = client.fine_tuning.jobs.retrieve(job.id)
events = list(client.fine_tuning.jobs.list_events(job.id, limit=100))  # iterating pages through them all
checkpoints = client.fine_tuning.jobs.checkpoints.list(job.id).data
listed = [j.id for j in client.fine_tuning.jobs.list(limit=100)]
print(
    json.dumps(
        {
            "job": job.model_dump(),
            "events": [e.model_dump() for e in reversed(events)],
            "checkpoints": [c.model_dump() for c in checkpoints],
            "listed": job.id in listed,
        }
    )
)
