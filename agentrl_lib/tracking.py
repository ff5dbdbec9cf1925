"""Experiment tracking: where each metrics row goes besides metrics.jsonl (`train.report_to`, `--report-to`).

    none          nothing more (default): metrics.jsonl and learning_curve.png only
    tensorboard   every numeric key of every row as a scalar (tag = the key, global step = the row's step) in
                  RUN_DIR/tensorboard/, written with torch.utils.tensorboard.SummaryWriter;
                  `tensorboard --logdir runs` shows every run under runs/ side by side

The trainer calls `write(row)` right after the row is appended to metrics.jsonl (Trainer.train) and `close()` when it
closes; only the main process gets a real tracker (with data parallelism the other ranks hold a `NoTracker`). A
tracker opens its files at the first row, so a run that fails before its first step leaves none. A resumed run
appends a new event file to the same folder and hides the events of the steps it redoes (SummaryWriter's
`purge_step` = the first step it writes): the curves TensorBoard shows are those of metrics.jsonl.

To add a tracker: a class with `__init__(run_dir)`, `write(row)`, `close()` (and a static `preflight(run_dir)` that
raises ConfigError when its output cannot be written: checked before the model loads), one line in TRACKERS and its
name in config.REPORT_TO. Introduced in book/command_line.md ("TensorBoard").
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any


def scalars(row: dict[str, Any]) -> dict[str, float]:
    """The row's numeric values as {key: float}: ints and finite floats; not `step` (the x axis), not lists
    (alerts, env_error_reasons), not None or NaN/inf (metrics.jsonl writes those as null)."""
    out = {}
    for key, value in row.items():
        if key == "step" or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if math.isfinite(value):
            out[key] = float(value)
    return out


class NoTracker:
    """report_to = 'none', and every rank but the main one: does nothing."""

    def __init__(self, run_dir: str | Path | None = None):
        pass

    def write(self, row: dict[str, Any]) -> None:
        pass

    def close(self) -> None:
        pass


class TensorBoardTracker:
    """report_to = 'tensorboard': the rows' scalars in run_dir/tensorboard/ (one event file per process that wrote)."""

    def __init__(self, run_dir: str | Path):
        self.log_dir = Path(run_dir) / "tensorboard"
        self.writer = None
        self.preflight(run_dir)

    @staticmethod
    def preflight(run_dir: str | Path) -> None:
        """Check, before the model loads, that RUN_DIR/tensorboard can be made and written (fsio.check_out_path: no
        file in its way, a writable folder). SummaryWriter opens its event file in a writer thread at the first row:
        an unwritable place failed only after step 1, in a 40-line thread traceback, and a file in the way read "File
        exists" without naming the flag (issue 52). Raises ConfigError naming train.report_to (--report-to)."""
        from .fsio import check_out_path

        check_out_path("train.report_to (--report-to tensorboard):", str(Path(run_dir) / "tensorboard"),
                       is_dir=True)

    def write(self, row: dict[str, Any]) -> None:
        step = int(row["step"])
        if self.writer is None:  # at the first row: its step is where a resumed run takes over from the old events
            from torch.utils.tensorboard import SummaryWriter

            self.writer = SummaryWriter(str(self.log_dir), purge_step=step)
        for key, value in scalars(row).items():
            self.writer.add_scalar(key, value, global_step=step)
        self.writer.flush()  # one row per RL step (seconds to minutes apart): a killed run loses no row

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None


TRACKERS = {"none": NoTracker, "tensorboard": TensorBoardTracker}
"""report_to value → tracker class, keyed by the names config_values.ReportTo types train.report_to with (a test holds
the two equal)."""


def check_tracker_output(report_to: str, run_dir: str | Path) -> None:
    """The pre-flight check of the tracker of `report_to` for run_dir (a tracker class's `preflight`, if it has one):
    `agentrl train` calls it with its other output checks, before anything is written. Raises ConfigError."""
    preflight = getattr(TRACKERS[report_to], "preflight", None)
    if preflight is not None:
        preflight(run_dir)


def open_tracker(report_to: str, run_dir: str | Path, is_main: bool = True):
    """The tracker of `report_to` for run_dir; a NoTracker on every process but the main one."""
    return TRACKERS[report_to](run_dir) if is_main else NoTracker()
