"""Sweeps: every cell of a grid of config values × every seed, trained and evaluated by `run.run_rl` (the function
behind `agentrl train`), one JSON record per finished run appended to a results file; `report` turns the records
into mean ± std over seeds with bootstrap intervals, per cell and per difference between cells.

    agentrl sweep --base configs/tw.yaml --grid algo.advantage=gae,grpo,rloo reward.kind=sparse,dense \\
        --seeds 0,1,2 --init runs/sft --eval-games games/heldout --out results/algo_reward.jsonl
    agentrl report results/algo_reward.jsonl --metric eval.success_rate --compare algo.advantage --by reward.kind

    records = run_sweep(RunConfig.load("configs/tw.yaml"), parse_grid(["reward.kind=sparse,dense"]), [0, 1, 2],
                        "results/reward.jsonl", eval_games="games/heldout")
    print(report(load_records("results/reward.jsonl"), compare="reward.kind").markdown())

A sweep survives being stopped: a run whose record is in the results file (same cell, seed and base-config hash)
is skipped, and a run whose directory holds a half-finished run resumes from its last checkpoint. Run the same
command again.

Introduced in the chapters' experiments (notebooks/02_reward, 03_policy, 04_sft_then_rl).
"""
from __future__ import annotations

import contextlib
import dataclasses
import difflib
import hashlib
import itertools
import json
import math
import os
import platform
import re
import sys
import time
from dataclasses import dataclass, field, fields
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable

from .checkpoint import prune_training_state
from .config import ALGO_PRESETS, SECTIONS, SEED_MAX, ConfigError, RunConfig, _parse_value, choices_for
from .fsio import atomic_write_text
from .paths import git_commit

PRESET_AXIS = "algo"
"""A grid axis named `algo` takes preset names (config.ALGO_PRESETS: ppo, grpo, rloo, starpo_s, ...) and sets their
fields."""
STEP_KEYS = ("step", "success_rate", "return_mean", "group_return_std", "invalid_rate", "entropy", "kl_ref",
             "approx_kl", "mean_turns", "zero_std_group_frac", "grad_norm", "response_length", "repetition_rate",
             "input_dependence", "alerts")
"""The metrics.METRICS keys of each training step kept in a record's "steps" (the run dir's metrics.jsonl has all);
the Echo-Trap diagnostics and the collapse detector's `alerts` among them (diagnostics.py; records written before
they existed lack them, and diagnostics.read_alerts replays those)."""
EVAL_KEYS = ("success_rate", "mean_turns", "invalid_rate", "mean_score_frac", "n_games", "env_errors")
"""The evaluate() keys kept in a record's "eval", beside per_game: [[game, won, turns], ...]."""
RECORD_KEYS = ("cell", "seed", "base_hash", "config", "commit", "device", "machine", "started", "finished",
               "wall_seconds", "train_seconds", "resumed", "run_dir", "steps", "eval", "evals")
"""The keys of every record (one JSON line of a results file). wall_seconds: this call of the run function (training
that resumed after a stop + evaluation); train_seconds: Σ step_seconds over every training step, also those before a
stop (the compute a run cost); resumed: whether it continued a half-finished run (or was recorded from a finished
run's dir, finished_run); evals: {name: eval} of the extra game sets (run_sweep's extra_evals, e.g. harder games), {}
without them."""
SIGNIFICANT_DIGITS = 5
"""Floats in "steps" are rounded to this many significant digits (keeps a results file at kilobytes)."""
NO_DIFFERENCE = "no difference at this scale"
"""The verdict of a difference whose bootstrap interval contains 0."""


class SweepInterrupted(KeyboardInterrupt):
    """Ctrl-C during a sweep; str(e) is one line saying how far it got and that the same command resumes it."""


class ResultsFileError(ValueError):
    """A results file has a damaged line other than the last (the last one is a write cut short: ignored)."""


# ------------------------------------------------------------------------------------------------ the grid
def _field_default(key: str) -> Any:
    """The dataclass default of `key` ('section.field'). Raises ConfigError naming an unknown field."""
    section, _, name = key.partition(".")
    known = [f"{s}.{f.name}" for s, cls in SECTIONS.items() for f in fields(cls)]
    if key not in known:
        close = difflib.get_close_matches(key, known + [PRESET_AXIS], n=1)
        hint = f"; did you mean {close[0]}?" if close else ""
        raise ConfigError(f"grid axis {key!r} is not a config field (write SECTION.FIELD, e.g. algo.advantage or "
                          f"train.lr; sections: {', '.join(SECTIONS)}; or `algo` for a preset){hint}")
    return getattr(SECTIONS[section](), name)


def parse_value(key: str, text: str) -> Any:
    """One grid value `text` for the field `key`, parsed with the field's type (config._parse_value: numbers from
    strings, integers refused for 2.5), booleans from true/false/yes/no/on/off/1/0, closed sets checked.

    Raises: ConfigError naming the axis and the value.
    """
    if key == PRESET_AXIS:
        if text not in ALGO_PRESETS:
            raise ConfigError(f"grid axis algo: {text!r} is not a preset; presets: {', '.join(ALGO_PRESETS)}")
        return text
    default = _field_default(key)
    if isinstance(default, bool):
        low = text.strip().lower()
        if low in ("true", "yes", "on", "1"):
            return True
        if low in ("false", "no", "off", "0"):
            return False
        raise ConfigError(f"grid axis {key}: {text!r} is not true/false")
    try:
        value = _parse_value(key, default, text)
    except ConfigError as e:
        raise ConfigError(f"grid axis {key}: {e}") from None
    choices = choices_for(key)
    if choices is not None and value not in choices:
        raise ConfigError(f"grid axis {key}: {value!r} is not one of {', '.join(map(str, choices))}")
    return value


