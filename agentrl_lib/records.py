"""Sweep records: what one finished run of a sweep leaves in a results file (one JSON line), how a record is
identified (its cell, seed and base config), and the results file itself (read, appended under a lock).

    records = load_results("algo_reward")                # results/algo_reward.jsonl ([] while not committed)
    done = {record_key(r) for r in load_records("results/reward.jsonl")}

A crash can only cut the last line of a results file short: every record is appended as one write of the whole line
(append_record); load_records ignores such a line with a warning and refuses any other damaged line. The numbers of
the records are summarised by agentrl_lib/report.py; agentrl_lib/sweep.py writes them.

Introduced in the chapters' experiments (notebooks/02_reward, 03_policy, 04_sft_then_rl).
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import math
import os
import platform
import sys
from datetime import datetime
from pathlib import Path
from typing import Any, Callable

from .config import ALGO_PRESETS, SECTIONS, RunConfig, fold_swe_reward
from .fsio import atomic_write_text
from .rundir import read_metrics

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
               "wall_seconds", "train_seconds", "resumed", "run_dir", "steps", "eval", "evals", "precision", "adamw",
               "generator")
"""The keys of every record (one JSON line of a results file). wall_seconds: this call of the run function (training
that resumed after a stop + evaluation); train_seconds: Σ step_seconds over every training step, also those before a
stop (the compute a run cost); resumed: whether it continued a half-finished run (or was recorded from a finished
run's dir, finished_run); evals: {name: eval} of the extra game sets (run_sweep's extra_evals, e.g. harder games), {}
without them; precision: 'fp32' or 'bf16-autocast' (Trainer.precision), adamw: 'fused' / 'foreach' / 'plain'
(update.adamw), generator: the rollout backend's class — what ran; a record rebuilt from a finished run's dir derives
its precision from the config (precision.run_precision) and has None for the other two (records before 2026-11-28 lack
the three keys)."""
SIGNIFICANT_DIGITS = 5
"""Floats in "steps" are rounded to this many significant digits (keeps a results file at kilobytes)."""
RESULTS_DIR = Path(__file__).resolve().parent.parent / "results"
"""The checkout's results/ (beside agentrl_lib/): where load_results finds a results file by name."""
EXECUTION_FIELDS = ("train.max_tokens_per_microbatch", "train.gradient_checkpointing", "train.report_to")
"""Config fields that change how a run is computed or reported, not what it computes (peak memory, the same update up
to float rounding, tests/test_update.py; TensorBoard files): base_key leaves them out and a half-finished run may
resume with them changed, so a machine with less memory can finish a sweep begun on another."""


SAME_DRAWS = {"model.generator": {"hf-live": "hf"}}
"""Config values that compute the same run: LiveRowsGenerator ('hf-live') draws the very tokens transformers'
`generate` ('hf') draws, up to float rounding (tests/test_generation_live.py, bench_sweep_step.py's exactness check),
so base_key counts them as one value: records made with 'hf' before 'hf-live' became the default stay done."""


FOLDED_AXES = {"env.swe_reward": "reward.kind"}
"""Cell keys of records made before a setting was folded into another → the key that holds it now (upgrade_record):
swe games' second reward selector, env.swe_reward, is reward.kind (config.fold_swe_reward)."""


def upgrade_record(record: dict) -> dict:
    """A sweep record as the library reads it now: its cell's FOLDED_AXES keys renamed and its config folded
    (config.fold_swe_reward), so a record of results/swe.jsonl made with `env.swe_reward=pass_ratio` (and
    reward.kind env) is the cell `reward.kind=pass_ratio` of the same base config, and chapters and findings read
    the same runs under the one selector. Returns `record` itself when there is nothing to upgrade, else a copy."""
    cell, config = record.get("cell"), record.get("config")
    folded = fold_swe_reward(config) if isinstance(config, dict) else config
    if folded is config and not (isinstance(cell, dict) and set(cell) & set(FOLDED_AXES)):
        return record
    cell = {FOLDED_AXES.get(k, k): v for k, v in cell.items()} if isinstance(cell, dict) else cell
    return {**record, "cell": cell, "config": folded}


