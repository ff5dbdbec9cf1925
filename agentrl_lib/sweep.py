"""Sweeps: every cell of a grid of config values × every seed, trained and evaluated by `run.run_rl` (the function
behind `agentrl train`), one JSON record per finished run appended to a results file (agentrl_lib/records.py);
agentrl_lib/report.py turns the records into mean ± std over seeds with bootstrap intervals, per cell and per
difference between cells. This module: the grid (parse_grid, grid_cells, cell_config), the plan (plan_sweep) and the
running of a sweep (run_sweep, behind `agentrl sweep`).

    agentrl sweep --base configs/tw.yaml --grid algo.advantage=gae,grpo,rloo reward.kind=sparse,dense \\
        --seeds 0,1,2 --init runs/sft --eval-games games/heldout --out results/algo_reward.jsonl
    agentrl report results/algo_reward.jsonl --metric eval.success_rate --compare algo.advantage --by reward.kind

    records = run_sweep(RunConfig.load("configs/tw.yaml"), parse_grid(["reward.kind=sparse,dense"]), [0, 1, 2],
                        "results/reward.jsonl", eval_games="games/heldout")
    print(report.report(records, compare="reward.kind").markdown())          # agentrl_lib.report

A sweep survives being stopped (run the same command again): a run whose record is in the results file (same cell,
seed and base-config hash) is skipped; a run whose directory holds a half-finished run resumes from its checkpoint.

Introduced in the chapters' experiments (notebooks/02_reward, 03_policy, 04_sft_then_rl).
"""
from __future__ import annotations

import dataclasses
import difflib
import hashlib
import itertools
import re
import sys
import time
from dataclasses import dataclass, fields
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable

from .checkpoint import prune_training_state
from .config import ALGO_PRESETS, SECTIONS, SEED_MAX, ConfigError, RunConfig, parse_field
from .flags import choices_for
from .paths import git_commit
from .records import (
    EXECUTION_FIELDS,
    PRESET_AXIS,
    ResultsFileError,
    _stderr,
    append_record,
    base_key,
    cell_key,
    cell_text,
    finished_run,
    load_records,
    machine_info,
    make_record,
    record_key,
)


class SweepInterrupted(KeyboardInterrupt):
    """Ctrl-C during a sweep; str(e) is one line saying how far it got and that the same command resumes it."""


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
    """One grid value `text` for the field `key`, parsed with the field's type (config.parse_field: numbers from
    strings, integers refused for 2.5), booleans from true/false/yes/no/on/off/1/0, closed sets checked.

    Raises: ConfigError naming the axis and the value.
    """
    if key == PRESET_AXIS:
        if text not in ALGO_PRESETS:
            raise ConfigError(f"grid axis algo: {text!r} is not a preset; presets: {', '.join(ALGO_PRESETS)}")
        return text
    try:  # parse_field reads booleans too (config.parse_bool)
        value = parse_field(key, _field_default(key), text)
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


def cell_config(base: RunConfig, cell: dict[str, Any], seed: int) -> RunConfig:
    """`base` with the cell's values (a preset axis first, then the fields) and train.seed = seed, names looked up.

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
    from .parts import run_parts  # the registries import torch; the rest of sweep planning does not need it
    try:
        config = RunConfig.from_dict(data)
        run_parts(config)  # its registry names (e.g. grpo with algo.group_size 1): before anything runs
        return config
    except ConfigError as e:
        raise ConfigError(f"grid cell {cell_text(cell)} (seed {seed}): {e}") from None


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


def evaluate_extra(run_dir: Path, config: RunConfig, games: str, max_turns: int | None = None) -> dict:
    """Evaluate a finished run's policy (its newest checkpoint) on another game set `games`, as run_rl evaluates
    the held-out set (the run's env config and reward kind, eval temperature, tokens per turn, generator) with
    `max_turns` (default the run's env.max_turns; harder games may need more)."""
    from .envs.base import load_game_set
    from .evaluate import evaluate
    from .models import load_policy

    policy, tok = load_policy(str(run_dir), config.model.device, config.model.dtype)
    try:
        return evaluate(policy, tok, load_game_set(games), max_turns=max_turns or config.env.max_turns,
                        temperature=config.train.eval_temperature, max_new_tokens=config.train.max_new_tokens,
                        env=config.env, reward_kind=config.reward.kind, generator=config.model.generator,
                        progress=False)
    finally:
        del policy


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
            games, a reward.kind the games' family refuses (dense on swe), or a run dir holding another config.
        ResultsFileError: `out` has a line that is not a sweep record (other than a last line cut short), or a
            record could not be appended (e.g. a full disk; the same command records it later from its run dir).
        SweepInterrupted: Ctrl-C; its message says how many runs are recorded and to run the same command again.
        Whatever `run` raises (run_rl: DivergenceError, TooManyEnvErrors, ...): the records written so far stay.
    """
    from tqdm.auto import tqdm

    from .envs import get_family
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
    sets = {games: load_game_set(games)  # a missing games dir fails now, not after hours of other runs
            for games in sorted({p.config.env.games for p in plan} | {p.config.train.eval_games for p in plan}
                                | {games for games, _ in extra_evals.values()})}
    for p in plan:  # a reward kind the games' family refuses (dense on swe), before any run
        get_family(sets[p.config.env.games].family).check_reward(p.config.reward.kind, f"cell {cell_text(p.cell)}: ")
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
