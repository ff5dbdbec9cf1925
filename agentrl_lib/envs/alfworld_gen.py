"""Generate ALFWorld games offline (the official data, when on disk, is indexed by envs/alfworld_official.py).

ALFWorld (Shridhar et al. 2021, arXiv 2010.03768) builds each text game from an ALFRED trajectory: a PDDL problem
describing one AI2-THOR floor plan (receptacles, objects, where they are) plus a goal of one of six task types.
The ALFRED data is not on PyPI, so `make_alfworld_games` writes such problems itself from what alfworld ships:

- scenes: the 120 real floor plans in `alfworld/gen/layouts` (`FloorPlan*-objects.json`: object and receptacle types
  present; `-openable.json`: receptacle instances with their interaction poses);
- rules: `alfworld.gen.constants` (which receptacle type can hold which object type, which objects are
  cleanable/heatable/coolable/sliceable/toggleable, which receptacles open, which room types suit which task);
- goals: `alfworld.gen.goal_library` (the PDDL goal and the goal-text templates of each task type);
- engine: alfworld's PDDL domain and text grammar, played and checked by textworld's PddlEnv + fast-downward.

Every game is checked solvable by the planner (fast-downward, in a worker process cut at `plan_timeout_s`), and its
walkthrough is replayed to a win, before it is written. Kitchen problems are large (30-40 receptacles, ~60 objects):
the planner does not finish pick_two_obj_and_place there (not generated) and times out on ~10% of the other kitchen
candidates (skipped, logged), so which candidates survive can depend on machine speed near the budget.

Splits follow ALFRED's floor-plan partition (`alfworld.gen.constants.TRAIN_SCENE_NUMBERS` / `TEST_SCENE_NUMBERS`):
train and valid_seen use the 96 training floor plans, valid_unseen the 24 held-out ones (rooms 1-6 of each type).
train and valid_seen are made disjoint by game identity: a game's fingerprint (hash of its problem and goal) decides
its split (valid_seen iff fingerprint mod 8 == 0), so no game can be in both, whatever the seeds.

No notebook chapter yet: book/environments.md, section "ALFWorld offline", shows the commands.
"""
from __future__ import annotations

import hashlib
import json
import logging
import random
import shutil
import time
from collections import Counter
from pathlib import Path
from typing import Any, Iterable

from .alfworld_data import GAME_FILE, TASK_TYPES, TRAJ_FILE, prepare_alfworld
from .base import GameSetError, load_game_set, reuse_game_set, write_manifest
from .protocol import EnvFailure, GameRecord, GameSet

log = logging.getLogger(__name__)

GENERATOR_VERSION = "agentrl-alfworld-gen/1"
SPLITS = ("train", "valid_seen", "valid_unseen")
_SEEN_BUCKETS = 8  # 1 in 8 candidate games (by fingerprint) belongs to valid_seen, the rest to train
LOAD_FAILURES_BEFORE_STOP = 5
"""Candidates that fail to load for one and the same reason, before any game is made, after which generation stops
with that reason (a planner that finds no plan is a different outcome: those candidates are skipped)."""
_MAX_PLAN = 60  # ALFRED discards plans longer than its PLANNER_MAX_STEPS (100 low-level); ours are high-level
_LAMP_HOSTS = ("SideTable", "Desk", "Dresser", "Shelf", "CoffeeTable", "DiningTable", "TVStand", "CounterTop")
# fast-downward's optimal search (textworld's replan) does not finish pick_two_obj_and_place in kitchens (30-40
# receptacles, ~60 objects) within minutes: those are not generated
_PLANNER_TOO_SLOW = {"pick_two_obj_and_place": {"Kitchen"}}
_APPLIANCE = {"pick_clean_then_place_in_recep": "SinkBasin", "pick_heat_then_place_in_recep": "Microwave",
              "pick_cool_then_place_in_recep": "Fridge"}