class ResultsFileError(ValueError):
    """A results file has a damaged line other than the last (the last one is a write cut short: ignored)."""


# ------------------------------------------------------------------------------------------------ identity
def cell_text(cell: dict[str, Any]) -> str:
    """'algo.advantage=gae reward.kind=sparse' ('base' for the empty cell)."""
    return " ".join(f"{k}={v}" for k, v in cell.items()) or "base"


def cell_key(cell: dict[str, Any]) -> str:
    """The cell as canonical JSON (sorted keys): what records are matched on, with the seed and the base hash."""
    return json.dumps(cell, sort_keys=True)


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
    same = lambda key, v: SAME_DRAWS.get(key, {}).get(v, v)  # noqa: E731
    kept = {f"{sec}.{k}": v for sec, vals in data.items() for k, v in vals.items()
            if f"{sec}.{k}" not in skip and same(f"{sec}.{k}", v) != same(f"{sec}.{k}", defaults[sec][k])}
    return hashlib.sha256(json.dumps(kept, sort_keys=True).encode()).hexdigest()[:12]


def record_base(record: dict) -> str:
    """The base_key of a record, from its stored config and cell (its stored `base_hash` when it has no config,
    e.g. a hand-made record)."""
    if isinstance(record.get("config"), dict):
        return base_key(record["config"], record["cell"])
    return record["base_hash"]


def record_base_without_start(record: dict) -> str:
    """record_base leaving out model.name, the model the run started from: equal for the runs of one sweep that
    start each seed from its own SFT model (regenerate.py's split and complexity parts), so a report counts them as
    one cell's seeds (report.report)."""
    config = record.get("config")
    if isinstance(config, dict) and isinstance(config.get("model"), dict):
        config = {**config, "model": {k: v for k, v in config["model"].items() if k != "name"}}
        return base_key(config, record["cell"])
    return record_base(record)


def record_key(record: dict) -> tuple[str, int, str]:
    """(cell as canonical JSON, seed, base key): a run is done when a record with this key exists (record_base:
    computed from the record's config, so records stay valid when the library gains config fields)."""
    return cell_key(record["cell"]), int(record["seed"]), record_base(record)


# ------------------------------------------------------------------------------------------------ the results file
def results_path(name_or_path: str | Path) -> Path:
    """A results file: a bare name ('algo_reward' or 'algo_reward.jsonl', no directory) is results/NAME.jsonl of
    this checkout (RESULTS_DIR); a Path or a string with a directory is taken as it is."""
    if isinstance(name_or_path, str) and "/" not in name_or_path and os.sep not in name_or_path:
        return RESULTS_DIR / (name_or_path if name_or_path.endswith(".jsonl") else f"{name_or_path}.jsonl")
    return Path(name_or_path)


def load_results(name_or_path: str | Path, warn: Callable[[str], None] | None = None) -> list[dict]:
    """The lines of a results file (results_path: a bare name is looked up in results/), [] while it does not
    exist (a sweep not run or not committed yet): the notebooks' and results/findings.py's one way to read one.

    A sweep's results file (its first line a sweep record) is read by load_records (a cut last line ignored with a
    warning, any other line that is not a sweep record refused); any other file of JSON objects, one a line
    (results/stage_evals.jsonl: evaluations of models without RL), is read line by line with the same tolerance
    of a cut last line.

    Raises: ResultsFileError naming the file and line.
    """
    path = results_path(name_or_path)
    if not path.exists():
        return []
    first = path.read_bytes().split(b"\n", 1)[0]
    try:
        sweep_file = _is_record(json.loads(first))
    except (ValueError, RecursionError):
        sweep_file = True  # a damaged first line: load_records says which line and why
    return load_records(path, warn) if sweep_file else _read_lines(path, "a JSON object", _is_object, warn)