def parse_grid(specs: Iterable[str]) -> dict[str, list]:
    """`["algo.advantage=gae,grpo", "reward.kind=sparse,dense"]` → {"algo.advantage": ["gae", "grpo"], ...}: one
    axis per spec FIELD=V1,V2,... in the order given, each value parsed with the field's type (parse_value).
    `algo=ppo,grpo` is an axis of presets (config.ALGO_PRESETS).

    Raises: ConfigError, one line naming the axis, for an unknown field, a bad value, an axis given twice, an axis
        without values, a repeated value, train.seed (use the seeds), or a preset axis beside a field it sets.
    """
    grid: dict[str, list] = {}
    for spec in specs:
        key, eq, values = spec.partition("=")
        key = key.strip()
        if not eq:
            raise ConfigError(f"grid axis {spec!r} has no values: write FIELD=V1,V2 (e.g. reward.kind=sparse,dense)")
        if key == "train.seed":
            raise ConfigError("grid axis train.seed: give seeds with --seeds (run_sweep's `seeds`), not as an axis")
        if key in grid:
            raise ConfigError(f"grid axis {key} is given twice; list all its values once: {key}=V1,V2")
        texts = [v.strip() for v in values.split(",")]
        if not values.strip() or any(t == "" for t in texts):
            raise ConfigError(f"grid axis {key}: empty value in {values!r}; write {key}=V1,V2")
        parsed = [parse_value(key, t) for t in texts]
        if len(set(map(repr, parsed))) != len(parsed):
            raise ConfigError(f"grid axis {key}: a value is repeated in {values!r}")
        grid[key] = parsed
    if PRESET_AXIS in grid:
        sets = {f"algo.{k}" for preset in grid[PRESET_AXIS] for k in ALGO_PRESETS[preset]}
        clash = sorted(sets & set(grid))
        if clash:
            raise ConfigError(f"grid axes algo (presets) and {', '.join(clash)} both set {', '.join(clash)}; keep one")
    return grid


def parse_tags(specs: Iterable[str]) -> dict[str, Any]:
    """["sft.demos=12", "level=w2"] → {"sft.demos": 12, "level": "w2"} (numbers parsed as numbers). Raises
    ConfigError for a spec without '=' or a repeated name."""
    tags: dict[str, Any] = {}
    for spec in specs:
        name, eq, text = spec.partition("=")
        if not eq or not name.strip() or not text.strip():
            raise ConfigError(f"--tag {spec!r}: write NAME=VALUE, e.g. sft.demos=12")
        if name in tags:
            raise ConfigError(f"--tag {name!r} is given twice")
        try:
            tags[name] = int(text)
        except ValueError:
            try:
                tags[name] = float(text)
            except ValueError:
                tags[name] = text
    return tags


def parse_extra_evals(specs: Iterable[str]) -> dict[str, tuple[str, int | None]]:
    """["hard=games/harder@12", "ood=games/x"] → {"hard": ("games/harder", 12), "ood": ("games/x", None)}. Raises
    ConfigError for a spec without NAME=DIR or a max_turns that is not a positive integer."""
    out: dict[str, tuple[str, int | None]] = {}
    for spec in specs:
        name, eq, rest = spec.partition("=")
        if not eq or not re.fullmatch(r"[A-Za-z0-9_-]+", name) or not rest:
            raise ConfigError(f"--also-eval {spec!r}: write NAME=DIR or NAME=DIR@MAX_TURNS (NAME of letters, digits, "
                              "_ and -), e.g. hard=games/cooking2-heldout@12")
        games, at, turns = rest.rpartition("@") if "@" in rest else (rest, "", "")
        if at and not (turns.isdigit() and int(turns) >= 1):
            raise ConfigError(f"--also-eval {spec!r}: MAX_TURNS after @ must be a positive integer")
        out[name] = (games, int(turns) if at else None)
    return out


def parse_seeds(text: str | Iterable[int]) -> list[int]:
    """'0,1,2' (or a list of ints) → [0, 1, 2]. Raises ConfigError for a non-integer, a repeat, or a seed outside
    [0, SEED_MAX]."""
    items = [t.strip() for t in text.split(",")] if isinstance(text, str) else list(text)
    seeds = []
    for t in items:
        try:
            s = int(t)
        except (TypeError, ValueError):
            raise ConfigError(f"--seeds: {t!r} is not an integer; write e.g. --seeds 0,1,2") from None
        if not 0 <= s <= SEED_MAX:
            raise ConfigError(f"--seeds: {s} is outside [0, {SEED_MAX}]")
        seeds.append(s)
    if not seeds or len(set(seeds)) != len(seeds):
        raise ConfigError(f"--seeds {text!r}: give distinct integers, e.g. 0,1,2")
    return seeds


def grid_cells(grid: dict[str, list]) -> list[dict[str, Any]]:
    """Every combination of the axes' values (the first axis varies slowest); [{}] for an empty grid."""
    keys = list(grid)
    return [dict(zip(keys, combo)) for combo in itertools.product(*(grid[k] for k in keys))]


def cell_text(cell: dict[str, Any]) -> str:
    """'algo.advantage=gae reward.kind=sparse' ('base' for the empty cell)."""
    return " ".join(f"{k}={v}" for k, v in cell.items()) or "base"


