"""What the trainer's Python offers, as one JSON line: whether torch sees CUDA and how many devices.

`platform trainer --gpu` refuses to start unless it does, and `platform up` says when it does not,
so a GPU fine-tuning job never lands on a trainer that would run it on the CPU.
"""

import json

try:
    import torch
except ImportError as e:  # the trainer's own error names the fix (PLATFORM_TRAINER_PYTHON)
    print(json.dumps({"torch": None, "cuda": False, "devices": 0, "error": type(e).__name__}))
else:
    cuda = torch.cuda.is_available()
    print(
        json.dumps(
            {
                "torch": torch.__version__,
                "cuda": cuda,
                "devices": torch.cuda.device_count() if cuda else 0,
                "name": torch.cuda.get_device_name(0) if cuda else None,
            }
        )
    )