def load_records(path: str | Path, warn: Callable[[str], None] | None = None) -> list[dict]:
    """The records of a results file, in file order ([] when it does not exist).

    A damaged last line that does not end in a newline (a write cut short by a crash or a full disk) is ignored,
    with one line to `warn` (default: stderr); the next sweep records its run again (run_sweep rebuilds the record
    from the run dir when the run had finished). Any other line that is not a sweep record — also a whole last line,
    e.g. a benchmark's result in a file named like a sweep's — is refused: nothing in the sweep writes one, so the
    file was changed by hand or belongs to another program, and a sweep must not append to it.

    Records made before a setting was folded into another are read as records of the setting that holds it now
    (upgrade_record: e.g. env.swe_reward → reward.kind).

    Raises: ResultsFileError naming the file and line.
    """
    return [upgrade_record(r) for r in _read_lines(Path(path), "a sweep record", _is_record, warn)]


def unique_records(records: list[dict], source: str = "", warn: Callable[[str], None] | None = None) -> list[dict]:
    """`records` with each run once, the first kept: a sweep record by its run's identity (record_key: cell, seed and
    base config), any other line by its whole content. A results file appended twice, or two files joined, would
    otherwise count a run twice in every mean and interval (issue 52); each repeat found is said in one line to
    `warn` (default: stderr) naming `source`."""
    seen: set = set()
    out = []
    for rec in records:
        key = record_key(rec) if _is_record(rec) else json.dumps(rec, sort_keys=True)
        if key in seen:
            continue
        seen.add(key)
        out.append(rec)
    if len(out) < len(records):
        (warn or _stderr)(f"{source or 'results'}: {len(records) - len(out)} record(s) repeat a run already recorded "
                          "(same cell, seed and base config); each run counted once")
    return out


def _is_record(rec: Any) -> bool:
    return isinstance(rec, dict) and all(k in rec for k in ("cell", "seed", "base_hash"))


def _is_object(rec: Any) -> bool:
    return isinstance(rec, dict)


def _read_lines(path: Path, what: str, accept: Callable[[Any], bool], warn: Callable[[str], None] | None) -> list:
    """The JSON lines of `path` that `accept` takes, a cut last line ignored with a warning (load_records)."""
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
            if not accept(rec):
                raise ValueError(f"not {what}")
        except (ValueError, RecursionError) as e:  # JSONDecodeError, UnicodeDecodeError; a line nested too deep
            if i < len(lines) or data.endswith(b"\n"):
                raise ResultsFileError(f"{path} line {i} is not {what} ({str(e)[:60]}); only a last line "
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
CPU_FEATURES = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")
"""The /proc/cpuinfo flags a record keeps (machine_info's cpu_features): AVX2-only, AVX-512 and AMX CPUs of one
machine kind compute at different speeds, and bf16 is emulated without avx512_bf16 / amx_bf16."""
VERSIONED = ("transformers", "trl", "peft", "accelerate", "textworld", "numpy")
"""The packages whose versions a record keeps beside torch's (machine_info's versions)."""


def package_versions(names: tuple[str, ...] = VERSIONED) -> dict[str, str | None]:
    """{package: installed version, or None} from the installed distributions' metadata (importlib.metadata: no
    import of the package itself)."""
    from importlib.metadata import PackageNotFoundError, version

    out: dict[str, str | None] = {}
    for name in names:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return out


def machine_info(device: str = "auto") -> dict[str, Any]:
    """platform, python, cpu_count, cpu (the CPU model, /proc/cpuinfo), cpu_features (which of CPU_FEATURES its
    flags have: the instructions that change torch's speed and bf16 numerics), torch version, torch_threads (the
    intra-op threads a run computes with: OMP_NUM_THREADS, which `regenerate.py --jobs J` sets to cores // J),
    torch_device (model.device resolved on this machine), gpu (the CUDA device name, or None) and versions (of
    VERSIONED packages: transformers, trl, peft, ... ; None for one not installed). Records written before
    cpu_features and versions existed lack them (book/findings.md says which)."""
    info: dict[str, Any] = {"platform": platform.platform(), "python": platform.python_version(),
                            "cpu_count": os.cpu_count(), "cpu": None, "cpu_features": None, "torch": None,
                            "torch_threads": None, "torch_device": None, "gpu": None, "versions": package_versions()}
    try:
        import torch

        from .hardware import cpu_flags, cpu_model, pick_device

        dev = pick_device(device)
        flags = cpu_flags()
        info.update(torch=torch.__version__, torch_threads=torch.get_num_threads(), torch_device=str(dev),
                    cpu=cpu_model() or platform.processor() or None,
                    cpu_features=None if flags is None else [f for f in CPU_FEATURES if f in flags])
        if torch.cuda.is_available():
            info["gpu"] = torch.cuda.get_device_name(dev if dev.type == "cuda" else 0)
    except Exception as e:  # a record is still worth writing without it
        info["torch_device"] = f"unknown ({type(e).__name__})"
    return info


def make_record(run, summary: dict, base_hash: str, started: datetime, finished: datetime, wall_seconds: float,
                commit: str, machine: dict, resumed: bool = False, evals: dict[str, dict] | None = None) -> dict:
    """The record of one finished run (RECORD_KEYS); `run` is its sweep.PlannedRun (cell, seed, config, run_dir).
    "steps" keeps STEP_KEYS of each metrics row of `summary` (run_rl's), "eval" (and each of `evals`, {name:
    evaluate() result}) keeps EVAL_KEYS and per_game [[game, won, turns], ...]."""
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
        "precision": summary.get("precision") or _precision_of(run.config, machine),
        "adamw": summary.get("adamw"), "generator": summary.get("generator"),
    }