def cell_slug(cell: dict[str, Any]) -> str:
    """A directory name for a cell: its axis=value pairs with '_' between them, characters other than letters,
    digits and . = - replaced by '-' ('algo.advantage=gae_reward.kind=sparse'); cut to 80 characters plus a hash of
    the cell when longer. 'base' for the empty cell."""
    if not cell:
        return "base"
    slug = "_".join(re.sub(r"[^A-Za-z0-9.=-]+", "-", f"{k}={v}") for k, v in cell.items())
    if len(slug) > 80:
        slug = slug[:80] + "-" + hashlib.sha256(cell_key(cell).encode()).hexdigest()[:8]
    return slug


def cell_key(cell: dict[str, Any]) -> str:
    """The cell as canonical JSON (sorted keys): what records are matched on, with the seed and the base hash."""
    return json.dumps(cell, sort_keys=True)


def cell_config(base: RunConfig, cell: dict[str, Any], seed: int) -> RunConfig:
    """`base` with the cell's values (a preset axis first, then the fields) and train.seed = seed.

    Raises: ConfigError naming the cell when the combination is invalid (e.g. grpo with algo.group_size 1).
    """
    data = base.to_dict()
    if PRESET_AXIS in cell:
        data["algo"].update(ALGO_PRESETS[cell[PRESET_AXIS]])
    for key, value in cell.items():
        if key != PRESET_AXIS:
            section, _, name = key.partition(".")
            data[section][name] = value
    data["train"]["seed"] = seed
    try:
        return RunConfig.from_dict(data)
    except ConfigError as e:
        raise ConfigError(f"grid cell {cell_text(cell)} (seed {seed}): {e}") from None


EXECUTION_FIELDS = ("train.max_tokens_per_microbatch", "train.gradient_checkpointing", "train.report_to")
"""Config fields that change how a run is computed or reported, not what it computes (peak memory, the same update up
to float rounding, tests/test_update.py; TensorBoard files): base_key leaves them out and a half-finished run may
resume with them changed, so a machine with less memory can finish a sweep begun on another."""


def base_key(config: RunConfig | dict, cell: dict) -> str:
    """12 hex digits naming the base config of one run: the sha256 of the run config's fields that differ from
    their defaults, leaving out the fields its cell sets (its grid axes, the fields of an `algo` preset axis),
    train.seed and EXECUTION_FIELDS. Two runs of one sweep share it; so do a record and the same run planned by a
    later library version: a field added since the record was written is absent from its config and counts as its
    default (new fields default to the behaviour before them). A record is "done" on (cell, seed, base_key).

    Args: config: a RunConfig or a record's "config" dict (legacy keys upgraded).  cell: the run's cell.
    Raises: ConfigError if the dict is not a valid config.
    """
    data = config.to_dict() if isinstance(config, RunConfig) else RunConfig.from_dict(config).to_dict()
    defaults = {name: dataclasses.asdict(cls()) for name, cls in SECTIONS.items()}
    skip = {k for k in cell if "." in k} | {"train.seed", *EXECUTION_FIELDS}
    if PRESET_AXIS in cell and cell[PRESET_AXIS] in ALGO_PRESETS:
        skip |= {f"algo.{k}" for k in ALGO_PRESETS[cell[PRESET_AXIS]]}
    kept = {f"{sec}.{k}": v for sec, vals in data.items() for k, v in vals.items()
            if f"{sec}.{k}" not in skip and v != defaults[sec][k]}
    return hashlib.sha256(json.dumps(kept, sort_keys=True).encode()).hexdigest()[:12]


def record_base(record: dict) -> str:
    """The base_key of a record, from its stored config and cell (its stored `base_hash` when it has no config,
    e.g. a hand-made record)."""
    if isinstance(record.get("config"), dict):
        return base_key(record["config"], record["cell"])
    return record["base_hash"]


@dataclass
class PlannedRun:
    """One cell × seed of a sweep."""

    cell: dict[str, Any]
    seed: int
    config: RunConfig
    run_dir: Path

    @property
    def name(self) -> str:
        return self.run_dir.name


def plan_sweep(base: RunConfig, grid: dict[str, list], seeds: list[int], runs_dir: str | Path,
               tags: dict[str, Any] | None = None) -> list[PlannedRun]:
    """Every cell × seed with its config and run dir (runs_dir/<cell-slug>-s<seed>), cells outermost; every config
    is built (and so validated) here, before anything runs. `tags` ({name: value}, names that are not config
    fields) join every cell: they label runs whose configs differ in more than the grid (e.g. {"sft.demos": 12}
    beside an --init and a train.steps of that split point). Raises ConfigError (cell_config, a tag named like a
    config field)."""
    runs_dir = Path(runs_dir)
    tags = dict(tags or {})
    for name in tags:
        if name == PRESET_AXIS or name in {f"{s}.{f.name}" for s, cls in SECTIONS.items() for f in fields(cls)}:
            raise ConfigError(f"tag {name!r} is a config field: make it a grid axis instead")
    plan = [PlannedRun({**tags, **cell}, seed, cell_config(base, cell, seed),
                       runs_dir / f"{cell_slug({**tags, **cell})}-s{seed}")
            for cell in grid_cells(grid) for seed in seeds]
    names = [p.name for p in plan]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ConfigError(f"grid cells share the run dir name {dup[0]} (values that differ only in punctuation); "
                          "rename a value")
    return plan


# ------------------------------------------------------------------------------------------------ the results file
def record_key(record: dict) -> tuple[str, int, str]:
    """(cell as canonical JSON, seed, base key): a run is done when a record with this key exists (record_base:
    computed from the record's config, so records stay valid when the library gains config fields)."""
    return cell_key(record["cell"]), int(record["seed"]), record_base(record)