_PROPERTY = {"pick_clean_then_place_in_recep": "Cleanable", "pick_heat_then_place_in_recep": "Heatable",
             "pick_cool_then_place_in_recep": "Coolable"}


class SceneLacksError(ValueError):
    """A floor plan lacks what a task type needs (no suitable object/receptacle pair)."""


def _constants():
    prepare_alfworld()
    import alfworld.gen.constants as C

    return C


def _layouts_dir() -> Path:
    return Path(_constants().__file__).parent / "layouts"


def floor_plans(split: str) -> list[int]:
    """Floor-plan numbers of a split: ALFRED's training scenes for train/valid_seen, its 24 test scenes (1-6, 201-206,
    301-306, 401-406) for valid_unseen. Raises ValueError for an unknown split."""
    if split not in SPLITS:
        raise ValueError(f"unknown ALFWorld split {split!r}; valid: {', '.join(SPLITS)}")
    C = _constants()
    numbers = C.TEST_SCENE_NUMBERS if split == "valid_unseen" else C.TRAIN_SCENE_NUMBERS
    lay = _layouts_dir()
    return sorted(n for n in numbers if (lay / f"FloorPlan{n}-objects.json").is_file())


def _room_type(number: int) -> str:
    for room, numbers in _constants().SCENE_TYPE.items():
        if number in numbers:
            return room
    raise ValueError(f"floor plan {number} has no room type")


def _mangle(name: str) -> str:
    """ALFRED's PDDL-safe ids (PlannedGameState.fix_pddl_str_chars): '|'→_bar_, '-'→_minus_, '+'→_plus_, ..."""
    for a, b in (("-", "_minus_"), ("|", "_bar_"), ("+", "_plus_"), (".", "_dot_"), (",", "_comma_")):
        name = name.replace(a, b)
    return name


def _coord_id(kind: str, rng: random.Random, suffix: str = "") -> str:
    x, y, z = (rng.uniform(-3, 3), rng.uniform(0, 2), rng.uniform(-3, 3))
    return f"{kind}|{x:+06.2f}|{y:+06.2f}|{z:+06.2f}" + (f"|{suffix}" if suffix else "")


class _Scene:
    """What one floor plan contains: receptacle instances (id, type, pose) and pickupable object types."""

    def __init__(self, number: int):
        C = _constants()
        lay = _layouts_dir()
        self.number, self.name, self.room = number, f"FloorPlan{number}", _room_type(number)
        present = set(json.loads((lay / f"{self.name}-objects.json").read_text()))
        openable = json.loads((lay / f"{self.name}-openable.json").read_text())
        static = set(C.RECEPTACLES) - set(C.MOVABLE_RECEPTACLES)
        held = set().union(*C.VAL_RECEPTACLE_OBJECTS.values())
        self.receptacles: list[tuple[str, str, tuple | None]] = []
        for rid, pose in sorted(openable.items()):
            parts = rid.split("|")
            rtype = parts[-1] if parts[-1].endswith("Basin") else parts[0]
            if rtype in static:
                self.receptacles.append((rid, rtype, tuple(pose)))
        # receptacle types the scene has but -openable.json lists no instance of (garbage cans, stove burners...):
        # one instance each, at a made-up position (the text game never shows positions)
        have = {t for _, t, _ in self.receptacles}
        self.synthesized = sorted((present & static) - have)
        self.object_types = sorted(t for t in present if t in held and t not in static and "Sliced" not in t)
        self.lamps = sorted(t for t in present if t in C.VAL_ACTION_OBJECTS["Toggleable"])

    def receptacle_types(self) -> set[str]:
        return {t for _, t, _ in self.receptacles} | set(self.synthesized)


def _can_contain(rtype: str, otype: str) -> bool:
    return otype in _constants().VAL_RECEPTACLE_OBJECTS.get(rtype, ())


