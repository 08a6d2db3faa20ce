"""The PyTorch Lightning callback with the real ``lightning`` package on CPU.

A tiny compiled ``nn.Linear`` (``aot_eager``) trains under ``Trainer.fit`` with gradient accumulation 2
on 10 samples in batches of 4 (the last batch of each epoch has 2: a size recompile) and validates
under inference mode at the end of each epoch (a grad-mode recompile). Run as a script, this module is
the 2-process ``ddp`` job (gloo, CPU) whose processes Lightning launches itself.
"""

from __future__ import annotations

import csv
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip(
    "lightning", reason="the lightning extra is not installed (pip install recompprof[lightning])"
)

import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from lightning.pytorch.loggers import CSVLogger
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import recompprof
from recompprof._eventlog.reader import read_file, read_run
from recompprof._model.events import Compile, Event, SessionEnd, SessionStart
from recompprof._model.steady import BOUNDED_VARIANTS
from recompprof.integrations.lightning import RecompprofCallback, SteadyStateRecompileError

SCALARS = (
    "recompprof/recompiles",
    "recompprof/steady_state_recompiles",
    "recompprof/compile_seconds",
    "recompprof/recompile_limit_hits",
)
DDP_TIMEOUT = 240.0  # seconds for the whole 2-process job on a busy 2-core machine


class Tiny(pl.LightningModule):
    """One compiled linear layer; ``interrupt_at`` raises KeyboardInterrupt in that global step."""

    def __init__(self, backend: str = "aot_eager", interrupt_at: int | None = None) -> None:
        super().__init__()
        self.net = nn.Linear(4, 1)
        self.compiled = torch.compile(self.net, backend=backend)
        self.interrupt_at = interrupt_at

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        if self.trainer.global_step == self.interrupt_at:
            raise KeyboardInterrupt
        x, y = batch
        loss = F.mse_loss(self.compiled(x), y)
        self.log("train_loss", loss, batch_size=len(x))
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", F.mse_loss(self.compiled(x), y), batch_size=len(x))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


class StepProbe(pl.Callback):
    """Records, for every event, the step it carries and the trainer's global step at that moment."""

    def __init__(self, callback: RecompprofCallback) -> None:
        self.callback = callback
        self.seen: list[tuple[Event, int]] = []

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        assert (
            self.callback.session is not None
        )  # the recompprof callback (listed first) has attached
        self.callback.session.add_listener(
            lambda event: self.seen.append((event, trainer.global_step))
        )


def loaders(
    train_n: int = 10, train_batch: int = 4, val_n: int = 6, val_batch: int = 3
) -> tuple[DataLoader, DataLoader]:
    g = torch.Generator().manual_seed(0)
    train = TensorDataset(
        torch.randn(train_n, 4, generator=g), torch.randn(train_n, 1, generator=g)
    )
    val = TensorDataset(torch.randn(val_n, 4, generator=g), torch.randn(val_n, 1, generator=g))
    return DataLoader(train, batch_size=train_batch), DataLoader(val, batch_size=val_batch)


def trainer(root: Path, callbacks: list[pl.Callback], **kwargs: Any) -> pl.Trainer:
    options: dict[str, Any] = dict(
        max_epochs=2,
        accumulate_grad_batches=2,
        log_every_n_steps=1,
        logger=CSVLogger(root),
        num_sanity_val_steps=0,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
        devices=1,
        default_root_dir=root,
    )
    options.update(kwargs)
    return pl.Trainer(callbacks=callbacks, **options)


def csv_rows(trainer_: pl.Trainer) -> list[dict[str, str]]:
    path = Path(trainer_.logger.log_dir) / "metrics.csv"
    with path.open() as f:
        return list(csv.DictReader(f))


def forward_compiles(events: list[Event]) -> list[Compile]:
    return [e for e in events if isinstance(e, Compile) and not e.backward]