def load_records(path: str | Path, warn: Callable[[str], None] | None = None) -> list[dict]:
    """The records of a results file, in file order ([] when it does not exist).

    A damaged last line that does not end in a newline (a write cut short by a crash or a full disk) is ignored,
    with one line to `warn` (default: stderr); the next sweep records its run again (run_sweep rebuilds the record
    from the run dir when the run had finished). Any other line that is not a sweep record — also a whole last line,
    e.g. a benchmark's result in a file named like a sweep's — is refused: nothing in the sweep writes one, so the
    file was changed by hand or belongs to another program, and a sweep must not append to it.

    Raises: ResultsFileError naming the file and line.
    """
    path = Path(path)
    if not path.exists():
        return []
    data = path.read_bytes()
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    records = []
    for i, line in enumerate(lines, 1):
        try:
            rec = json.loads(line)
            if not isinstance(rec, dict) or any(k not in rec for k in ("cell", "seed", "base_hash")):
                raise ValueError("not a sweep record")
        except ValueError as e:  # JSONDecodeError, UnicodeDecodeError are ValueErrors
            if i < len(lines) or data.endswith(b"\n"):
                raise ResultsFileError(f"{path} line {i} is not a sweep record ({str(e)[:60]}); only a last line "
                                       "without its newline can be cut short by a crash: fix or remove that line, or "
                                       "write the sweep's records to another file") from None
            (warn or _stderr)(f"{path}: line {i} is damaged (a write cut short?); ignored, its run will be recorded "
                              "again")
            continue
        records.append(rec)
    return records


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def drop_damaged_tail(path: str | Path) -> None:
    """Remove a last line that does not end in a newline (a write cut short), rewriting the file atomically
    (fsio.atomic_write_text), so the next record starts on its own line. Nothing happens to a whole file."""
    path = Path(path)
    if not path.exists():
        return
    data = path.read_bytes()
    if not data or data.endswith(b"\n"):
        return
    atomic_write_text(path, data[:data.rfind(b"\n") + 1].decode())