def _task_candidates(scene: _Scene, task_type: str) -> list[tuple[str, str, str]]:
    """All (object_target, parent_target, toggle_target) the scene supports for a task type."""
    C = _constants()
    rtypes = scene.receptacle_types()
    if scene.room not in C.GOALS_VALID[task_type]:
        raise SceneLacksError(f"{scene.name} is a {scene.room}; {task_type} is only set in "
                              f"{sorted(C.GOALS_VALID[task_type])}")
    objects = [o for o in scene.object_types if any(_can_contain(r, o) for r in rtypes)]
    out: list[tuple[str, str, str]] = []
    if task_type == "look_at_obj_in_light":
        lamps = [lamp for lamp in scene.lamps if rtypes & set(_LAMP_HOSTS)]
        out = [(o, "", lamp) for o in objects for lamp in lamps]
        if not out:
            raise SceneLacksError(f"{scene.name} has no desk/floor lamp with a table to stand on, or no object")
        return out
    appliance = _APPLIANCE.get(task_type)
    if appliance and appliance not in rtypes:
        raise SceneLacksError(f"{scene.name} has no {appliance} for {task_type}")
    prop = _PROPERTY.get(task_type)
    for o in objects:
        if prop and o not in C.VAL_ACTION_OBJECTS[prop]:
            continue
        for r in sorted(rtypes):
            # the goal receptacle must be able to hold the target (else the planner reduces the goal to a dummy atom
            # and TextWorld fails with KeyError: 'val1'); the target must also fit somewhere that is not the goal
            if r == appliance or not _can_contain(r, o):
                continue
            if not any(_can_contain(r2, o) for r2 in rtypes if r2 not in (r, appliance)):
                continue
            out.append((o, r, ""))
    if not out:
        raise SceneLacksError(f"{scene.name} has no (object, receptacle) pair for {task_type}")
    return out


