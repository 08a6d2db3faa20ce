"""``recompprof demo``: a small real training job on CPU that recompiles for the reasons real jobs do.

A tiny transformer language model learns a synthetic next-token task with AdamW under
``torch.compile`` (backend ``eager`` by default, so it runs in seconds on a laptop), inside
``recompprof.attach()``. Along the way it hits the usual causes: the sequence length varies between
batches, an auxiliary-loss weight follows the LR schedule as a Python float, an evaluation pass
switches to ``eval()`` under ``no_grad``, and a module flag (stochastic depth) is switched on
mid-run. Metrics are served on localhost while it trains; the report is printed at the end.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

from recompprof._capture.settings import ConfigError
from recompprof._cli import arguments

VOCAB = 64
SEQ_LENGTHS = (32, 48, 64)


def _model(torch: Any) -> Any:
    nn: Any = torch.nn

    class TinyLM(nn.Module):
        """Two transformer blocks; ``drop_path`` is the module flag the demo flips mid-run."""

        def __init__(self, d: int = 64) -> None:
            super().__init__()
            self.embed = nn.Embedding(VOCAB, d)
            self.pos = nn.Parameter(torch.zeros(1, max(SEQ_LENGTHS), d))
            self.blocks = nn.ModuleList(
                nn.TransformerEncoderLayer(d, 4, 2 * d, dropout=0.0, batch_first=True)
                for _ in range(2)
            )
            self.head = nn.Linear(d, VOCAB)
            self.drop_path = False

        def forward(self, tokens: Any, aux_weight: float) -> tuple[Any, Any]:
            h = self.embed(tokens) + self.pos[:, : tokens.shape[1]]
            mask = nn.Transformer.generate_square_subsequent_mask(tokens.shape[1])
            for block in self.blocks:
                out = block(h, src_mask=mask, is_causal=True)
                if self.drop_path and self.training:
                    keep = (torch.rand(h.shape[0], 1, 1) > 0.1).to(h.dtype)
                    out = h + (out - h) * keep / 0.9
                h = out
            logits = self.head(h)
            # z-loss keeps logits small; its weight follows the LR schedule (a Python float each step).
            aux = aux_weight * torch.logsumexp(logits, dim=-1).pow(2).mean()
            return logits, aux

    return TinyLM()


def _batch(torch: Any, generator: Any, size: int, length: int) -> tuple[Any, Any]:
    """Arithmetic progressions mod VOCAB: the next token is learnable from the previous two."""
    start = torch.randint(0, VOCAB, (size, 1), generator=generator)
    stride = torch.randint(1, 5, (size, 1), generator=generator)
    seq = (start + stride * torch.arange(length + 1)) % VOCAB
    return seq[:, :-1], seq[:, 1:]


def _free_port(port: int) -> int:
    """``port`` if it can be bound on loopback (0 picks a free one); raises OSError if it is taken."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", port))
        return int(sock.getsockname()[1])


def _exporters() -> tuple[list[str], str]:
    if importlib.util.find_spec("recompprof_prometheus") and importlib.util.find_spec(
        "prometheus_client"
    ):
        return ["prometheus"], ""
    return (
        [],
        "metrics not served: the Prometheus exporter is not installed (pip install 'recompprof[prometheus]')",
    )


def _compiling_column(session: Any) -> Any:
    """A progress column naming the compile running now (rich redraws it while the training loop waits in one)."""
    from rich.progress import ProgressColumn
    from rich.text import Text

    from recompprof._model.status import describe

    class Compiling(ProgressColumn):
        def render(self, task: Any) -> Text:
            status = session.status()
            return Text(
                describe(status.rank, status.compiling) if status.compiling is not None else "",
                style="yellow",
            )

    return Compiling()


