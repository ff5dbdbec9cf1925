"""The sweep plans of `python results/regenerate.py PART`: configs/sweeps/PART.yaml, one file per part, and
configs/sweeps/games.yaml, the game sets the parts share; read and checked here, before anything runs.

A plan says what a sweep runs: its game sets, base config, cells, seeds, SFT candidates and step counts. How it runs
stays in experiments.regenerate: the rules that choose the RL start and the number of seeds, the job runner, the cost
model. One file per part because each part is run, resumed and reviewed on its own and writes its own results file
(each file's header names it); a value two parts share lives in one of them (or in games.yaml) and the other's header
says where.

Every file and every key is checked (PLAN_KEYS): a missing file, text that is not YAML, an unknown or missing key, a
value of the wrong type or a pilot cell that is not a cell of its sweep raises PlanError, whose message is one line
naming the file and the key (results/regenerate.py prints it as `regenerate.py: error: ...`, exit status 2).
"""
from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from experiments import ROOT

PLAN_DIR = ROOT / "configs" / "sweeps"
"""The folder of the plan files, beside the run configs (configs/*.yaml) they name."""


class PlanError(ValueError):
    """A sweep plan that cannot be used; the message is one line naming the file and the key to fix."""


class _Bad(ValueError):
    """A value of the wrong type or shape, named by its dotted key (load_plans adds the file)."""


Check = Callable[[Any, str], Any]
"""A value's check: (value, its dotted key) -> the value as regenerate uses it (seeds and candidates as tuples);
raises _Bad saying what the value must be."""


def _must(ok: bool, key: str, what: str, value: Any) -> None:
    if not ok:
        raise _Bad(f"{key} must be {what}, got {value!r}")


def integer(value: Any, key: str) -> int:
    """An int (not a bool)."""
    _must(isinstance(value, int) and not isinstance(value, bool), key, "an integer", value)
    return value


def number(value: Any, key: str) -> float:
    """A finite number, as a float. Text that reads as one is taken too: PyYAML (YAML 1.1) reads `6e-6` as text,
    its floats need a dot (`6.0e-6`)."""
    got = value
    if isinstance(value, str):
        try:
            got = float(value)
        except ValueError:
            pass
    _must(isinstance(got, (int, float)) and not isinstance(got, bool) and math.isfinite(got), key,
          "a number (e.g. 15, 0.7 or 6.0e-6)", value)
    return float(got)


def text(value: Any, key: str) -> str:
    """A non-empty string."""
    _must(isinstance(value, str) and value != "", key, "a non-empty string", value)
    return value


def config_file(value: Any, key: str) -> str:
    """A run config of this checkout, relative to it (e.g. configs/cooking.yaml): the file must exist."""
    _must(isinstance(value, str) and value != "" and (ROOT / value).is_file(), key,
          "a run config file of this checkout (e.g. configs/cooking.yaml)", value)
    return value


def list_of(check: Check, what: str, into: type = list, length: int | None = None) -> Check:
    """A non-empty list (of `length` items when given) whose items pass `check`, returned as `into` (list or tuple);
    `what` names it in errors."""

    def checked(value: Any, key: str):
        _must(isinstance(value, list) and len(value) > 0 and length in (None, len(value)), key, what, value)
        return into(check(v, f"{key}[{i}]") for i, v in enumerate(value))

    return checked


def pair(first: Check, second: Check, what: str) -> Check:
    """A two-item list [first, second], returned as a tuple."""

    def checked(value: Any, key: str):
        _must(isinstance(value, list) and len(value) == 2, key, what, value)
        return first(value[0], f"{key}[0]"), second(value[1], f"{key}[1]")

    return checked


def fields(**schema: Check) -> Check:
    """A mapping with exactly these keys, each checked; returned as a dict in the schema's order (the order
    regenerate writes them in, e.g. make-games flags)."""

    def checked(value: Any, key: str) -> dict:
        _must(isinstance(value, dict), key, f"a mapping of {list(schema)}", value)
        _known(value, schema, f" in {key}")
        return {k: check(value[k], f"{key}.{k}") for k, check in schema.items()}

    return checked