def test_fit_events_carry_global_steps_and_scalars_reach_the_csv_logger(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Events carry trainer.global_step (accumulation 2): the size recompile at step 1, the validation
    recompile at step 2; the default warm-up runs through the first validation (3 steps), so neither is
    steady state; the scalars are in the CSV logger at each logged step and at the end; the report
    goes to the lightning.pytorch logger; the session is detached after fit."""
    callback = RecompprofCallback()
    probe = StepProbe(callback)
    fit = trainer(tmp_path, [callback, probe])
    caplog.set_level(logging.INFO, logger="lightning.pytorch")
    fit.fit(Tiny(), *loaders())

    assert recompprof.current() is None and callback.session is None
    assert (
        fit.global_step == 4
    )  # 2 epochs x 3 batches, accumulation 2, the partial one steps at epoch end
    compiles = [(e, gs) for e, gs in probe.seen if isinstance(e, Compile)]
    assert compiles and all(e.step == gs for e, gs in compiles)

    events = list(read_file(next((tmp_path / "run").glob("rank00000-*.jsonl"))))
    start = next(e for e in events if isinstance(e, SessionStart))
    assert start.warmup_steps == 3  # the first validation runs at global step 2
    forward = forward_compiles(events)
    assert [(e.step, e.is_recompile) for e in forward] == [(0, False), (1, True), (2, True)]
    assert {r.category for r in forward[1].reasons} == {"size"}
    assert {r.category for r in forward[2].reasons} == {"grad_mode"}
    assert not any(e.steady_state for e in forward)
    end = next(e for e in events if isinstance(e, SessionEnd))
    assert end.step == 4 and end.totals["recompiles"] == 2

    rows = [r for r in csv_rows(fit) if r.get("recompprof/recompiles")]
    assert all(set(SCALARS) <= {k for k, v in r.items() if v} for r in rows)
    assert [float(r["recompprof/recompiles"]) for r in rows] == [
        0.0,
        1.0,
        2.0,
        2.0,
        2.0,
    ]  # steps 1-4, then the end
    assert float(rows[-1]["recompprof/compile_seconds"]) == pytest.approx(
        end.totals["compile_seconds"], rel=1e-4
    )
    assert {float(r["recompprof/steady_state_recompiles"]) for r in rows} == {0.0}

    summary = [
        m
        for r in caplog.records
        if r.name == "lightning.pytorch" and "recompprof (rank 0)" in (m := r.getMessage())
    ]
    assert len(summary) == 1 and "2 recompiles" in summary[0] and "recompprof report" in summary[0]


class Growing(Tiny):
    """Each batch of an epoch repeated once more than the last: a new batch size on every call."""

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        k = batch_idx + 1
        loss = F.mse_loss(self.compiled(x.repeat(k, 1)), y.repeat(k, 1))
        self.log("train_loss", loss, batch_size=len(x) * k)
        return loss


def test_fail_on_steady_state_recompiles_stops_fit(tmp_path: Path) -> None:
    """With automatic dynamic shapes off (the limit raised), a batch size that grows on every call recompiles
    each time: the recompile past the bound of a bounded set's variants is steady state, and fit raises a
    clear error naming the frame and step at the end of that step, the session detached with its event log
    closed. The variants before it never raise (a few sizes are a bounded set)."""
    callback = RecompprofCallback(warmup_steps=1, fail_on_steady_state_recompiles=True)
    fit = trainer(tmp_path, [callback], limit_val_batches=0)
    with (
        pytest.raises(
            SteadyStateRecompileError, match=r"steady-state recompile of .*forward .* at step \d+"
        ),
        torch._dynamo.config.patch(automatic_dynamic_shapes=False, recompile_limit=32),
    ):
        fit.fit(Growing(backend="eager"), *loaders(train_n=40))
    assert recompprof.current() is None
    events = list(read_file(next((tmp_path / "run").glob("rank*.jsonl"))))
    assert isinstance(events[-1], SessionEnd)
    verdicts = [e.steady_state for e in forward_compiles(events)]
    assert verdicts == [False] * BOUNDED_VARIANTS + [True]
    steady = forward_compiles(events)[-1]
    # the ninth batch opens an accumulation window of two: stopped at its end, before the window's step
    assert fit.global_step == steady.step == BOUNDED_VARIANTS // 2


def test_keyboard_interrupt_detaches(tmp_path: Path) -> None:
    """A KeyboardInterrupt in a training step: Lightning's graceful shutdown calls on_exception, the
    session detaches (its event log ends with session_end at the interrupted step)."""
    callback = RecompprofCallback()
    fit = trainer(tmp_path, [callback], limit_val_batches=0)
    prior = signal.getsignal(signal.SIGINT)
    try:
        with pytest.raises(SystemExit):  # Lightning exits 1 after its graceful shutdown
            fit.fit(Tiny(backend="eager", interrupt_at=1), *loaders())
    finally:
        signal.signal(signal.SIGINT, prior)  # Lightning ignores SIGINT during its shutdown
    assert recompprof.current() is None
    events = list(read_file(next((tmp_path / "run").glob("rank*.jsonl"))))
    assert isinstance(events[-1], SessionEnd) and events[-1].step == 1


def test_user_attached_session_is_used_not_attached_twice(tmp_path: Path) -> None:
    """A session the user attached is kept: the callback adds no second one, sets its steps from the
    trainer and leaves it attached after fit."""
    with recompprof.attach() as session:
        callback = RecompprofCallback()
        probe = StepProbe(callback)
        trainer(tmp_path, [callback, probe], max_epochs=1).fit(Tiny(backend="eager"), *loaders())
        assert recompprof.current() is session and session.attached
        assert session.current_step == 2
        compiles = [(e, gs) for e, gs in probe.seen if isinstance(e, Compile)]
        assert [e.step for e, _ in compiles] == [0, 1, 2] and all(
            e.step == gs for e, gs in compiles
        )
    assert len(list((tmp_path / "run").glob("rank*.jsonl"))) == 1


class WarmingUp(Tiny):
    """Tiny with a per-step LR warm-up of 5 steps (LinearLR rising from a tenth of the rate)."""

    def configure_optimizers(self) -> Any:
        opt = torch.optim.SGD(self.parameters(), lr=0.01)
        warm = torch.optim.lr_scheduler.LinearLR(opt, start_factor=0.1, total_iters=5)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": warm, "interval": "step"}}


def test_default_warmup_from_the_lr_scheduler(tmp_path: Path) -> None:
    """Without validation, the default warm-up is the per-step LR scheduler's (LinearLR, 5 steps), so the
    size recompile at step 1 is not steady state."""
    trainer(tmp_path, [RecompprofCallback()], limit_val_batches=0).fit(
        WarmingUp(backend="eager"), *loaders()
    )
    events = list(read_file(next((tmp_path / "run").glob("rank*.jsonl"))))
    assert next(e for e in events if isinstance(e, SessionStart)).warmup_steps == 5
    assert [(e.step, e.steady_state) for e in forward_compiles(events)] == [(0, False), (1, False)]


def test_scheduler_warmup_reads_real_schedulers() -> None:
    """The warm-up length of torch's own schedulers: a rising LinearLR, the first of a SequentialLR
    (bounded by its milestone); none for a decaying LinearLR or a cosine schedule."""
    from recompprof._torch.lr_schedulers import scheduler_warmup

    opt = torch.optim.SGD(nn.Linear(1, 1).parameters(), lr=0.1)
    lr = torch.optim.lr_scheduler
    assert scheduler_warmup(lr.LinearLR(opt, start_factor=0.01, total_iters=7)) == 7
    assert (
        scheduler_warmup(lr.LinearLR(opt, start_factor=1.0, end_factor=0.1, total_iters=7)) is None
    )
    assert scheduler_warmup(lr.CosineAnnealingLR(opt, T_max=10)) is None
    seq = lr.SequentialLR(
        opt,
        [lr.LinearLR(opt, start_factor=0.1, total_iters=20), lr.CosineAnnealingLR(opt, 90)],
        milestones=[10],
    )
    assert scheduler_warmup(seq) == 10


def test_importing_recompprof_imports_no_framework() -> None:
    """``import recompprof`` (and its integrations package) loads neither Lightning nor transformers."""
    code = (
        "import sys, recompprof, recompprof.integrations; "
        "print(sorted(m for m in ('lightning', 'pytorch_lightning', 'transformers', 'accelerate') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    ).stdout
    assert out.strip() == "[]"


def test_bad_setting_fails_when_the_callback_is_built() -> None:
    """A misspelt setting is a ConfigError naming it, before any training starts."""
    with pytest.raises(recompprof.ConfigError, match="warmup_step"):
        RecompprofCallback(warmup_step=3)


@pytest.mark.workload
def test_ddp_two_processes_write_two_rank_logs(tmp_path: Path) -> None:
    """Lightning launches 2 ddp processes itself (gloo, CPU): each writes its own event log, with its
    rank from the trainer, world size 2 and one run id (rank 0's, broadcast), under one run directory;
    every compile carries a global step of the run; rank 0's CSV logger has the scalars."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("RECOMPPROF_")
        and k
        not in (
            "RANK",
            "LOCAL_RANK",
            "WORLD_SIZE",
            "LOCAL_WORLD_SIZE",
            "MASTER_ADDR",
            "MASTER_PORT",
            "TORCHELASTIC_RUN_ID",
            "NODE_RANK",
        )
    }
    proc = subprocess.run(
        [sys.executable, __file__, str(tmp_path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=DDP_TIMEOUT,
        start_new_session=True,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run_dirs = list((tmp_path / "recompprof-runs").iterdir())
    assert len(run_dirs) == 1  # both ranks under rank 0's run id
    logs = sorted(run_dirs[0].glob("rank*.jsonl"))
    assert [p.name[:9] for p in logs] == ["rank00000", "rank00001"]
    starts = {}
    for path in logs:
        events = list(read_file(path))
        start = next(e for e in events if isinstance(e, SessionStart))
        starts[start.rank] = start
        assert {e.rank for e in events} == {start.rank}
        assert isinstance(events[-1], SessionEnd) and events[-1].step == 2
        assert {e.step for e in forward_compiles(events)} <= {0, 1, 2} and forward_compiles(events)
    assert sorted(starts) == [0, 1]
    assert {(s.local_rank, s.world_size) for s in starts.values()} == {(0, 2), (1, 2)}
    assert len({s.run_id for s in starts.values()}) == 1 and starts[0].run_id == run_dirs[0].name
    assert {e.rank for e in read_run(run_dirs[0]) if isinstance(e, Compile)} == {0, 1}
    metrics = next((tmp_path / "logs").rglob("metrics.csv")).read_text()
    assert all(name in metrics for name in SCALARS)


def _ddp_main(root: Path) -> None:
    """The 2-process job: Lightning re-runs this file for rank 1 (its subprocess launcher)."""
    # 5 samples per rank in batches of 2: 2, 2, 1 (a size recompile), accumulation 2 -> 2 global steps.
    train, val = loaders(train_n=10, train_batch=2, val_n=4, val_batch=2)
    fit = pl.Trainer(
        max_epochs=1,
        accumulate_grad_batches=2,
        log_every_n_steps=1,
        logger=CSVLogger(root / "logs"),
        num_sanity_val_steps=0,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
        devices=2,
        strategy="ddp",
        callbacks=[RecompprofCallback()],
        default_root_dir=root,
    )
    fit.fit(Tiny(backend="eager"), train, val)


if __name__ == "__main__":
    _ddp_main(Path(sys.argv[1]))


# A fit under a session the user attached first, whose process sends itself SIGTERM in its second
# step (a scheduler's preemption). Lightning's handler, installed at fit over recompprof's, calls it
# among its own; the fit then stops at the next step and tells its callbacks.
TERMINATED_FIT = """
import os, signal, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
import lightning.pytorch as pl
from test_integration_lightning import Tiny, loaders, trainer
import recompprof

class TermAt(Tiny):
    def training_step(self, batch, batch_idx):
        if self.trainer.global_step == 1 and batch_idx % 2 == 0:
            os.kill(os.getpid(), signal.SIGTERM)
        return super().training_step(batch, batch_idx)

class Told(pl.Callback):
    def on_exception(self, trainer, module, exception):
        print("ON_EXCEPTION", type(exception).__name__, flush=True)

root = Path(sys.argv[2])
recompprof.attach(run_dir=root / "run")
trainer(root, [Told()], limit_val_batches=0).fit(TermAt(backend="eager"), *loaders())
"""


@pytest.mark.workload
def test_sigterm_during_fit_stops_it_the_lightning_way(tmp_path: Path) -> None:
    """SIGTERM during a fit whose session was attached before it: Lightning's own SIGTERM handling
    runs (it stops the fit at the next step, its callbacks see ``SIGTERMException``, the process
    exits 0), and the session ends with the process (``session_end`` last in its log). (recompprof's
    handler, called by Lightning's, killed the process at once with SIGTERM's default: no callback,
    no checkpoint.)"""
    done = subprocess.run(
        [sys.executable, "-c", TERMINATED_FIT, str(Path(__file__).parent), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, (done.returncode, done.stdout[-2000:], done.stderr[-3000:])
    assert "ON_EXCEPTION SIGTERMException" in done.stdout
    events = list(read_file(next((tmp_path / "run").glob("rank*.jsonl"))))
    assert isinstance(events[-1], SessionEnd) and forward_compiles(events)