def _build_problem(scene: _Scene, task_type: str, target: str, parent: str, toggle: str,
                   rng: random.Random) -> tuple[str, str, dict[str, Any]]:
    """Sample object placement and write the PDDL problem. Returns (problem text without its name line, goal text,
    scene stats)."""
    C = _constants()
    from alfworld.gen import goal_library

    # receptacles: real instances + synthesized ones, each at its own location
    recs: list[tuple[str, str, str]] = []  # (id, type, location)
    used_locs: set[str] = set()

    def _loc(x: float, z: float, rot: int, hor: int) -> str:
        gx, gz = int(round(x / 0.25)), int(round(z / 0.25))
        rot = (int(rot) // 90) % 4
        loc = f"loc|{gx}|{gz}|{rot}|{hor}"
        while loc in used_locs:  # two receptacles reachable from one pose get distinct location ids
            hor += 1
            loc = f"loc|{gx}|{gz}|{rot}|{hor}"
        used_locs.add(loc)
        return loc

    for rid, rtype, pose in scene.receptacles:
        recs.append((rid, rtype, _loc(pose[0], pose[1], pose[2], int(pose[3]))))
    for rtype in scene.synthesized:
        base = {"SinkBasin": "Sink", "BathtubBasin": "Bathtub"}.get(rtype)
        rid = _coord_id(base, rng, rtype) if base else _coord_id(rtype, rng)
        recs.append((rid, rtype, _loc(rng.uniform(-3, 3), rng.uniform(-3, 3), 90 * rng.randrange(4), 30)))
    start = _loc(rng.uniform(-3, 3), rng.uniform(-3, 3), 90 * rng.randrange(4), 30)
    appliance = _APPLIANCE.get(task_type)

    # objects: 1-3 instances of every pickupable type (ALFRED's MAX_NUM_OF_OBJ_INSTANCES), in receptacles that can
    # hold them; the target never starts in a goal-type receptacle nor in the appliance of its task
    objs: list[tuple[str, str, str]] = []  # (id, type, receptacle id)
    for otype in scene.object_types:
        n = rng.randint(1, C.MAX_NUM_OF_OBJ_INSTANCES)
        hosts = [r for r in recs if _can_contain(r[1], otype)]
        if otype == target:
            n = max(n, 2) if task_type == "pick_two_obj_and_place" else n
            hosts = [r for r in hosts if r[1] not in (parent, appliance)]
        if not hosts:
            continue
        for _ in range(n):
            objs.append((_coord_id(otype, rng), otype, rng.choice(hosts)[0]))
    lamp_ids: list[tuple[str, str, str]] = []
    for lamp in scene.lamps:
        hosts = [r for r in recs if r[1] in _LAMP_HOSTS]
        if hosts:
            lamp_ids.append((_coord_id(lamp, rng), lamp, rng.choice(hosts)[0]))
    loc_of = {rid: loc for rid, _, loc in recs}
    m = _mangle

    otypes = sorted({t for _, t, _ in objs} | {t for _, t, _ in lamp_ids} | {target})
    rtypes = sorted({t for _, t, _ in recs})
    lines_obj = ["agent1 - agent"]
    lines_obj += [f"{t}Type - otype" for t in otypes] + [f"{t}Type - rtype" for t in rtypes]
    lines_obj += [f"{m(o)} - object" for o, _, _ in objs + lamp_ids]
    lines_obj += [f"{m(r)} - receptacle" for r, _, _ in recs]
    lines_obj += [f"{m(loc)} - location" for loc in sorted(used_locs)]
    init = ["(= (total-cost) 0)", f"(atLocation agent1 {m(start)})"]
    for rid, rtype, loc in recs:
        init += [f"(receptacleType {m(rid)} {rtype}Type)", f"(receptacleAtLocation {m(rid)} {m(loc)})"]
        if rtype in C.OPENABLE_CLASS_SET:
            init.append(f"(openable {m(rid)})")
    props = {"Cleanable": "cleanable", "Heatable": "heatable", "Coolable": "coolable", "Sliceable": "sliceable"}
    for oid, otype, rid in objs:
        init += [f"(objectType {m(oid)} {otype}Type)", f"(pickupable {m(oid)})", f"(inReceptacle {m(oid)} {m(rid)})",
                 f"(objectAtLocation {m(oid)} {m(loc_of[rid])})"]
        init += [f"({p} {m(oid)})" for k, p in props.items() if otype in C.VAL_ACTION_OBJECTS[k]]
        if otype in C.MOVABLE_RECEPTACLES_SET:
            init.append(f"(isReceptacleObject {m(oid)})")
        if rid.startswith("Fridge|") and otype in C.VAL_ACTION_OBJECTS["Coolable"]:
            init.append(f"(isCool {m(oid)})")  # as ALFRED: what starts in the fridge is cool
    for oid, otype, rid in lamp_ids:
        init += [f"(objectType {m(oid)} {otype}Type)", f"(toggleable {m(oid)})", f"(inReceptacle {m(oid)} {m(rid)})",
                 f"(objectAtLocation {m(oid)} {m(loc_of[rid])})"]
    init += [f"(canContain {r}Type {o}Type)" for r in rtypes for o in otypes if _can_contain(r, o)]
    # goal_library's goal text also closes the (define ...) block
    goal = goal_library.gdict[task_type]["pddl"].replace("#", "-").format(obj=target, recep=parent, toggle=toggle,
                                                                          mrecep="")
    problem = ("    (:domain alfred)\n    (:objects\n        " + "\n        ".join(lines_obj) + "\n    )\n"
               "    (:init\n        " + "\n        ".join(init) + "\n    )\n" + goal.strip("\n") + "\n")
    template = rng.choice(goal_library.gdict[task_type]["templates"])
    goal_text = template.format(obj=target.lower(), recep=parent.lower(), toggle=toggle.lower(), mrecep="")
    stats = {"n_objects": len(objs), "n_receptacles": len(recs), "synthesized_receptacles": list(scene.synthesized)}
    return problem, goal_text, stats


def _fingerprint(task_type: str, scene: str, problem: str, goal_text: str) -> str:
    return hashlib.sha1(json.dumps([task_type, scene, problem, goal_text]).encode()).hexdigest()


def _split_of_fingerprint(fp: str) -> str:
    return "valid_seen" if int(fp[:8], 16) % _SEEN_BUCKETS == 0 else "train"


def _base_logic() -> tuple[str, str]:
    prepare_alfworld()
    from alfworld.info import ALFRED_PDDL_PATH, ALFRED_TWL2_PATH

    return Path(ALFRED_PDDL_PATH).read_text(), Path(ALFRED_TWL2_PATH).read_text()


class CandidateLoadError(RuntimeError):
    """A written candidate game could not be loaded at all (not a planner outcome): every later candidate will most
    likely fail the same way (a path the worker cannot see, a broken install), so make_alfworld_games stops early."""


def _solve_and_check(folder: Path, pool) -> list[str]:
    """Plan with fast-downward from the initial state (in a worker process, so a search that blows up is cut at the
    pool's timeout) and play the plan in AlfWorldEnv up to the win; returns the walkthrough.
    Raises CandidateLoadError when the env raised on loading the game (kind 'error' at reset), RuntimeError with the
    reason when there is no plan in time or the plan does not win."""
    r = pool.reset([0], [str(folder)])[0]
    if isinstance(r, EnvFailure) and r.kind == "error":
        raise CandidateLoadError(r.reason)
    plan: list[str] = []
    while True:
        if isinstance(r, EnvFailure):
            raise RuntimeError(f"planner: {r.reason}")
        if r.info.won:
            return plan
        action = r.info.expert_action
        if action is None:
            raise RuntimeError("planner found no plan" if not plan else "plan ended before the goal")
        if action not in r.info.admissible:
            raise RuntimeError(f"plan step {len(plan)} {action!r} is not admissible")
        plan.append(action)
        if len(plan) > _MAX_PLAN:
            raise RuntimeError(f"plan longer than {_MAX_PLAN} steps")
        r = pool.step([0], [action])[0]


def _write_game(folder: Path, traj: dict, game: dict) -> None:
    tmp = folder.with_name(folder.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    (tmp / TRAJ_FILE).write_text(json.dumps(traj, indent=1))
    (tmp / GAME_FILE).write_text(json.dumps(game))
    if folder.exists():
        shutil.rmtree(folder)
    tmp.rename(folder)


def check_task_types(task_types: Iterable[str] | None) -> list[str]:
    """TASK_TYPES subset as a list (None = all six; a comma/space separated string is split).
    Raises: ValueError naming unknown task types."""
    if task_types is None:
        return list(TASK_TYPES)
    if isinstance(task_types, str):
        task_types = [t for t in task_types.replace(",", " ").split() if t]
    task_types = list(dict.fromkeys(task_types))
    unknown = [t for t in task_types if t not in TASK_TYPES]
    if unknown or not task_types:
        raise ValueError(f"unknown ALFWorld task type(s) {unknown or task_types}; valid: {', '.join(TASK_TYPES)}")
    return task_types


def make_alfworld_games(out: str | Path, n: int, seed: int = 0, split: str = "train",
                        task_types: Iterable[str] | None = None, force: bool = False,
                        progress: bool = True, plan_timeout_s: float = 20.0) -> GameSet:
    """Generate `n` ALFWorld games (folders with traj_data.json + game.tw-pddl, the official layout, loadable by
    alfworld's AlfredTWEnv and by `AlfWorldEnv`) into `out` and write manifest.json.

    Task types are balanced (the next game is of the type with the fewest games so far); each game's floor plan is
    drawn from the split's floor plans whose room type suits the task (alfworld.gen.constants.GOALS_VALID; no
    kitchens for pick_two_obj_and_place, which the planner cannot solve there in time). Objects
    get 1-3 instances per type present in the floor plan, placed in receptacles that can hold them. Every game is
    solved by fast-downward and its walkthrough replayed to a win before it is written; candidates that fail, or
    floor plans lacking what a task needs, are skipped with a logged reason (logger `agentrl_lib.envs.alfworld_gen`).
    Deterministic for (seed, split, task_types, n); a manifest with the same parameters in `out` is reused.

    Args:
        out: output directory (created).
        n: number of games (>= 1).
        seed: generation seed; game identities, not seeds, keep train and valid_seen disjoint.
        split: "train", "valid_seen" (same floor plans as train, other games) or "valid_unseen" (held-out floor
            plans).
        task_types: subset of TASK_TYPES (None = all six), as a list or a comma/space separated string.
        force: regenerate even if a matching manifest exists.
        progress: show a tqdm bar.
        plan_timeout_s: planner budget per game (seconds); candidates whose plan takes longer are skipped.
    Returns: the GameSet (params hold `games_per_task_type`, `games_per_floor_plan`, `skipped`,
        `generation_seconds`).
    Raises: ValueError for unknown task types/split or n < 1. GameSetError (a ValueError: one line in the CLI) when
        the first LOAD_FAILURES_BEFORE_STOP candidates could not even be loaded, for the same reason (quoted), or if
        n games could not be made within the attempt budget (e.g. a task type no floor plan of the split supports);
        RuntimeError when the planner's worker crashes 3 times in a row.
    """
    from tqdm.auto import tqdm

    if n < 1:
        raise ValueError(f"n must be >= 1 (got {n})")
    types = check_task_types(task_types)
    plans = floor_plans(split)
    request = {"n": n, "seed": seed, "split": split, "task_types": types, "generator": GENERATOR_VERSION}
    out = Path(out).expanduser().absolute()  # the planner's worker runs in its own working directory
    existing = reuse_game_set(out, "alfworld", request, force)
    if existing is not None:
        return existing
    if not force and (out / "manifest.json").is_file():
        try:
            for g in load_game_set(out).games:  # parameters changed: remove the old set's game folders
                shutil.rmtree(g.path, ignore_errors=True)
        except GameSetError:
            pass
    out.mkdir(parents=True, exist_ok=True)
    domain, grammar = _base_logic()
    C = _constants()
    scenes: dict[int, _Scene] = {}
    from .process_pool import ProcessPool

    pool = ProcessPool(1, family="alfworld", timeout_s=plan_timeout_s, start_timeout_s=15.0, expert="planner")
    records: list[GameRecord] = []
    per_type: Counter = Counter()
    per_plan: Counter = Counter()
    skipped: Counter = Counter()
    seen_fps: set[str] = set()
    t0 = time.time()
    bar = tqdm(total=n, desc=f"make alfworld {split} games", disable=not progress)
    max_attempts = 40 * n + 200
    crashes = 0
    attempt = 0
    load_failures: list[str] = []  # reasons of candidates that could not be loaded, while no game is made yet
    try:
        while len(records) < n:
            if attempt >= max_attempts:
                first = f"; the first failure: {load_failures[0]}" if load_failures else ""
                raise GameSetError(f"made only {len(records)}/{n} {split} games in {attempt} attempts "
                                   f"(skipped: {dict(skipped)}{first}); try other task_types or a smaller n")
            game_seed = int(hashlib.sha1(f"{GENERATOR_VERSION}/{split}/{seed}/{attempt}".encode()).hexdigest()[:12], 16)
            attempt += 1
            rng = random.Random(game_seed)
            task_type = min(types, key=lambda t: (per_type[t], types.index(t)))
            rooms = C.GOALS_VALID[task_type] - _PLANNER_TOO_SLOW.get(task_type, set())
            number = rng.choice([p for p in plans if _room_type(p) in rooms])
            scene = scenes.get(number) or scenes.setdefault(number, _Scene(number))
            try:
                target, parent, toggle = rng.choice(_task_candidates(scene, task_type))
            except SceneLacksError as e:
                log.info("skip candidate %d: %s", attempt - 1, e)
                skipped["scene lacks what the task needs"] += 1
                continue
            problem, goal_text, stats = _build_problem(scene, task_type, target, parent, toggle, rng)
            fp = _fingerprint(task_type, scene.name, problem, goal_text)
            if split != "valid_unseen" and _split_of_fingerprint(fp) != split:
                skipped["belongs to the other seen split"] += 1
                continue
            if fp in seen_fps:
                skipped["duplicate"] += 1
                continue
            mid = toggle or parent
            trial = f"trial_s{seed}_{attempt - 1:06d}_{fp[:8]}"
            folder = out / f"{task_type}-{target}-None-{mid}-{number}" / trial
            traj = {"task_type": task_type, "task_id": trial,
                    "pddl_params": {"object_target": target, "parent_target": parent, "toggle_target": toggle,
                                    "mrecep_target": "", "object_sliced": False},
                    "scene": {"floor_plan": scene.name, "scene_num": number, "random_seed": game_seed},
                    "turk_annotations": {"anns": [{"task_desc": goal_text[:1].upper() + goal_text[1:] + ".",
                                                   "high_descs": [], "assignment_id": "generated",
                                                   "votes": []}]},
                    "agentrl": {"generator": GENERATOR_VERSION, "split": split, "seed": seed,
                                "fingerprint": fp, **stats}}
            game = {"pddl_domain": domain, "grammar": grammar.replace("UNKNOWN GOAL", goal_text),
                    "pddl_problem": f"(define (problem plan_{trial})\n" + problem,
                    "solvable": None, "walkthrough": None}
            _write_game(folder, traj, game)
            try:
                walkthrough = _solve_and_check(folder, pool)
            except Exception as e:  # planner/engine failures: skip this candidate
                shutil.rmtree(folder, ignore_errors=True)
                if isinstance(e, CandidateLoadError) and not records:
                    load_failures.append(str(e).replace(str(folder), "<game>"))
                    if (len(load_failures) >= LOAD_FAILURES_BEFORE_STOP
                            and len(set(load_failures)) == 1):
                        raise GameSetError(f"ALFWorld generation stopped: the first {len(load_failures)} candidate "
                                           f"games all failed to load the same way, not in the planner: "
                                           f"{load_failures[0]} (e.g. {folder})") from e
                crashes = crashes + 1 if "worker crashed" in str(e) else 0
                if crashes >= 3:
                    raise RuntimeError(f"the planner worker process crashed 3 times in a row ({e}); run "
                                       "`AlfWorldEnv().reset(game_folder)` in-process to see why") from e
                log.warning("skip candidate %d (%s in %s): unsolvable: %s: %s", attempt - 1, task_type, scene.name,
                            type(e).__name__, e)
                skipped["unsolvable"] += 1
                continue
            game["solvable"], game["walkthrough"] = True, walkthrough
            (folder / GAME_FILE).write_text(json.dumps(game))
            seen_fps.add(fp)
            per_type[task_type] += 1
            per_plan[scene.name] += 1
            records.append(GameRecord(
                path=str(folder), name=f"{folder.parent.name}/{folder.name}", seed=game_seed, max_score=1.0,
                walkthrough=walkthrough,
                params={"task_type": task_type, "floor_plan": scene.name, "split": split, "fingerprint": fp[:16],
                        "object_target": target, "parent_target": parent, "toggle_target": toggle,
                        "goal": goal_text, "walkthrough_len": len(walkthrough)}))
            bar.update(1)
    finally:
        bar.close()
        pool.close()
    params = dict(request, games_per_task_type=dict(sorted(per_type.items())),
                  games_per_floor_plan=dict(sorted(per_plan.items())), skipped=dict(skipped),
                  attempts=attempt, generation_seconds=round(time.time() - t0, 1))
    write_manifest(out, "alfworld", records, params)
    return load_game_set(out)
