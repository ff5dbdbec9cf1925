"""TextWorld: generate games with textworld's own generator and play them behind the env protocol.

Two kinds of games (both the Practitioner's Guide's, §3):
- custom: `tw-make custom --world-size W --nb-objects O --quest-length Q --seed S` (max score 1: dense = sparse);
- challenges: `tw-simple` (`--rewards dense|balanced|sparse --goal detailed`), `tw-cooking` (`--recipe --take
  --go --open --cook --cut`), `tw-coin_collector`, `tw-treasure_hunter`, with their own arguments.

Observations are cleaned: no ASCII banner, no `>  -= Room =-0/1` status line, no end-of-game menu.

Introduced in notebooks/00_quickstart.md §1.
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import re
import shlex
import shutil
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

from . import EnvFamily, register_family
from .base import GameLoadError, load_game_set, normalize_action, reuse_game_set, sanitize_action, write_manifest
from .protocol import GameRecord, GameSet, StepInfo, StepResult

SYSTEM_PROMPT = (
    "You are an agent playing a text adventure game. Each turn you read what happened and reply with exactly one "
    "short command, such as: look, inventory, examine cookbook, open fridge, take apple from counter, go north, "
    "prepare meal, eat meal. Reply with the command only.")
"""System prompt for TextWorld games (the examples are TextWorld's own verbs)."""

CHALLENGE_NAMES = ("tw-simple", "tw-cooking", "tw-coin_collector", "tw-treasure_hunter")

_ROOM_HEADER = re.compile(r"^-= .+ =-\s*$", re.M)
_STATUS_LINE = re.compile(r"\n?>[^\n]*$")  # trailing prompt + status bar, e.g. ">     -= Studio =-0/1"
_END = re.compile(r"\*\*\* The End \*\*\*.*", re.S)
_HALTED = "Emulator halted due to runtime error."


INTERPRETER_COMMANDS = frozenset({"save", "restore", "restart", "quit", "q", "script", "transcript", "unscript",
                                  "noscript", "undo"})
"""First words of commands that control the interpreter or the session rather than the story: `save` and `script`
write files into the working directory, `restore`/`restart`/`undo` rewind the game (a score that goes down),
`quit` ends it. TextWorld's own instrumentation commands (`tw-...`) are refused as well."""

REFUSED_COMMAND = ("That command is not available here: it controls the game program (save, restore, restart, quit, "
                   "transcript, undo), not the story.")


EMPTY_REPLY = "I beg your pardon? (The reply held no command.)"
"""What an empty reply gets back: the Inform parser's answer to an empty line; no command reaches the game."""


def refusal_for(action: str) -> tuple[str, str | None]:
    """(command, refusal) for a TextWorld action: `sanitize_action`; then an empty command is refused with
    EMPTY_REPLY, and interpreter and session commands (INTERPRETER_COMMANDS, `tw-...`) with REFUSED_COMMAND. A refused
    action is never sent to the game."""
    command, refusal = sanitize_action(action)
    if refusal is not None:
        return command, refusal
    words = command.lower().split()
    if not words:  # an empty reply is no command: nothing is sent (the old code sent `look`, a free observation)
        return "", EMPTY_REPLY
    if words[0] in INTERPRETER_COMMANDS or words[0].startswith("tw-"):
        return "", REFUSED_COMMAND
    return command, None


def clean_observation(text: str, first: bool = False) -> str:
    """Remove TextWorld's display artifacts from a feedback string.

    `first=True` (the reset observation) also drops the ASCII banner and the objective paragraph before the first
    room header; the objective is given to the agent separately.
    """
    if first:
        m = _ROOM_HEADER.search(text)
        if m:
            text = text[m.start():]
    won_or_lost = _END.search(text)
    text = _END.sub("", text)
    text = _STATUS_LINE.sub("", text.rstrip())
    text = re.sub(r"[ \t]+\n", "\n", text)
    text = re.sub(r"\n{3,}", "\n\n", text).strip()
    if won_or_lost:
        text = (text + "\n\n*** The End ***").strip()
    return text


def check_story_file(path: str) -> None:
    """Reject files that are not Z-machine or Glulx story files *before* jericho/glulx sees them.

    jericho's interpreter calls C `exit(1)` on a bad header ("Fatal error: Unknown Z-code version"), which would end
    the whole Python process; this check turns the common corruptions (garbage, truncation, wrong format) into a
    GameLoadError. Damage deeper inside a valid-looking file can still kill the interpreter: run envs in a
    ProcessPool (`--process-pool`) to confine that to one episode.

    Raises: GameLoadError.
    """
    p = Path(path)
    if not p.is_file():
        raise GameLoadError(f"game file {path} does not exist")
    with open(p, "rb") as f:
        head = f.read(64)
    size = p.stat().st_size
    hint = "The file is corrupted or not a TextWorld game; regenerate the games dir."
    if p.suffix.startswith(".z") and p.suffix[2:].isdigit():
        version = head[0] if head else 0
        if len(head) < 64 or not 1 <= version <= 8:
            raise GameLoadError(f"{path} is not a Z-machine story file (header version byte {version}). {hint}")
        declared = int.from_bytes(head[0x1A:0x1C], "big") * (8 if version >= 6 else 4 if version >= 4 else 2)
        if declared and size < declared:
            raise GameLoadError(f"{path} is truncated ({size} bytes, header says {declared}). {hint}")
    elif p.suffix in (".ulx", ".gblorb"):
        if head[:4] not in (b"Glul", b"FORM"):
            raise GameLoadError(f"{path} is not a Glulx story file. {hint}")
    else:
        raise GameLoadError(f"{path}: unknown game file type {p.suffix!r} (expected .z1-.z8, .ulx or .gblorb)")


def game_files(path: str) -> list[Path]:
    """The files a TextWorld game needs: the story file and, for generated games, its JSON sidecar (`game.json`:
    objective, walkthrough, admissible commands, score; without it the game plays with no objective and no reward).

    Raises: GameLoadError when `path` is a folder (an ALFWorld game? then the manifest's family is wrong)."""
    p = Path(path)
    if p.is_dir():
        raise GameLoadError(f"{path} is a folder, not a TextWorld story file: is the family in manifest.json right "
                            "(ALFWorld games are folders)?")
    return [p, p.with_suffix(".json")] if p.suffix in (".z8", ".ulx") else [p]


def warm_up(game: str) -> None:
    """Parse the game logic stored in a game's JSON sidecar into textworld's cache (`GameLogic.parse`, an
    lru_cache keyed by the logic text, shared by all games of one kind): the first reset of a process spends ~1.8 s
    there. The env pools' forkserver calls it once so that workers start warm."""
    from textworld.logic import GameLogic

    sidecar = Path(game).with_suffix(".json")
    if sidecar.is_file():
        GameLogic.parse(json.loads(sidecar.read_text())["KB"]["logic"])


class TextWorldEnv:
    """One TextWorld game at a time behind the env protocol (see envs/protocol.py).

    Args:
        show_inventory: also request the inventory (adds ~1 ms per step).
    The reward of a step is the increase of the game score (TextWorld reports the running total).
    """

    def __init__(self, show_inventory: bool = False):
        import textworld

        self._infos = textworld.EnvInfos(admissible_commands=True, policy_commands=True, won=True, lost=True,
                                         score=True, max_score=True, objective=True, inventory=show_inventory)
        self._env = None
        self._game: str | None = None
        self._score = 0.0
        self._admissible: list[str] = []
        self._done = True
        self._last_info = StepInfo()

    def _info(self, state, valid: bool) -> StepInfo:
        policy = state.get("policy_commands") or []
        return StepInfo(won=bool(state.get("won")), lost=bool(state.get("lost")), score=float(state.get("score") or 0),
                        max_score=float(state.get("max_score") or 1),
                        admissible=list(state.get("admissible_commands") or []),
                        valid=valid, expert_action=policy[0] if policy else None,
                        objective=state.get("objective") or "",
                        inventory=(state.get("inventory") or "").strip())

    def reset(self, game: str) -> StepResult:
        """Start `game` (a .z8/.ulx file). Raises GameLoadError if the file cannot be loaded."""
        import textworld

        if self._env is None or game != self._game:
            self.close()
            check_story_file(game)
            try:
                with warnings.catch_warnings():
                    # jericho cannot detect score/moves in Inform-7 games; TextWorld tracks them itself: harmless
                    warnings.filterwarnings("ignore", message=".*not fully supported.*")
                    self._env = textworld.start(game, request_infos=self._infos)
                    state = self._env.reset()
            except Exception as e:  # textworld/jericho raise many types for a bad file
                self._env = None
                raise GameLoadError(f"TextWorld could not load {game}: {type(e).__name__}: {e}. "
                                    "The file is corrupted or not a TextWorld game; regenerate the games dir.") from e
            self._game = game
        else:
            state = self._env.reset()
        if _HALTED in (state.feedback or "") or not clean_observation(state.feedback or "", first=True):
            self.close()
            raise GameLoadError(f"{game}: the interpreter halted with a runtime error at the start (the story file "
                                "is damaged). The file is corrupted or not a TextWorld game; regenerate the games dir.")
        self._score, self._done = float(state.get("score") or 0), False
        self._admissible = list(state.get("admissible_commands") or [])
        self._last_info = self._info(state, True)
        return StepResult(obs=clean_observation(state.feedback, first=True), reward=0.0, done=False,
                          info=self._last_info)

    def step(self, action: str) -> StepResult:
        """Send one command. Any text is accepted (the game answers as it does, e.g. "That's not a verb I recognise.").

        Text the interpreter cannot take safely (backslashes, control characters, see `sanitize_action`) and
        interpreter/session commands (INTERPRETER_COMMANDS) are not sent, nor is an empty reply (`refusal_for`): the
        step answers the refusal text, reward 0, `info.valid` False, and the game state is unchanged.
        Raises RuntimeError before reset / after the end.
        """
        if self._env is None or self._done:
            raise RuntimeError("step() called before reset() or after the episode ended")
        command, refusal = refusal_for(action)
        if refusal is not None:
            return StepResult(obs=refusal, reward=0.0, done=False, info=dataclasses.replace(self._last_info, valid=False))
        valid = normalize_action(command) in {normalize_action(a) for a in self._admissible}
        state, score, done = self._env.step(command)
        if _HALTED in (state.feedback or ""):  # the story file is damaged: an env error, not an observation
            self._done = True
            raise GameLoadError(f"{self._game}: the interpreter halted with a runtime error (\"{_HALTED}\"); the story "
                                "file is damaged; regenerate the games dir")
        score = float(score or 0)
        reward, self._score, self._done = score - self._score, score, bool(done)
        self._admissible = list(state.get("admissible_commands") or [])
        self._last_info = self._info(state, valid)
        return StepResult(obs=clean_observation(state.feedback), reward=reward, done=self._done, info=self._last_info)

    def close(self) -> None:
        if self._env is not None:
            self._env.close()
            self._env = None
            self._game = None


# ---------------------------------------------------------------------------------------------------------- generation
CUSTOM_LIMITS = {"world_size": (1, 30), "nb_objects": (1, 100), "quest_length": (1, 80)}
"""Ranges of custom games textworld 1.7.0's generator makes in seconds, measured on 2 CPU cores (one game each):
world size 30 in 12 s, 50 not within 45 s (the issue's 500 ran for minutes); 100 objects compile, 200 do not
(CouldNotCompileGameError); quest length 80 compiles, 100 does not (after 15-41 s)."""

_CHALLENGE_RANGES = {"tw-cooking": {"recipe": (1, 5), "take": (0, 5), "recipe_seed": (0, None)},
                     "tw-coin_collector": {"level": (1, 300)}, "tw-treasure_hunter": {"level": (1, 30)}}
"""Settings textworld.challenges asserts or raises on (cooking.py: 1-5 ingredients, take <= recipe; the levels)."""


class GameGenerationError(ValueError):
    """textworld's generator could not make a game with these parameters (nothing of it is left in the output)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse would print the usage and exit
        raise ValueError(message)


def _challenge_settings(name: str, args: str) -> dict[str, Any]:
    """Parse `args` with the challenge's own tw-make parser and check them against what its generator supports.

    Raises: ValueError naming the argument and its range."""
    from textworld.challenges import CHALLENGES

    if name not in CHALLENGES:
        raise ValueError(f"unknown TextWorld challenge {name!r}; known: {sorted(CHALLENGES)}")
    _, _, add_arguments = CHALLENGES[name]
    parser = _Parser(prog=name, add_help=False, exit_on_error=False)
    add_arguments(parser)
    try:
        ns, unknown = parser.parse_known_args(shlex.split(args))
    except (argparse.ArgumentError, ValueError) as e:
        raise ValueError(f"bad arguments {args!r} for {name}: {e}; see `tw-make {name} --help`") from e
    if unknown:
        raise ValueError(f"unknown arguments {unknown} for {name}; see `tw-make {name} --help`")
    settings = vars(ns)
    for key, (lo, hi) in _CHALLENGE_RANGES.get(name, {}).items():
        v = settings.get(key)
        if v is not None and (v < lo or (hi is not None and v > hi)):
            raise ValueError(f"{name} --{key.replace('_', '-')} must be in [{lo}, {hi if hi is not None else 'inf'}] "
                             f"(got {v}): textworld's generator supports no more")
    if name == "tw-cooking" and settings["take"] > settings["recipe"]:
        raise ValueError(f"tw-cooking --take ({settings['take']}) must be <= --recipe ({settings['recipe']})")
    return settings


def make_textworld_games(out: str | Path, n: int, seed: int = 0, challenge: str | None = None,
                         challenge_args: str = "", world_size: int = 2, nb_objects: int = 3, quest_length: int = 4,
                         force: bool = False, progress: bool = True) -> GameSet:
    """Generate `n` TextWorld games into `out` with textworld's generator and write manifest.json.

    Game i uses seed `seed + i`, so two sets with non-overlapping seed ranges are disjoint by construction
    (a fingerprint of each game's first observation and walkthrough is stored to check it).
    If `out` already holds a manifest with the same parameters, it is reused (generation is cached).

    Args:
        challenge: None for `custom` games (world_size, nb_objects, quest_length as in the paper), or one of
            CHALLENGE_NAMES with `challenge_args` as on the `tw-make` command line (e.g. "--recipe 1 --take 1 --go 1").
    Games are made in a temp dir inside `out` and moved in when all `n` exist: a failure or an interrupt leaves no
    partial files (an older set in `out` stays as it was).

    Returns: the GameSet. Raises ValueError for parameters the generator does not support (CUSTOM_LIMITS, the
    challenges' own ranges), checked before anything is generated; GameGenerationError when textworld fails.
    """
    import textworld
    import textworld.generator
    from tqdm.auto import tqdm

    if n < 1:
        raise ValueError(f"n must be >= 1 (got {n})")
    if challenge is None:
        for key, value in (("world_size", world_size), ("nb_objects", nb_objects), ("quest_length", quest_length)):
            lo, hi = CUSTOM_LIMITS[key]
            if not lo <= value <= hi:
                raise ValueError(f"--{key.replace('_', '-')} must be in [{lo}, {hi}] (got {value}): the range in which "
                                 "textworld's generator makes custom games (larger ones fail to compile or take "
                                 "minutes; CUSTOM_LIMITS)")
    params: dict[str, Any] = {"n": n, "seed": seed, "challenge": challenge or "custom"}
    if challenge:
        settings = _challenge_settings(challenge, challenge_args)
        params["challenge_args"] = challenge_args
    else:
        params.update(world_size=world_size, nb_objects=nb_objects, quest_length=quest_length)
    out = Path(out).expanduser()
    existing = reuse_game_set(out, "textworld", params, force)
    if existing is not None:
        return existing
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    # plumbing: games are made in a temp dir next to the set and moved in only when all n exist, so a failure or
    # Ctrl-C leaves no partial files (and an older set in `out` intact)
    tmp = Path(tempfile.mkdtemp(prefix=".partial-", dir=out))
    records = []
    t0 = time.time()
    try:
        for i in tqdm(range(n), desc=f"make {params['challenge']} games", disable=not progress):
            s = seed + i
            opts = textworld.GameOptions()
            opts.seeds = s
            opts.path = str(tmp / f"game_{s:06d}.z8")
            opts.force_recompile = True
            try:
                with warnings.catch_warnings():  # the generator replays the walkthrough in jericho: harmless warning
                    warnings.filterwarnings("ignore", message=".*not fully supported.*")
                    if challenge:
                        from textworld.challenges import CHALLENGES

                        game = CHALLENGES[challenge][1](dict(settings), opts)
                    else:
                        opts.nb_rooms, opts.nb_objects, opts.quest_length = world_size, nb_objects, quest_length
                        game = textworld.generator.make_game(opts)
                    path = textworld.generator.compile_game(game, opts)
            except Exception as e:  # the generator raises many types (QuestGenerationError, ...)
                what = f"{challenge} {challenge_args!r}" if challenge else \
                    f"world size {world_size}, {nb_objects} objects, quest length {quest_length}"
                raise GameGenerationError(f"textworld could not make game {i} (seed {s}) with {what}: "
                                          f"{type(e).__name__}: {str(e)[:200] or 'no message'}; try smaller "
                                          "values; nothing was written") from e
            walkthrough = list(game.metadata.get("walkthrough") or [])
            if not walkthrough and game.quests:
                walkthrough = list(game.quests[0].commands)
            fp = hashlib.sha1(json.dumps([game.objective, walkthrough, sorted(map(str, game.world.facts))]).encode())
            records.append(GameRecord(path=str(out / Path(path).name), name=Path(path).stem, seed=s,
                                      max_score=float(game.max_score), walkthrough=walkthrough,
                                      params={"fingerprint": fp.hexdigest()[:16], "walkthrough_len": len(walkthrough)}))
        for f in tmp.iterdir():
            os.replace(f, out / f.name)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if created and not any(out.iterdir()):
            out.rmdir()
        raise
    shutil.rmtree(tmp, ignore_errors=True)
    write_manifest(out, "textworld", records, params)
    gs = load_game_set(out)
    gs.params["generation_seconds"] = round(time.time() - t0, 1)
    return gs


FAMILY = register_family(EnvFamily(
    name="textworld", make_env=TextWorldEnv, make_games=make_textworld_games, system_prompt=SYSTEM_PROMPT,
    options={"show_inventory": "show_inventory"}, game_id="file", game_files=game_files,
    preload=("agentrl_lib.envs.pool", "agentrl_lib.envs.textworld", "textworld", "jericho"), warm_up=warm_up))
