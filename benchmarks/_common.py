"""Set-up the benchmarks share: a discarding OTLP receiver, free ports, CPU clocks, a small training job.

Benchmarks import it as ``from _common import ...``: Python puts a script's own folder first on
``sys.path``, so ``python benchmarks/bench_x.py`` finds it without editing the path. They import
recompprof as users do, whichever one the environment has (the installed package, or ``PYTHONPATH``);
child processes inherit that environment, so parent and children measure the same recompprof.
What the test suite also uses (the synthetic run of ``bench_scale.py``, the OTLP receiver) lives in
``tests/`` and is loaded from its file by ``load_test_helper``: benchmarks use test helpers, the tests
never import a benchmark.
"""

from __future__ import annotations

import importlib.util
import os
import resource
import socket
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

REPO = Path(__file__).resolve().parent.parent
# Guard-failure texts recorded from torch 2.13 (the reason tests' fixture): real input for the parser.
REASON_FIXTURE = REPO / "tests" / "fixtures" / "reasons" / "torch-2.13.json"

# An OTLP/HTTP receiver that accepts and discards everything: run with ``python -c``; prints its port.
RECEIVER = """
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
class H(BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.send_response(200); self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0"); self.end_headers()
    def log_message(self, *a): pass
s = ThreadingHTTPServer(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
"""

# What Prometheus 2.42 sends as Accept: OpenMetrics preferred, text 0.0.4 accepted.
PROMETHEUS_ACCEPT = (
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
    "text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
)


def start_receiver() -> tuple[subprocess.Popen[str], int]:
    """Start the discarding OTLP receiver in another process; returns it and its port (terminate it when done)."""
    receiver = subprocess.Popen([sys.executable, "-c", RECEIVER], stdout=subprocess.PIPE, text=True)
    assert receiver.stdout is not None
    return receiver, int(receiver.stdout.readline())


def otel_to_receiver() -> subprocess.Popen[str]:
    """Start the discarding receiver and point this process's OpenTelemetry exporter at it."""
    receiver, port = start_receiver()
    os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = f"http://127.0.0.1:{port}"
    return receiver


def free_port() -> int:
    """A port nothing listens on right now (closed again before it is returned)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def process_cpu() -> float:
    """CPU seconds (user + system) of this whole process, every thread."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def schedstat(tid: int) -> tuple[float, float]:
    """(seconds on a CPU, seconds runnable but waiting for one) of thread ``tid`` (the kernel's accounting)."""
    with open(f"/proc/self/task/{tid}/schedstat") as f:
        on_cpu, waiting, _ = f.read().split()
    return int(on_cpu) / 1e9, int(waiting) / 1e9


def mlp_job(backend: str = "eager") -> tuple[Any, Any]:
    """A small MLP on one CPU thread, seeded, compiled with ``backend``: ``(compiled model, AdamW optimizer)``."""
    import torch

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    return torch.compile(model, backend=backend), opt


def load_test_helper(name: str) -> ModuleType:
    """A helper module of the test suite (``tests/<name>.py``), loaded from its file."""
    spec = importlib.util.spec_from_file_location(name, REPO / "tests" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