def main(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    # Lines are never wrapped: the paths and commands printed are copied into a shell, and a console
    # that is not a terminal (a CI log, a pipe) is 80 columns, which would break them in two.
    console = Console(stderr=False, soft_wrap=True)
    began = time.perf_counter()
    exporters, why_not = _exporters()
    port = None
    # Precedence as everywhere: the flag, then the RECOMPPROF_* variable, then the demo's default.
    if args.port is None:
        try:
            args.port = int(os.environ.get("RECOMPPROF_PROMETHEUS_PORT") or 9464)
        except ValueError as exc:
            raise ConfigError(
                "recompprof setting 'prometheus_port' (RECOMPPROF_PROMETHEUS_PORT) must be a port "
                f"number, got {os.environ['RECOMPPROF_PROMETHEUS_PORT']!r}"
            ) from exc
    if exporters:
        try:
            port = _free_port(args.port)
        except OSError as exc:
            raise ConfigError(
                f"demo: port {args.port} is not free ({exc.strerror}); pass --port N (or --port 0)"
            ) from exc
    run_dir = Path(
        args.run_dir
        or os.environ.get("RECOMPPROF_RUN_DIR")
        or Path("recompprof-runs") / time.strftime("demo-%Y%m%d-%H%M%S")
    ).resolve()
    os.environ.setdefault(
        "RECOMPPROF_RUN_ID", run_dir.name
    )  # the report names the run as its directory

    import torch

    import recompprof

    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(0)
    model = _model(torch)
    compiled = torch.compile(model, backend=args.backend)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    warmup = max(2, args.steps // 10)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        opt,
        lambda s: (
            min(1.0, (s + 1) / warmup)
            * 0.5
            * (1 + math.cos(math.pi * min(s, args.steps) / args.steps))
        ),
    )
    eval_every = max(5, args.steps // 3)
    flag_step = (2 * args.steps) // 3
    settings: dict[str, Any] = {
        "mode": "profile" if args.profile else "monitor",
        "run_dir": run_dir,
        "exporters": exporters,
        "warmup_steps": warmup,
    }
    if port is not None:
        settings["prometheus_port"] = port
    mode = settings["mode"]
    console.print(
        f"[bold]recompprof demo[/bold]: {args.steps} steps of a tiny transformer LM (AdamW, torch.compile "
        f"backend={args.backend!r}) in {mode} mode"
    )
    console.print(
        f"  metrics: http://127.0.0.1:{port}/metrics (live while training)"
        if port
        else f"  {why_not}"
    )
    console.print(f"  event log: {run_dir}")
    with recompprof.attach(**settings) as session:
        columns = (
            TextColumn("[progress.description]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[status]}"),
            _compiling_column(session),
        )
        with Progress(*columns, console=console, transient=False) as progress:
            task = progress.add_task("training", total=args.steps, status="")
            for step in range(args.steps):
                if step == flag_step:
                    model.drop_path = True
                length = SEQ_LENGTHS[step % len(SEQ_LENGTHS)] if step >= 2 else SEQ_LENGTHS[0]
                tokens, targets = _batch(torch, generator, 16, length)
                aux_weight = 1e-4 * schedule.get_last_lr()[0] / 3e-3
                logits, aux = compiled(tokens, aux_weight)
                loss = (
                    torch.nn.functional.cross_entropy(
                        logits.reshape(-1, VOCAB), targets.reshape(-1)
                    )
                    + aux
                )
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
                schedule.step()
                if (step + 1) % eval_every == 0:
                    model.eval()
                    with torch.no_grad():
                        tokens, targets = _batch(torch, generator, 16, SEQ_LENGTHS[0])
                        val_logits, _ = compiled(tokens, 0.0)
                        val = torch.nn.functional.cross_entropy(
                            val_logits.reshape(-1, VOCAB), targets.reshape(-1)
                        )
                    model.train()
                    progress.console.print(f"  step {step + 1}: validation loss {val.item():.3f}")
                snap = session.snapshot()
                progress.update(
                    task,
                    advance=1,
                    status=f"loss {loss.item():.3f} | compiles {snap.compiles_total} "
                    f"| recompiles {snap.recompiles_total}",
                )
        if args.hold > 0 and port:
            console.print(
                f"training done; serving metrics on http://127.0.0.1:{port}/metrics for {args.hold:g} s"
            )
            time.sleep(args.hold)
    console.print(recompprof.report().__str__(), markup=False, highlight=False)
    seconds = time.perf_counter() - began
    console.print(f"demo finished in {seconds:.1f} s. Where to look next:")
    if port:
        console.print(
            f"  metrics (while a job runs): http://127.0.0.1:{port}/metrics  (this demo's server has stopped; "
            "--hold SECONDS keeps it up)"
        )
    console.print(f"  run directory:  {run_dir}")
    console.print(f"  terminal report: recompprof report {run_dir}")
    console.print(f"  HTML report:     recompprof report {run_dir} --html recompprof-report.html")
    console.print(
        f"  CI gate:         recompprof check {run_dir} --max-recompiles 0 --after-step {warmup}"
    )
    return 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--steps", type=int, default=60, help="training steps (default 60)")
    parser.add_argument(
        "--port",
        type=int,
        default=None,
        help="Prometheus metrics port on 127.0.0.1 (0: any free port; default: "
        "RECOMPPROF_PROMETHEUS_PORT, else 9464)",
    )
    parser.add_argument(
        "--run-dir",
        type=arguments.path,
        default=None,
        help="where the event log goes (default: RECOMPPROF_RUN_DIR, else recompprof-runs/demo-<time>)",
    )
    parser.add_argument(
        "--profile", action="store_true", help="run in profile mode (observation-only backend)"
    )
    parser.add_argument(
        "--backend",
        default="eager",
        help="torch.compile backend (default eager; inductor is slow on CPU)",
    )
    parser.add_argument(
        "--hold",
        type=float,
        default=0.0,
        help="keep serving metrics this many seconds after training",
    )


if __name__ == "__main__":  # pragma: no cover - `recompprof demo` is the entry point
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    sys.exit(main(parser.parse_args()))