def mapping_of(check: Check, what: str) -> Check:
    """A non-empty mapping from names (strings) to values that pass `check`, in the file's order."""

    def checked(value: Any, key: str) -> dict:
        _must(isinstance(value, dict) and len(value) > 0 and all(isinstance(k, str) for k in value), key, what, value)
        return {name: check(v, f"{key}.{name}") for name, v in value.items()}

    return checked


def _known(value: dict, schema: dict, where: str = "") -> None:
    """Raise _Bad for unknown or missing keys of a mapping (the words of agentrl_lib.config's ConfigError)."""
    unknown = [k for k in value if k not in schema]
    if unknown:
        raise _Bad(f"unknown key(s) {sorted(map(str, unknown))}{where}; valid keys: {sorted(schema)}")
    missing = [k for k in schema if k not in value]
    if missing:
        raise _Bad(f"missing key(s) {missing}{where}; every plan key is required (valid keys: {sorted(schema)})")


SEEDS = list_of(integer, "a list of seeds (integers), e.g. [0, 1]", tuple)
INTS = list_of(integer, "a list of integers", tuple)
GRID = list_of(text, "a list of key=value strings (one `agentrl sweep --grid`), e.g. [algo=ppo, reward.kind=dense]")
CELLS = list_of(GRID, "a list of cells, each a list of key=value strings, e.g. [[algo=ppo, reward.kind=dense]]")
CANDIDATES = list_of(pair(integer, number, "[walkthroughs, learning rate], e.g. [64, 7.0e-6]"),
                     "a list of [walkthroughs, learning rate]", tuple)
GAME_SET = fields(n=integer, seed=integer)

PLAN_KEYS: dict[str, dict[str, Check]] = {
    "games": {
        "textworld": mapping_of(fields(**{"challenge": text, "challenge-args": text, "n": integer, "seed": integer}),
                                "a mapping of game set name: {challenge, challenge-args, n, seed}"),
        "balanced": mapping_of(fields(pool=text, per_place=integer), "a mapping of set name: {pool, per_place}"),
        "balanced_places": list_of(text, "a list of ingredient places, e.g. [fridge, counter]", tuple),
        "levels": mapping_of(list_of(integer, "[world size, objects, quest length]", tuple, length=3),
                             "a mapping of level name: [world size, objects, quest length]"),
        "level_sets": fields(train=GAME_SET, heldout=GAME_SET),
        "other": mapping_of(fields(family=text, n=integer, seed=integer),
                            "a mapping of game set name: {family, n, seed}"),
    },
    "behaviour": {"candidates": CANDIDATES},
    "probe": {"config": config_file, "grid": GRID, "seed": integer, "eval_games": text},
    "pilot": {"cells": CELLS, "seeds": SEEDS},
    "main": {"config": config_file, "cells": CELLS, "max_seeds": integer, "seeds_before_pilot": SEEDS},
    "explore": {"config": config_file, "cell": GRID, "max_turns": INTS, "steps": integer, "seeds": SEEDS,
                "eval_temperatures": list_of(number, "a list of temperatures, e.g. [0.0, 0.7]", tuple)},
    "split": {"config": config_file, "budget": integer, "units_per_demo": integer, "demos": INTS, "seeds": SEEDS,
              "games_per_step": integer, "hard_games": text, "hard_turns": integer},
    "complexity": {"config": config_file, "sft": fields(demos=integer, epochs=number), "seeds": SEEDS, "steps": integer,
                   "max_turns": integer},
    "evals": {"heldout_turns": integer},
    "stability": {"config": config_file, "sft_games": list_of(text, "a list of game set names", tuple),
                  "sft": fields(demos=integer, seed=integer), "seeds": SEEDS,
                  "sweeps": list_of(GRID, "a list of grids, each a list of key=value strings", tuple),
                  "last": GRID, "more": GRID, "long": GRID, "long_seed": integer},
    "swe": {"config": config_file, "packages": text, "levels": INTS,
            "train_games": fields(n=integer, seed=integer, level=integer),
            "heldout_games": fields(n=integer, seed=integer, split=text),
            "sft": fields(demos=integer, epochs=number, seed=integer), "seeds": SEEDS,
            "rewards": list_of(text, "a list of reward.kind values of swe games", tuple), "level_seeds": SEEDS},
    "balanced": {"config": config_file, "sft_candidates": CANDIDATES, "cells": CELLS, "pilot_seeds": SEEDS,
                 "max_seeds": integer, "later_cells": CELLS},
}
"""Each plan file (configs/sweeps/NAME.yaml) and its keys: every key is required, none other is allowed."""