def _precision_of(config: RunConfig, machine: dict) -> str:
    """The precision a run trained in, from its config and device (precision.run_precision): for a record rebuilt from a
    finished run's dir (finished_run), whose summary does not say."""
    from .precision import run_precision  # torch: only for this rebuild, not for reading results

    return run_precision(config.model.dtype, config.train.mixed_precision, machine.get("torch_device") or "cpu")


def compact_eval(ev: dict) -> dict:
    """An evaluate() result as kept in a record: EVAL_KEYS and per_game [[game, won, turns], ...]."""
    return {**{k: _round(ev.get(k)) for k in EVAL_KEYS},
            "per_game": [[g["game"], bool(g["won"]), g["turns"]] for g in ev.get("per_game", [])]}


def take_places(walkthrough: list[str]) -> list[str]:
    """PLACE of each `take X from PLACE` of a cooking game's walkthrough, in order: one per ingredient that is not
    in the inventory already (e.g. ["fridge"] for a one-ingredient game whose ingredient is in the fridge)."""
    return [c.rsplit(" from ", 1)[1] for c in walkthrough if c.startswith("take ") and " from " in c]


def ingredient_places(evaluations: list[dict]) -> dict[str, str]:
    """Where each one-ingredient cooking game keeps its ingredient: {game: PLACE} from the walkthrough's first
    `take X from PLACE` (take_places; e.g. "fridge", "counter"), read from evaluation records whose eval["episodes"]
    store each game's walkthrough (results/exploration_evals.jsonl: the cooking held-out games). The walkthrough is
    the game's, not the policy's, so every record of a game gives the same place; a game whose walkthrough takes
    nothing from a place (another family) is left out. Used to ask which games a greedy policy wins: chapter 01 §5b
    found runs that learned `take X from fridge` and win exactly the fridge games (chapters 01, 03 and 04 count them).

    evaluations: records with r["eval"]["episodes"] = [{"game": str, "walkthrough": [str, ...], ...}, ...];
    records or episodes without them are skipped, so [] gives {}.
    """
    places: dict[str, str] = {}
    for record in evaluations:
        for episode in (record.get("eval") or {}).get("episodes") or []:
            take = take_places(episode.get("walkthrough") or [])
            if take:
                places.setdefault(episode["game"], take[0])
    return places


def finished_run(run_dir: Path) -> dict | None:
    """The summary (run_rl's "rows" and "eval") of a run that finished training and its held-out evaluation — an
    eval.json written after the last metrics row — or None. A sweep stopped after that point (its record cut short,
    or killed before writing it) rebuilds the record from these files: resuming would retrain nothing, and fails
    once prune_training_state removed the optimizer state."""
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
