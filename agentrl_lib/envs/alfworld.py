"""ALFWorld (Shridhar et al. 2021, arXiv 2010.03768): household tasks as text games, played with ALFWorld's own
TextWorld-PDDL engine (textworld.envs.PddlEnv + fast-downward, alfworld's domain and text grammar).

A game is a folder holding `traj_data.json` (task type, pddl_params) and `game.tw-pddl` (JSON: pddl_domain,
grammar with the goal text, pddl_problem, solvable, walkthrough), the layout of the official `alfworld-download`
data and of `agentrl_lib.envs.alfworld_gen.make_alfworld_games` (those names, the task types and the ALFWORLD_DATA
helpers are in envs/alfworld_data.py, which the generator and the index import instead of this module).

Speed: the stock env re-parses its text grammar on every step (each admissible command is re-derived from its
template, ~85% of step time). `AlfWorldEnv` runs the same engine objects but caches what does not change: parsed
grammar expansions and queries and the PDDL→SAS translation of a game (envs/alfworld_engine.py), each operator's
command text and the expert plan while the agent follows it (here). Rules and text stay the engine's.
Games: `make_alfworld_games` (envs/alfworld_gen.py) generates them offline; `load_official_games`
(envs/alfworld_official.py) indexes the official data.

No notebook chapter yet: book/environments.md, section "ALFWorld offline", shows the commands.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from . import EnvFamily, register_family
from .alfworld_data import (  # TASK_TYPES, prepare_alfworld: re-exported, chapter 01 and tests import them here
    GAME_FILE,
    TASK_TYPES,  # noqa: F401
    TRAJ_FILE,
    prepare_alfworld,
)
from .alfworld_engine import engine_caches, game_logic
from .base import GameLoadError, normalize_action
from .protocol import StepInfo, StepResult

SYSTEM_PROMPT = (
    "You are an agent in a household, described in text. Each turn you read what you see and reply with exactly "
    "one short command, such as: go to countertop 1, open fridge 1, take apple 1 from countertop 1, "
    "move apple 1 to diningtable 1, heat apple 1 with microwave 1, cool apple 1 with fridge 1, "
    "clean apple 1 with sinkbasin 1, use desklamp 1, examine drawer 2, inventory, look. "
    "Reply with the command only.")
"""System prompt for ALFWorld games (the examples are ALFWorld's command forms)."""

_CHECK_ONLY_OPS = {"look", "inventory", "examinereceptacle", "examineobject", "help"}  # effects: `checked` only
_BANNER = re.compile(r"^\s*-= Welcome to TextWorld, ALFRED! =-\s*")
_TASK = re.compile(r"Your task is to:\s*(.+?)\s*$", re.S)


def clean_observation(text: str) -> str:
    """Drop TextWorld's welcome banner; keep ALFWorld's text ("You are in the middle of a room..." and
    "Your task is to: ...")."""
    text = _BANNER.sub("", text)
    return re.sub(r"\n{3,}", "\n\n", text).strip()


def read_game(folder: str | Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """Read a game folder → (traj_data, game data of game.tw-pddl). Also accepts the path of the game.tw-pddl file.

    Raises:
        GameLoadError: missing folder/files, invalid JSON, or keys the engine needs are absent.
    """
    folder = Path(folder)
    if folder.is_file() and folder.name == GAME_FILE:
        folder = folder.parent
    if not folder.is_dir():
        raise GameLoadError(f"ALFWorld game folder {folder} does not exist")
    hint = "the folder is corrupted or not an ALFWorld game; regenerate it (make_alfworld_games) or re-download it"
    try:
        data = json.loads((folder / GAME_FILE).read_text())
        traj = json.loads((folder / TRAJ_FILE).read_text()) if (folder / TRAJ_FILE).is_file() else {}
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise GameLoadError(f"cannot read ALFWorld game {folder}: {type(e).__name__}: {e}; {hint}") from e
    missing = [k for k in ("pddl_domain", "grammar", "pddl_problem") if not isinstance(data, dict) or k not in data]
    if missing:
        raise GameLoadError(f"{folder / GAME_FILE} lacks {missing}; {hint}")
    return traj, data


def game_files(path: str) -> list[Path]:
    """The files an ALFWorld game needs: its folder's game.tw-pddl (traj_data.json is read when present).

    Raises: GameLoadError when `path` is a file other than game.tw-pddl (a TextWorld story file? then the
    manifest's family is wrong)."""
    p = Path(path)
    if p.is_file() and p.name != GAME_FILE:
        raise GameLoadError(f"{path} is a file, not an ALFWorld game folder: is the family in manifest.json right "
                            "(TextWorld games are .z8/.ulx files)?")
    return [p] if p.name == GAME_FILE else [p / GAME_FILE]


# ---------------------------------------------------------------------------------------------------------------- env
_FREE_LIBS: list = []
"""fast-downward libraries no AlfWorldEnv of this process holds; each is used by one env at a time."""


class AlfWorldEnv:
    """One ALFWorld game at a time behind the env protocol (see envs/protocol.py), on alfworld's TextWorld-PDDL engine.

    Args:
        expert: how `info.expert_action` (next command of a shortest winning plan) is computed:
            "walkthrough" (default): the game's stored walkthrough (planned at reset when the game has none) while
            the agent follows it; the plan is also kept after looks/examines/inventory, commands that change
            nothing, and a "go to" elsewhere when the plan's next step is a "go to". After any other deviation
            expert_action is None. Steps never plan (~1 ms).
            "planner" (or True): same, but after a deviation fast-downward replans from the current state
            (textworld's `policy_commands`): 1-100 ms in small rooms, seconds to minutes in kitchens with many
            objects (pick_two_obj_and_place there can exceed 10 minutes).
            "none" (or False): expert_action is always None.
    `reward` is 1 on the winning step, else 0 (ALFWorld's score is 1 only when won); `max_score` is 1.
    Observation text is ALFWorld's (banner removed). `info.objective` is the task text ("put some apple on
    countertop."). Commands are matched after lower-casing and collapsing spaces; an unknown command answers
    "Nothing happens." as in ALFWorld.
    """

    def __init__(self, expert: str | bool = "walkthrough"):
        prepare_alfworld()
        expert = {True: "planner", False: "none", None: "none"}.get(expert, expert)  # type: ignore[arg-type]
        if expert not in ("walkthrough", "planner", "none"):
            raise ValueError(f"expert must be 'walkthrough', 'planner' or 'none' (got {expert!r})")
        try:
            import fast_downward  # noqa: F401
            from textworld.envs.pddl.pddl import PddlEnv  # noqa: F401
        except ImportError as e:  # pragma: no cover - depends on the install
            raise ImportError("AlfWorldEnv needs alfworld and textworld[pddl]: "
                              "pip install --no-deps alfworld fast-downward-textworld") from e
        self.expert = expert
        self._env = None  # textworld.envs.PddlEnv
        self._lib = None  # its fast-downward library, kept across games
        self._game: str | None = None
        self._done = True
        self._objective = ""
        self._commands: dict[str, Any] = {}  # admissible command -> engine action
        self._cmd_text: dict[str, str] = {}  # operator name -> command text (templates depend on static facts only)
        self._plan: list[str] | None = None
        self.walkthrough: list[str] = []

    # plumbing: load one game into textworld's PddlEnv, names demangled as AlfredDemangler does
    def _load(self, game: str) -> None:
        from textworld.envs.pddl.pddl import PddlEnv

        traj, data = read_game(game)
        self._env, self._game = None, None
        try:
            import textworld

            if self._lib is None and _FREE_LIBS:  # a library a closed env gave back (never dlclose + dlopen again)
                self._lib = _FREE_LIBS.pop()
            if self._lib is None:
                env = PddlEnv(textworld.EnvInfos())  # loads a private copy of fast-downward's library (33 MB)
                self._lib = env.downward_lib
            else:  # reuse this env's library: every PddlState loads its own task into it
                env = PddlEnv.__new__(PddlEnv)
                textworld.Environment.__init__(env, textworld.EnvInfos())
                env.downward_lib = self._lib
            with engine_caches():
                env._game_file = None
                env._game_data = data
                env.walkthrough = data.get("walkthrough")
                env._logic = game_logic(data["pddl_domain"], data["grammar"])
                from textworld.envs.pddl import logic as pddl_logic

                env._pddl_state = pddl_logic.PddlState(env.downward_lib, data["pddl_problem"], env._logic)
                env._entity_infos = env._get_entity_infos()
            from alfworld.agents.utils.misc import Demangler

            demangler = Demangler(game_infos=env._entity_infos, shuffle=False)
            for info in env._entity_infos.values():
                info.name = demangler.demangle_alfred_name(info.id)
        except GameLoadError:
            raise
        except Exception as e:  # tatsu/fast-downward/textworld raise many types for a bad file
            raise GameLoadError(f"ALFWorld's engine could not load {game}: {type(e).__name__}: {e}. "
                                "The game is corrupted or from another alfworld version; regenerate it.") from e
        self._env, self._game = env, game
        self._cmd_text = {}
        self.walkthrough = list(data.get("walkthrough") or [])
        self.traj_data = traj

    def _derive(self, start: str, context: dict) -> str:
        return self._env._logic.grammar.derive(start, context)

    def _context(self, action=None) -> dict:
        env = self._env
        return {"state": env._pddl_state, "facts": list(env._pddl_state.facts),
                "variables": {} if action is None else
                {ph.name: env._entity_infos[v.name] for ph, v in action.mapping.items()},
                "mapping": {} if action is None else action.mapping, "entity_infos": env._entity_infos}

    def _admissible(self) -> list[str]:
        """Applicable operators from fast-downward → command text (derived once per operator, then cached)."""
        env = self._env
        mapping = {k: info.name for k, info in env._entity_infos.items()}
        self._commands = {}
        for action in env._pddl_state.all_applicable_actions():
            key = action.name + " " + " ".join(v.name for v in action.mapping.values())
            text = self._cmd_text.get(key)
            if text is None:
                action.command_template = self._derive(action.command_template, self._context(action))
                text = self._cmd_text[key] = action.format_command(mapping)
            self._commands.setdefault(text, action)
        return sorted(self._commands)

    def _expert_action(self, won: bool, at_reset: bool = False) -> str | None:
        if self.expert == "none" or won:
            return None
        if not self._plan and (self.expert == "planner" or at_reset):
            self._plan = self._env._pddl_state.replan(self._env._entity_infos) or None
        return self._plan[0] if self._plan else None

    def _result(self, obs: str, reward: float, valid: bool, at_reset: bool = False) -> StepResult:
        won = bool(self._env._pddl_state.check_goal())
        self._done = won
        admissible = [] if won else self._admissible()
        info = StepInfo(won=won, lost=False, score=1.0 if won else 0.0, max_score=1.0, admissible=admissible,
                        valid=valid, expert_action=self._expert_action(won, at_reset), objective=self._objective)
        return StepResult(obs=obs, reward=reward, done=won, info=info)

    def reset(self, game: str) -> StepResult:
        """Start `game` (a game folder, or its game.tw-pddl). Raises GameLoadError if it cannot be loaded."""
        from textworld.envs.pddl import logic as pddl_logic

        game = str(game)
        if self._env is None or game != self._game:
            self._load(game)
        env = self._env
        with engine_caches():
            env._pddl_state = pddl_logic.PddlState(env.downward_lib, env._game_data["pddl_problem"], env._logic)
            intro = self._derive("#intro#", self._context())
        m = _TASK.search(intro)
        self._objective = m.group(1).strip() if m else ""
        self._plan = list(self.walkthrough) or None
        with engine_caches():
            return self._result(clean_observation(intro), 0.0, True, at_reset=True)

    def step(self, action: str) -> StepResult:
        """Send one command. Any text is accepted; one not admissible answers "Nothing happens." (ALFWorld's text)."""
        if self._env is None or self._done:
            raise RuntimeError("step() called before reset() or after the episode ended")
        command = normalize_action(action)
        engine_action = self._commands.get(command)
        if engine_action is None:
            obs, valid = "Nothing happens.", False
            # the state is unchanged: the plan stays valid
        else:
            valid = True
            if self._plan and self._plan[0] == command:
                self._plan = self._plan[1:] or None
            elif self._plan and (engine_action.name in _CHECK_ONLY_OPS or (
                    engine_action.name == "gotolocation" and self._plan[0].startswith("go to "))):
                pass  # the rest of the plan is still executable and still shortest: no replanning
            else:
                self._plan = None
            with engine_caches():
                self._env._pddl_state.apply(engine_action)
                obs = self._derive(engine_action.feedback_rule, self._context(engine_action))
        with engine_caches():
            result = self._result(obs.strip(), 0.0, valid)
        if result.info.won:
            result.reward = 1.0
        return result

    def close(self) -> None:
        # The library is kept for the next env of this process instead of dlclose: unloading and reloading
        # fast-downward's C++ library (thread-local destructors) crashed a test process once (segfault in dlopen).
        if self._lib is not None:
            _FREE_LIBS.append(self._lib)
        self._lib = self._env = self._game = None
        self._done = True


def make_games(out, n: int, seed: int = 0, split: str = "train", task_types=None, force: bool = False,
               official: bool = False, progress: bool = True):
    """The family's game maker: `make_alfworld_games` (generated offline), or with `official=True`
    `load_official_games` (the official data under $ALFWORLD_DATA indexed into `out`; `seed` and `force` unused).
    `task_types`: a list or a comma-separated string of TASK_TYPES; None or "" = all six.
    Returns a GameSet; raises as those functions do."""
    task_types = task_types or None
    if official:
        from .alfworld_official import load_official_games

        return load_official_games(split, task_types, n=n, cache_dir=out)
    from .alfworld_gen import make_alfworld_games

    return make_alfworld_games(out, n, seed, split=split, task_types=task_types, force=force, progress=progress)


FAMILY = register_family(EnvFamily(
    name="alfworld", make_env=AlfWorldEnv, make_games=make_games, system_prompt=SYSTEM_PROMPT, options={},
    game_id="file", game_files=game_files,
    preload=("agentrl_lib.envs.pool", "agentrl_lib.envs.alfworld", "textworld", "textworld.envs.pddl")))