def shown(path: Path) -> str:
    """`path` as an error names it: relative to the checkout when inside it."""
    try:
        return str(Path(path).resolve().relative_to(ROOT.resolve()))
    except ValueError:
        return str(path)


def load_plan(path: Path, keys: dict[str, Check]) -> dict[str, Any]:
    """One plan file, checked against `keys`. Raises PlanError (one line naming the file and the key)."""
    from agentrl_lib.config import load_yaml  # a yaml.SafeLoader that also refuses a key given twice

    path = Path(path)
    if not path.is_file():
        raise PlanError(f"sweep plan {shown(path)} does not exist: restore it (git checkout -- {shown(path)}) or "
                        f"write it (its keys: {sorted(keys)})")
    try:
        data = load_yaml(path.read_text())
    except (ValueError, yaml.YAMLError) as e:  # DuplicateKeyError, YAMLBoundError, UnicodeDecodeError: ValueErrors
        why = " ".join(str(e).split()).replace('in "<unicode string>", ', "")
        raise PlanError(f"sweep plan {shown(path)} is not valid YAML: {why}") from None
    if data is None:
        raise PlanError(f"sweep plan {shown(path)} is empty: write its keys {sorted(keys)} (git show HEAD:"
                        f"{shown(path)} prints the committed one)")
    try:
        _must(isinstance(data, dict), "the file", f"a mapping of the keys {sorted(keys)}", data)
        _known(data, keys)
        return {k: check(data[k], k) for k, check in keys.items()}
    except _Bad as e:
        raise PlanError(f"sweep plan {shown(path)}: {e}") from None


def load_plans(plan_dir: Path = PLAN_DIR) -> dict[str, dict[str, Any]]:
    """Every plan of PLAN_KEYS from `plan_dir`, checked, by part name ("games" for games.yaml), and checked against
    each other: the pilot's cells are cells of the main sweep, the balanced sweep's later cells are its cells (both
    pilots' runs are ordinary records of their sweep). Raises PlanError (one line naming the file and the key), also
    for a YAML file in `plan_dir` that is no part's plan."""
    plan_dir = Path(plan_dir)
    for path in sorted(plan_dir.glob("*.yaml")):
        if path.stem not in PLAN_KEYS:
            names = ", ".join(f"{p}.yaml" for p in PLAN_KEYS)
            raise PlanError(f"sweep plan {shown(path)} is no part's plan (the plans: {names}): rename it or move it "
                            f"out of {shown(plan_dir)}")
    plans = {name: load_plan(plan_dir / f"{name}.yaml", keys) for name, keys in PLAN_KEYS.items()}
    for part, key, sweep, of in [("pilot", "cells", "main", "cells"), ("balanced", "later_cells", "balanced", "cells")]:
        for i, cell in enumerate(plans[part][key]):
            if cell not in plans[sweep][of]:
                raise PlanError(f"sweep plan {shown(plan_dir / f'{part}.yaml')}: {key}[{i}] {cell} is not one of "
                                f"{shown(plan_dir / f'{sweep}.yaml')}'s {of}: its runs are records of that sweep")
    return plans