def append_record(path: str | Path, record: dict) -> dict:
    """Append `record` as one JSON line: a single write of the whole line (O_APPEND), then fsync, so a crash leaves
    either the whole line or a cut last line that load_records ignores. A cut last line already there is dropped
    first (drop_damaged_tail). NaN / inf are written as null. Returns the record as written (what load_records
    reads back)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps(_finite(record), separators=(",", ":"))
    data = (line + "\n").encode()
    with _results_lock(path):
        drop_damaged_tail(path)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
    return json.loads(line)


@contextlib.contextmanager
def _results_lock(path: Path):
    """An exclusive lock (fcntl.flock on the results file's directory) while a record is appended, so sweeps run in
    parallel into one file (e.g. one process per seed on a GPU machine) never interleave or cut each other's lines.
    Where flock does not exist (Windows) appends are not locked."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not on Linux / macOS
        yield
        return
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _finite(x: Any) -> Any:
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    return x


def _round(x: Any) -> Any:
    return float(f"{x:.{SIGNIFICANT_DIGITS}g}") if isinstance(x, float) and math.isfinite(x) else x


# ------------------------------------------------------------------------------------------------ one record
def machine_info(device: str = "auto") -> dict[str, Any]:
    """platform, python, cpu_count, torch version, torch_device (model.device resolved on this machine) and gpu
    (the CUDA device name, or None)."""
    info: dict[str, Any] = {"platform": platform.platform(), "python": platform.python_version(),
                            "cpu_count": os.cpu_count(), "torch": None, "torch_device": None, "gpu": None}
    try:
        import torch

        from .models import pick_device

        dev = pick_device(device)
        info.update(torch=torch.__version__, torch_device=str(dev))
        if torch.cuda.is_available():
            info["gpu"] = torch.cuda.get_device_name(dev if dev.type == "cuda" else 0)
    except Exception as e:  # a record is still worth writing without it
        info["torch_device"] = f"unknown ({type(e).__name__})"
    return info


def make_record(run: PlannedRun, summary: dict, base_hash: str, started: datetime, finished: datetime,
                wall_seconds: float, commit: str, machine: dict, resumed: bool = False,
                evals: dict[str, dict] | None = None) -> dict:
    """The record of one finished run (RECORD_KEYS): "steps" keeps STEP_KEYS of each metrics row, "eval" (and each
    of `evals`, {name: evaluate() result}) keeps EVAL_KEYS and per_game [[game, won, turns], ...]."""
    ev = summary.get("eval")
    if ev is None:
        raise ValueError(f"run {run.run_dir} returned no evaluation: a sweep needs held-out games (train.eval_games)")
    return {
        "cell": run.cell, "seed": run.seed, "base_hash": base_hash, "config": run.config.to_dict(),
        "commit": commit, "device": machine.get("torch_device"), "machine": machine,
        "started": started.isoformat(timespec="seconds"), "finished": finished.isoformat(timespec="seconds"),
        "wall_seconds": round(wall_seconds, 1),
        "train_seconds": round(sum(r.get("step_seconds") or 0.0 for r in summary.get("rows") or []), 3),
        "resumed": resumed, "run_dir": str(run.run_dir),
        "steps": [{k: _round(row.get(k)) for k in STEP_KEYS} for row in summary.get("rows") or []],
        "eval": compact_eval(ev),
        "evals": {name: compact_eval(res) for name, res in (evals or {}).items()},
    }


def compact_eval(ev: dict) -> dict:
    """An evaluate() result as kept in a record: EVAL_KEYS and per_game [[game, won, turns], ...]."""
    return {**{k: _round(ev.get(k)) for k in EVAL_KEYS},
            "per_game": [[g["game"], bool(g["won"]), g["turns"]] for g in ev.get("per_game", [])]}


def evaluate_extra(run_dir: Path, config: RunConfig, games: str, max_turns: int | None = None) -> dict:
    """Evaluate a finished run's policy (its newest checkpoint) on another game set `games`, as run_rl evaluates
    the held-out set (the run's env config, eval temperature, tokens per turn, generator) with `max_turns` (default
    the run's env.max_turns; harder games may need more)."""
    from .envs.base import load_game_set
    from .evaluate import evaluate
    from .models import load_policy

    policy, tok = load_policy(str(run_dir), config.model.device, config.model.dtype)
    try:
        return evaluate(policy, tok, load_game_set(games), max_turns=max_turns or config.env.max_turns,
                        temperature=config.train.eval_temperature, max_new_tokens=config.train.max_new_tokens,
                        env=config.env, generator=config.model.generator, progress=False)
    finally:
        del policy


def finished_run(run_dir: Path) -> dict | None:
    """The summary (run_rl's "rows" and "eval") of a run that finished training and its held-out evaluation — an
    eval.json written after the last metrics row — or None. A sweep stopped after that point (its record cut short,
    or killed before writing it) rebuilds the record from these files: resuming would retrain nothing, and fails
    once prune_training_state removed the optimizer state."""
    from .rundir import read_metrics

    ev_path, metrics_path = Path(run_dir) / "eval.json", Path(run_dir) / "metrics.jsonl"
    try:
        if not (ev_path.is_file() and metrics_path.is_file()
                and ev_path.stat().st_mtime_ns >= metrics_path.stat().st_mtime_ns):
            return None
        ev = json.loads(ev_path.read_text())
        rows = read_metrics(metrics_path, upto_step=2**62)
    except (OSError, ValueError):
        return None
    if not rows or not isinstance(ev, dict) or any(k not in ev for k in EVAL_KEYS):
        return None
    return {"rows": rows, "eval": ev, "run_dir": str(run_dir), "eval_path": str(ev_path)}


def _resolved_name(name: str) -> str:
    local = Path(name).expanduser()
    return str(local.resolve()) if local.exists() else name


def check_run_dir(run_dir: Path, config: RunConfig) -> bool:
    """Whether `run_dir` holds a (half-finished) run to resume; refuses one started with another config.

    Raises: ConfigError naming the fields that differ (the base config or the grid changed since it started).
    """
    from .rundir import recorded_config, run_exists

    if not run_exists(run_dir):
        return False
    recorded = recorded_config(run_dir)
    if recorded is None:
        return True
    old, new = recorded.to_dict(), config.to_dict()
    old["model"]["name"], new["model"]["name"] = (_resolved_name(old["model"]["name"]),
                                                  _resolved_name(new["model"]["name"]))
    diff = [f"{s}.{k} ({old[s][k]!r} → {new[s].get(k)!r})" for s in old for k in old[s]
            if old[s][k] != new[s].get(k) and f"{s}.{k}" not in EXECUTION_FIELDS]
    if diff:
        raise ConfigError(f"{run_dir} holds a run started with another config ({'; '.join(diff[:3])}): the base "
                          "config or the grid changed since; remove that directory or pass another --runs-dir")
    return True


# ------------------------------------------------------------------------------------------------ the sweep
def run_sweep(base: RunConfig | str | Path, grid: dict[str, list] | Iterable[str], seeds: Iterable[int] | str,
              out: str | Path, runs_dir: str | Path | None = None, init: str | None = None,
              eval_games: str | Path | None = None, run: Callable[..., dict] | None = None, progress: bool = True,
              run_progress: bool = False, warn: Callable[[str], None] | None = None,
              dry_run: bool = False, tags: dict[str, Any] | None = None,
              extra_evals: dict[str, tuple[str, int | None]] | None = None,
              keep_training_state: bool = False) -> list[dict]:
    """Train and evaluate every cell × seed of `grid` and append one record per finished run to `out`.

    Args:
        base: the config every run starts from (a RunConfig or a YAML path).
        grid: {field: [values]} (parse_grid) or its specs ["reward.kind=sparse,dense", ...].
        seeds: train.seed values (each cell runs once per seed), e.g. [0, 1, 2] or "0,1,2".
        out: the results file (JSON lines, appended; e.g. results/NAME.jsonl).
        runs_dir: where the runs go, one dir per run: <cell-slug>-s<seed> (default runs/sweeps/<out's stem>).
        init: the model every run starts from (e.g. an SFT dir; sets model.name of the base).
        eval_games: held-out games dir (sets train.eval_games of the base; required there or here).
        run: the function that trains and evaluates one run, with run.run_rl's signature (default run_rl; tests pass
            a stub).
        progress: a tqdm bar of runs done / left with the time estimate; run_progress: each run's step lines too.
        warn: where one-line warnings go (default stderr).
        dry_run: check everything and list each run (recorded / resume / new) through `warn`, run nothing.
        tags: labels joined to every cell (plan_sweep), e.g. {"sft.demos": 12} for one point of an SFT:RL split.
        extra_evals: {name: (games dir, max_turns or None)}: after training, each run's policy is also evaluated
            on these sets (evaluate_extra), kept in the record's "evals" (metric 'evals.NAME.success_rate').
        keep_training_state: keep every checkpoint of a recorded run; by default only its newest policy (and value
            head) stay (checkpoint.prune_training_state: a full fine-tune of the embedded model leaves ~1.6 GB per
            checkpoint, which filled a 64 GB disk after ~30 runs).
    Returns:
        The records of every run of this sweep (found in `out` or written now), in plan order (dry_run: those found).
        A run whose dir shows it finished training and evaluation but which has no record (the sweep stopped while
        or before writing it) is recorded from its eval.json and metrics.jsonl (finished_run), not trained again.
    Raises:
        ConfigError: before anything runs, for a bad grid, seed or combination (one line naming it), no held-out
            games, or a run dir holding a run with another config.
        ResultsFileError: `out` has a line that is not a sweep record (other than a last line cut short), or a
            record could not be appended (e.g. a full disk; the same command records it later from its run dir).
        SweepInterrupted: Ctrl-C; its message says how many runs are recorded and to run the same command again.
        Whatever `run` raises (run_rl: DivergenceError, TooManyEnvErrors, ...): the records written so far stay.
    """
    from tqdm.auto import tqdm

    from .envs.base import load_game_set

    if run is None:
        from .run import run_rl as run
    warn = warn or _stderr
    base = base if isinstance(base, RunConfig) else RunConfig.load(base)
    if init:
        base = dataclasses.replace(base, model=dataclasses.replace(base.model, name=str(init)))
    if eval_games:
        base = dataclasses.replace(base, train=dataclasses.replace(base.train, eval_games=str(eval_games)))
    if not base.train.eval_games:
        raise ConfigError("a sweep evaluates every run on held-out games: pass --eval-games DIR (eval_games=) or set "
                          "train.eval_games in the base config")
    grid = grid if isinstance(grid, dict) else parse_grid(grid)
    seeds = parse_seeds(seeds)
    out = Path(out)
    runs_dir = Path(runs_dir) if runs_dir else Path("runs") / "sweeps" / out.stem
    plan = plan_sweep(base, grid, seeds, runs_dir, tags)
    extra_evals = dict(extra_evals or {})
    if any(not p.config.env.games for p in plan):
        raise ConfigError("no training games: set env.games in the base config (or make it a grid axis)")
    for games in sorted({p.config.env.games for p in plan} | {p.config.train.eval_games for p in plan}
                        | {games for games, _ in extra_evals.values()}):
        load_game_set(games)  # a missing games dir fails now, not after hours of other runs
    records = load_records(out, warn)
    done = {record_key(r): r for r in records}
    key = lambda p: (cell_key(p.cell), p.seed, base_key(p.config, p.cell))  # noqa: E731
    todo = [p for p in plan if key(p) not in done]
    n_cells = len(plan) // len(seeds)
    warn(f"sweep: {len(plan)} runs ({n_cells} cells × {len(seeds)} seeds), {len(plan) - len(todo)} already in {out}, "
         f"{len(todo)} to run in {runs_dir}/")
    if dry_run:
        for p in plan:
            status = ("recorded" if key(p) in done else
                      "resume" if check_run_dir(p.run_dir, p.config) else "new")
            warn(f"  {status:8s} {p.run_dir}")
        return [done[key(p)] for p in plan if key(p) in done]
    commit, machines = git_commit(), {}
    bar = tqdm(total=len(plan), initial=len(plan) - len(todo), desc="sweep", unit="run", disable=not progress,
               file=sys.stderr, dynamic_ncols=True)
    current, hf_bars = None, _quiet_hf_bars(not run_progress)
    try:
        for current in todo:
            bar.set_postfix_str(current.name)
            resume = check_run_dir(current.run_dir, current.config)
            started, t0 = datetime.now(timezone.utc), time.perf_counter()
            summary = finished_run(current.run_dir) if resume else None
            if summary is not None:  # trained and evaluated, but its record is missing or was cut short
                warn(f"sweep: {current.run_dir} finished training and evaluation but has no record; recording it from "
                     "its eval.json and metrics.jsonl")
            else:
                # model.name (the base's, --init's, or a grid axis's) is passed as run_rl's init, as `agentrl train
                # --init`
                summary = run(current.config, current.run_dir, init=current.config.model.name, resume=resume,
                              progress=run_progress)
            device = current.config.model.device
            if device not in machines:  # once per device: torch's view of this machine
                machines[device] = machine_info(device)
            machine = machines[device]
            evals = {name: evaluate_extra(current.run_dir, current.config, games, max_turns)
                     for name, (games, max_turns) in extra_evals.items()}
            rec = make_record(current, summary, base_key(current.config, current.cell), started,
                              datetime.now(timezone.utc),
                              time.perf_counter() - t0, commit, machine, resumed=resume, evals=evals)
            try:
                done[key(current)] = rec = append_record(out, rec)
            except OSError as e:  # e.g. a full disk: the run dir keeps what the next sweep records it from
                raise ResultsFileError(f"could not append the record of {current.run_dir} to {out} "
                                       f"({e.strerror or e}); its eval.json and metrics.jsonl are kept: free space, "
                                       "then run the same command again to record it") from e
            if not keep_training_state:
                prune_training_state(current.run_dir)
            bar.update(1)
            bar.set_postfix_str(f"{current.name}: eval success {rec['eval']['success_rate']:.2f}")
    except KeyboardInterrupt:
        recorded = sum(key(p) in done for p in plan)
        raise SweepInterrupted(f"interrupted during run {current.name if current else '?'}; {recorded} of "
                               f"{len(plan)} runs are recorded in {out}; run the same command again to resume "
                               "(recorded runs are skipped, the interrupted one resumes from its last checkpoint)"
                               ) from None
    finally:
        bar.close()
        if hf_bars:
            hf_bars()
    return [done[key(p)] for p in plan]


def _quiet_hf_bars(quiet: bool):
    """Hide transformers' per-load progress bars (weights, shards) under the sweep's bar; returns the function that
    shows them again, or None when nothing was changed."""
    if not quiet:
        return None
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:
        return None
    if not hf_logging.is_progress_bar_enabled():
        return None
    hf_logging.disable_progress_bar()
    return hf_logging.enable_progress_bar


# ------------------------------------------------------------------------------------------------ the report
def metric_value(record: dict, metric: str) -> float | None:
    """The number `metric` names in a record: a dotted path ('eval.success_rate', 'wall_seconds') or
    'final.KEY' (KEY of the last training step, e.g. final.success_rate). None when absent or null."""
    if metric.startswith("final."):
        steps = record.get("steps") or []
        value = steps[-1].get(metric[len("final."):]) if steps else None
    else:
        value = record
        for part in metric.split("."):
            value = value.get(part) if isinstance(value, dict) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _bootstrap(samples: tuple, statistic, confidence: float, n_resamples: int, seed: int) -> tuple[float, float] | None:
    import inspect

    import numpy as np
    from scipy.stats import bootstrap

    if any(len(s) < 2 for s in samples):
        return None
    if all(np.ptp(s) == 0 for s in samples):  # every resample gives the same statistic
        value = float(statistic(*(np.asarray(s)[None] for s in samples), axis=-1)[0])
        return value, value
    rng = np.random.default_rng(seed)
    kw = {"rng": rng} if "rng" in inspect.signature(bootstrap).parameters else {"random_state": rng}
    res = bootstrap(tuple(np.asarray(s, dtype=float) for s in samples), statistic, vectorized=True, paired=False,
                    confidence_level=confidence, n_resamples=n_resamples, method="percentile", **kw)
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def _mean(x, axis=-1):
    import numpy as np

    return np.mean(x, axis=axis)


def _mean_diff(x, y, axis=-1):
    import numpy as np

    return np.mean(x, axis=axis) - np.mean(y, axis=axis)


def bootstrap_mean_ci(values, confidence: float = 0.95, n_resamples: int = 9999, seed: int = 0):
    """Percentile-bootstrap interval of the mean of `values` (one per seed); None when fewer than 2."""
    return _bootstrap((list(values),), _mean, confidence, n_resamples, seed)


def bootstrap_diff_ci(a, b, confidence: float = 0.95, n_resamples: int = 9999, seed: int = 0):
    """Percentile-bootstrap interval of mean(a) − mean(b), a and b resampled independently (different runs); None
    when either has fewer than 2 values."""
    return _bootstrap((list(a), list(b)), _mean_diff, confidence, n_resamples, seed)


@dataclass
class Report:
    """What `report` computed: `cells` (one row per cell) and `differences` (one row per compared pair), each a
    dict; `markdown()` renders both as tables with a footer; a notebook displays it as Markdown."""

    metric: str
    axes: list[str]
    cells: list[dict] = field(default_factory=list)
    differences: list[dict] = field(default_factory=list)
    compare: str | None = None
    by: list[str] = field(default_factory=list)
    pooled: list[str] = field(default_factory=list)
    confidence: float = 0.95
    n_resamples: int = 9999
    seed: int = 0
    notes: list[str] = field(default_factory=list)

    def markdown(self) -> str:
        pct = f"{self.confidence:.0%}"
        head = self.axes + [f"{self.metric} (mean ± std)", f"{pct} CI of the mean", "seeds"]
        lines = _table(head, [[_fmt_cell(c["cell"].get(a)) for a in self.axes]
                              + [f"{_num(c['mean'])} ± {_num(c['std'])}", _ci(c["ci"]), str(c["n"])]
                              for c in self.cells])
        if self.compare:
            lines += ["", f"Differences of {self.metric} between values of {self.compare}"
                      + (f", within each {', '.join(self.by)}" if self.by else "")
                      + (f" (pooled over {', '.join(self.pooled)})" if self.pooled else "") + ":", ""]
            lines += _table(self.by + ["difference", "Δ mean", f"{pct} CI", "verdict"],
                            [[_fmt_cell(d["context"].get(a)) for a in self.by]
                             + [f"{d['a']} − {d['b']}", _num(d["diff"], signed=True), _ci(d["ci"], signed=True),
                                d["verdict"]] for d in self.differences])
        ns = sorted({c["n"] for c in self.cells})
        lines += ["", f"Intervals: {pct} percentile bootstrap over seeds (scipy.stats.bootstrap, {self.n_resamples} "
                      f"resamples, seed {self.seed}); a difference resamples the two cells' seeds independently. "
                      f"Seeds per cell: {', '.join(map(str, ns))}. With a handful of seeds a bootstrap interval is "
                      "narrow-biased: it only recombines the values seen and ignores the uncertainty of their spread"
                      + (" (with 3 seeds the 95% interval of a mean is exactly the range of the 3 values, which "
                         "holds the true mean only 75% of the time for a symmetric spread: 1 − 2·(1/2)³)"
                         if 3 in ns else "")
                      + f". Read \"{NO_DIFFERENCE}\" as: this sweep cannot tell; read a difference as provisional."]
        lines += [f"Note: {n}" for n in self.notes]
        return "\n".join(lines)

    def _repr_markdown_(self) -> str:
        return self.markdown()

    def __str__(self) -> str:
        return self.markdown()


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    esc = lambda s: str(s).replace("|", "\\|")  # noqa: E731
    return (["| " + " | ".join(map(esc, head)) + " |", "|" + "|".join(":--" for _ in head) + "|"]
            + ["| " + " | ".join(map(esc, r)) + " |" for r in rows])


def _fmt_cell(v: Any) -> str:
    return "—" if v is None else str(v)


def _num(x: float | None, signed: bool = False) -> str:
    if x is None:
        return "n/a"
    return f"{x:+.3f}" if signed else f"{x:.3f}"


def _ci(ci: tuple[float, float] | None, signed: bool = False) -> str:
    return "n/a (n < 2)" if ci is None else f"[{_num(ci[0], signed)}, {_num(ci[1], signed)}]"


def report(records: list[dict], metric: str = "eval.success_rate", compare: str | None = None,
           by: str | list[str] | None = None, confidence: float = 0.95, n_resamples: int = 9999,
           seed: int = 0) -> Report:
    """Per cell: mean ± std of `metric` over seeds, the number of seeds, and a bootstrap interval of the mean; with
    `compare` (an axis), for each pair of its values: the difference of means and its bootstrap interval, verdict
    "no difference at this scale" when the interval contains 0.

    The bootstrap is scipy.stats.bootstrap's percentile method (seeded: the same records give the same table), not
    BCa: with 2-5 seeds BCa's bias and acceleration corrections are estimated from 2-5 jackknife values and are
    noise, and BCa is undefined when the seeds agree (success 0.0 on every seed is common). A difference is
    bootstrapped with two independent samples (the cells' runs share nothing), statistic mean(a) − mean(b),
    vectorized. Fewer than 2 seeds: std and intervals are "n/a". Every interval from a handful of seeds is
    narrow-biased (see Report.markdown's footer).

    Args:
        records: sweep records (load_records); records of several base configs (record_base) are told apart by an
            extra axis `base`.
        metric: what to summarise (metric_value): 'eval.success_rate', 'eval.mean_turns', 'final.return_mean', ...
        compare: the axis whose values are differenced pairwise (in the order they first appear).
        by: axes (a list, or comma-separated) held fixed for the differences: pairs are formed within each of their
            combinations. Default: every other axis. Axes in neither are pooled (their runs are merged), as noted.
        confidence, n_resamples, seed: of the bootstrap.
    Raises:
        ValueError: no records, no record has the metric, or `compare` / `by` is not an axis of the records.
    """
    if not records:
        raise ValueError("no records to report")
    axes: list[str] = []
    for r in records:
        axes += [k for k in r["cell"] if k not in axes]
    hashes = list(dict.fromkeys(record_base(r) for r in records))
    notes = []
    cell_of = lambda r: {**r["cell"], **({"base": record_base(r)} if len(hashes) > 1 else {})}  # noqa: E731
    if len(hashes) > 1:
        axes.append("base")
        notes.append(f"the records come from {len(hashes)} base configs; column `base` is their hash")
    groups: dict[str, tuple[dict, list[float], list[int]]] = {}
    seen: set = set()
    missing = 0
    for r in records:
        k = record_key(r)
        if k in seen:
            notes.append(f"a second record of {cell_text(r['cell'])} seed {r['seed']} was ignored")
            continue
        seen.add(k)
        v = metric_value(r, metric)
        if v is None:
            missing += 1
            continue
        cell = cell_of(r)
        g = groups.setdefault(cell_key(cell), (cell, [], []))
        g[1].append(v)
        g[2].append(r["seed"])
    if not groups:
        raise ValueError(f"no record has the metric {metric!r} (e.g. eval.success_rate, final.return_mean)")
    if missing:
        notes.append(f"{missing} record(s) have no {metric} and were left out")
    import numpy as np

    rep = Report(metric, axes, confidence=confidence, n_resamples=n_resamples, seed=seed, notes=notes)
    for cell, values, seeds in groups.values():
        rep.cells.append({"cell": cell, "n": len(values), "mean": float(np.mean(values)),
                          "std": float(np.std(values, ddof=1)) if len(values) > 1 else None,
                          "ci": bootstrap_mean_ci(values, confidence, n_resamples, seed), "values": values,
                          "seeds": seeds})
    if compare is None:
        return rep
    by_list = [b.strip() for b in by.split(",")] if isinstance(by, str) else list(by or [])
    for name in [compare] + by_list:
        if name not in axes:
            raise ValueError(f"{name!r} is not an axis of these records (axes: {', '.join(axes) or 'none'})")
    if compare in by_list:
        raise ValueError(f"{compare!r} cannot be both compared and held fixed (--by)")
    by_list = by_list if by is not None else [a for a in axes if a != compare]
    rep.compare, rep.by, rep.pooled = compare, by_list, [a for a in axes if a != compare and a not in by_list]
    contexts: dict[str, tuple[dict, dict[str, tuple[Any, list[float]]]]] = {}
    for cell, values, _ in groups.values():
        ctx = {a: cell.get(a) for a in by_list}
        sides = contexts.setdefault(json.dumps(ctx, sort_keys=True, default=str), (ctx, {}))[1]
        sides.setdefault(json.dumps(cell.get(compare), default=str), (cell.get(compare), []))[1].extend(values)
    for ctx, sides in contexts.values():
        for (va, a), (vb, b) in itertools.combinations(sides.values(), 2):
            ci = bootstrap_diff_ci(a, b, confidence, n_resamples, seed)
            diff = float(np.mean(a) - np.mean(b))
            if ci is None:
                verdict = "n/a (n < 2)"
            elif ci[0] <= 0 <= ci[1]:
                verdict = NO_DIFFERENCE
            else:
                verdict = f"{va} higher" if diff > 0 else f"{vb} higher"
            rep.differences.append({"context": ctx, "a": va, "b": vb, "n_a": len(a), "n_b": len(b), "diff": diff,
                                    "ci": ci, "verdict": verdict})
    return rep
