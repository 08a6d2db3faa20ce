"""What the interpreter that runs the check has: Python, torch and its CUDA, the GPU, triton and
transformers; one JSON line. Run in a process of its own, so that a torch that cannot be imported is
reported by the check in one line, never as a traceback."""

import json
import platform
import sys

out = {"python": platform.python_version(), "executable": sys.executable}
try:
    import torch
except Exception as exc:  # noqa: BLE001 - any failure to import is the answer
    out["error"] = f"{type(exc).__name__}: {exc}"
else:
    out["torch"] = torch.__version__
    out["cuda_build"] = torch.version.cuda
    out["cuda"] = torch.cuda.is_available()
    if out["cuda"]:
        props = torch.cuda.get_device_properties(0)
        out["gpu"] = props.name
        out["gpus"] = torch.cuda.device_count()
        out["capability"] = f"{props.major}.{props.minor}"
        out["gpu_memory_gib"] = round(props.total_memory / 2**30, 1)
    for name in ("triton", "transformers"):
        try:
            out[name] = __import__(name).__version__
        except Exception:  # noqa: BLE001 - a missing or broken one is reported as None
            out[name] = None
print(json.dumps(out))
