"""What every environment family shares besides the protocol: the action text helpers (`normalize_action`,
`sanitize_action`, RAGEN's multi-move turns `make_moves`), the env errors, and the game set on disk (manifest.json:
`write_manifest`, `load_game_set`, `reuse_game_set`, `check_game_set`). No family is imported here: families live in
the registry (agentrl_lib.envs, `get_family`), which the game-set functions consult for a family's game ids and files.

The protocol and its records (Env, StepResult, StepInfo, GameRecord, GameSet) are in envs/protocol.py, below the
registry; GameRecord, GameSet, StepInfo and StepResult are re-exported here (tests and book/extending.md's game
maker import them from here).

Introduced in notebooks/00_quickstart.md §1.
"""
from __future__ import annotations

import hashlib
import json
import re
import time
import unicodedata
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable, NamedTuple

from ..fsio import atomic_write_text
from . import UnknownFamilyError, family_names, get_family
from .protocol import GameRecord, GameSet, StepInfo, StepResult  # noqa: F401 - StepInfo re-exported (tests, the book)


def normalize_action(text: str) -> str:
    """Lower-case, strip, collapse whitespace, drop trailing punctuation: the form compared with admissible commands."""
    return re.sub(r"\s+", " ", text.strip().lower()).rstrip(".!?;:")


MAX_ACTION_BYTES = 190
"""Longest action (UTF-8 bytes) sent to a game: jericho's input buffer holds 198 bytes and truncates the rest
(mid-character truncation raises UnicodeDecodeError inside jericho)."""

UNREADABLE_ACTION = ("That command contains characters the game cannot read (a backslash or a control character); "
                     "use plain words.")
TOO_LONG_ACTION = "That command is too long; a command is a few words."


def sanitize_action(action: str, max_bytes: int = MAX_ACTION_BYTES) -> tuple[str, str | None]:
    """Make an agent's text safe to send to a text-game interpreter.

    Whitespace of any kind (newline, tab, carriage return, Unicode line separators) becomes one space and the ends
    are stripped. Text the interpreter cannot take safely is refused rather than repaired, so the agent's turn is
    an invalid action and nothing reaches the interpreter: a backslash anywhere (dumb-frotz reads `\\x` as one of
    its own escape commands: `\\help`, a literal `\\n` or `\\boxed{...}` send it into an endless print loop), a
    control or format character (NUL crashed jericho with SIGSEGV; Unicode categories Cc, Cf, Cs, Co, Cn), or more
    than `max_bytes` bytes of UTF-8.

    Args:
        action: the parsed action text (any str).
        max_bytes: longest command accepted, in UTF-8 bytes.
    Returns:
        (command, refusal): `command` is the cleaned text and `refusal` None when it is safe to send; else
        `command` is "" and `refusal` the observation to show the agent instead (UNREADABLE_ACTION or
        TOO_LONG_ACTION).
    """
    chars = []
    for ch in action:
        if ch.isspace():
            chars.append(" ")
        elif ch == "\\" or unicodedata.category(ch).startswith("C"):
            return "", UNREADABLE_ACTION
        else:
            chars.append(ch)
    command = re.sub(r" +", " ", "".join(chars)).strip()
    if len(command.encode("utf-8")) > max_bytes:
        return "", TOO_LONG_ACTION
    return command, None


ACTION_SEP = "||"
"""Separator of the actions of one answer in RAGEN's format (`<answer>Left || Up</answer>`; RAGEN's
agent_proxy.action_sep): prompts.parse_reply joins an answer's actions with it, and the grid families (frozenlake,
sokoban) split the action they receive on it (make_moves)."""


class Moves(NamedTuple):
    """What one multi-move turn did (make_moves)."""

    valid: bool
    """Every piece of the action was a move, and there was at least one piece."""
    reward: float
    """Sum of the rewards of the moves made, in game units (not rounded)."""
    over: bool
    """The episode ended in this turn: a move ended it, or the turn made the last of `moves_left` moves."""
    made: int
    """Moves made: unknown pieces and the moves after the episode ended are not made."""


def make_moves(action: str, parse_move: Callable[[str], Any], move: Callable[[Any], tuple[float, bool]],
               moves_left: int) -> Moves:
    """Play one turn that may carry several moves, by RAGEN's rule for its grid games (FrozenLake, Sokoban).

    `action` is split on ACTION_SEP ("Left || Up"), blank pieces dropped, and each piece, stripped, is parsed by
    `parse_move` (None: not a move). The moves are made in order by `move`, unknown pieces skipped, until a move ends
    the episode or `moves_left` moves have been made (the env's limit of moves per episode, which ends the episode
    too); the moves after that are not made. The turn is invalid (info.valid False → reward.format_penalty) when a
    piece is not a move or when there is no piece at all ("", or only separators); the known moves of an invalid
    turn are still made.

    Args:
        action: the action text the env received (prompts.parse_reply: one move, or moves joined by " || ").
        parse_move: piece text → the env's move, or None when the piece is not a move.
        move: makes one move in the env; returns (its reward in game units, whether the episode is over).
        moves_left: moves the episode may still make (>= 1 while it is not over).
    Returns: Moves(valid, reward = sum over the moves made, over, made).
    Source: RAGEN (Wang et al. 2025) ragen/llm_agent/es_manager.py: `_extract_map_valid_actions` keeps the pieces
        found in the env's action_lookup, `_execute_actions` steps them in order, sums their rewards and stops at
        `done`; the turn gets the format penalty when a piece was dropped or none was left.
    """
    moves = [parse_move(piece.strip()) for piece in action.split(ACTION_SEP) if piece.strip()]
    total, made, over = 0.0, 0, False
    for m in moves:
        if m is None:
            continue
        reward, over = move(m)
        total += reward
        made += 1
        if over or made >= moves_left:
            over = True
            break
    return Moves(bool(moves) and None not in moves, total, over, made)


class GameSetError(ValueError):
    """A games directory is missing, empty or malformed; the message says how to make one."""


class GameLoadError(RuntimeError):
    """A game file could not be loaded by its engine (corrupted or from another engine version)."""


class TooManyEnvErrors(RuntimeError):
    """More than `env.max_env_error_frac` of the episodes of a training step or an evaluation ended in an env error
    (a game that would not load, an interpreter that crashed or hung); the message names the first reason."""


def check_env_errors(n_errors: int, n_episodes: int, max_frac: float, first_reason: str, where: str) -> None:
    """Raise TooManyEnvErrors when `n_errors` > `max_frac` * `n_episodes` (`where`: e.g. "step 3", "evaluation")."""
    if n_episodes and n_errors > max_frac * n_episodes:
        raise TooManyEnvErrors(
            f"{where}: {n_errors} of {n_episodes} episodes ended in an env error, more than env.max_env_error_frac "
            f"= {max_frac:g} (first: {' '.join(first_reason.split())[:300]}); check the games "
            "(`agentrl eval` checks them first) or raise --max-env-error-frac")


MANIFEST = "manifest.json"


def write_manifest(root: Path, family: str, games: list[GameRecord], params: dict[str, Any]) -> Path:
    """Write root/manifest.json atomically (`fsio.atomic_write_text`: temp file, fsync, rename).

    Game paths of a "file" family are stored relative to `root` when they lie under it (absolute otherwise, e.g.
    the official ALFWorld data indexed in place); game ids of a "seed" family are stored as given.
    Raises: UnknownFamilyError for an unregistered family."""
    by_file = get_family(family).game_id == "file"
    rows = []
    for g in games:
        row = asdict(g)
        if by_file:
            path = Path(g.path).resolve()
            try:
                row["path"] = str(path.relative_to(root.resolve()))
            except ValueError:  # outside the games dir: load_game_set's root / path keeps an absolute path as is
                row["path"] = str(path)
        rows.append(row)
    data = {"family": family, "params": params, "n_games": len(rows), "games": rows}
    atomic_write_text(root / MANIFEST, json.dumps(data, indent=1))
    return root / MANIFEST


def load_game_set(root: str | Path) -> GameSet:
    """Read a games directory made by `agentrl make-games` (or by a family's game maker).

    Raises:
        GameSetError: the directory does not exist or is a file, has no manifest.json, the manifest is not UTF-8 JSON
            or is malformed, lists no games or one game twice, names an unknown family, or names game files that are
            missing (a "seed" family has no files to check); a file family's directory whose name is not valid UTF-8.
    """
    from ..paths import undecodable_name

    root = Path(root).expanduser().absolute()  # env workers may run in another cwd: game paths must not be relative
    hint = "make one with e.g. `agentrl make-games textworld --challenge tw-cooking --n 8 --seed 0 --out DIR`"
    if root.exists() and not root.is_dir():
        parent = f" (pass its directory {root.parent})" if root.name == MANIFEST else ""
        raise GameSetError(f"games directory {root} is a file, not a directory{parent}; pass the directory that "
                           f"holds {MANIFEST}")
    if not root.is_dir():
        raise GameSetError(f"games directory {root} does not exist; {hint}")
    mf = root / MANIFEST
    if not mf.is_file():
        raise GameSetError(f"{root} has no {MANIFEST} (is it an empty or foreign directory?); {hint}")
    try:
        data = json.loads(mf.read_bytes().decode("utf-8"))
        family = data["family"]
        rows = data["games"]
    except UnicodeDecodeError as e:
        raise GameSetError(f"{mf} is not UTF-8 text (byte {e.object[e.start]:#04x} at offset {e.start}): a damaged or "
                           f"foreign file; delete the directory and regenerate it; {hint}") from None
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise GameSetError(f"{mf} is malformed ({e}); delete the directory and regenerate it; {hint}") from e
    except RecursionError:  # json's decoder recurses per nesting level: 100,000 nested `[` (issue 52)
        raise GameSetError(f"{mf} nests its values deeper than Python's JSON reader can follow: a damaged or foreign "
                           f"file; delete the directory and regenerate it; {hint}") from None
    if not rows:
        raise GameSetError(f"{mf} lists no games; {hint}")
    try:
        by_file = get_family(family).game_id == "file"
    except UnknownFamilyError:
        raise GameSetError(f"{mf} names an unknown game family {family!r} (known: {', '.join(family_names())}); "
                           f"regenerate the directory; {hint}") from None
    if by_file and (bad := undecodable_name(root)) is not None:
        raise GameSetError(f"games directory {root} has a name that is not valid UTF-8 ({bad!r}): the {family} engine "
                           f"cannot open files under it; rename it (or move the games) with UTF-8 characters")
    games, seen = [], {}
    for row in rows:
        try:
            if len(row["walkthrough"]) > WALKTHROUGH_MAX:
                raise GameSetError(f"{mf} game {row.get('name')!r} has a walkthrough of {len(row['walkthrough'])} "
                                   f"commands, more than {WALKTHROUGH_MAX} (no episode is that long: env.max_turns <= "
                                   f"{WALKTHROUGH_MAX}); a damaged or foreign manifest: regenerate the directory")
            path = root / row["path"] if by_file else str(row["path"])
            rec = GameRecord(path=str(path), name=row["name"], seed=row["seed"], max_score=row["max_score"],
                             walkthrough=list(row["walkthrough"]), params=row.get("params", {}))
        except (KeyError, TypeError) as e:
            raise GameSetError(f"{mf} is malformed (a game row lacks {e}); delete the directory and regenerate it; "
                               f"{hint}") from e
        if by_file and not path.exists():
            raise GameSetError(f"game file {path} listed in {mf} is missing; regenerate the directory")
        key = str(Path(path).resolve()) if by_file else str(row["path"])
        if key in seen:  # it would be counted twice in success rates and trained at double weight
            raise GameSetError(f"{mf} lists game {row['name']!r} twice (rows {seen[key] + 1} and {len(games) + 1}, "
                               f"same {'file' if by_file else 'seed'}); remove the duplicate row or regenerate the "
                               "directory")
        seen[key] = len(games)
        games.append(rec)
    return GameSet(root=root, family=family, games=games, params=data.get("params", {}))


WALKTHROUGH_MAX = 10_000
"""Longest walkthrough a manifest may list (config.MAX_TURNS_MAX: no episode has more turns). A manifest whose
walkthrough held 3,000,000 commands made the game check replay it for hours and SFT build one example of millions
of tokens (issue 52); the generators write 2-60."""


def reuse_game_set(out: Path, family: str, params: dict[str, Any], force: bool = False) -> GameSet | None:
    """The game set already in `out` when a game maker may reuse it instead of generating: not `force`, its
    manifest loads, its family is `family`, and it was made with `params` (every key of `params` equal in the
    manifest's params; keys the maker adds after generation, such as counts and timings, are not compared).
    Returns None otherwise (a missing, damaged or different set)."""
    if force or not (Path(out) / MANIFEST).is_file():
        return None
    try:
        existing = load_game_set(out)
    except GameSetError:
        return None
    if existing.family == family and {k: existing.params.get(k) for k in params} == params:
        return existing
    return None


CHECK_CACHE = ".agentrl-game-check.json"
"""File next to manifest.json listing the games that passed check_game_set (keyed by file sizes and mtimes)."""


def _game_files(family: str, path: str) -> list[Path]:
    """The files a game needs (EnvFamily.game_files); none for a "seed" family or one that declares none."""
    fam = get_family(family)
    return fam.game_files(path) if fam.game_id == "file" and fam.game_files is not None else []


def _signature(family: str, game: GameRecord, files: list[Path]) -> str:
    stats = [(f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in files]
    return hashlib.sha1(json.dumps([family, game.path, game.walkthrough, stats]).encode()).hexdigest()


def check_game_set(games: GameSet, pool, cache: bool = True, turn_limit: int | None = None) -> dict[str, Any]:
    """Check every game of a set through the envs a run will use, before the run spends time on it.

    Each game must have its family's files (`EnvFamily.game_files`), reset without error, and, when it has a
    walkthrough, win by replaying it (this catches a damaged story file or game folder, a manifest whose family is
    wrong, and a missing TextWorld JSON sidecar, with which a game plays with no objective and no reward). Games are
    played `pool.size` at a time through `pool` (an EnvPool: a SerialPool, a ProcessPool, or a test's scripted
    envs). Games that passed are recorded in CHECK_CACHE next to manifest.json, keyed by their files' sizes and
    mtimes: a second check of an unchanged set plays nothing. Leaves the pool's slots mid-episode (rollouts reset).

    Cost measured (2 shared CPU cores, 2026-11-23): see book/when_things_go_wrong.md "Environment faults".

    turn_limit: the envs' own turn limit when they take one (swe's max_turns: the env submits at that turn), else
    None. A game whose episode the env ends at that turn, before its walkthrough is played out, fails as the turn
    limit's doing ("raise --max-turns"), not as a stale game file.

    Returns: {"games": n, "played": games played now, "cached": games skipped as already checked, "seconds": wall}.
    Raises: GameSetError naming the failing games (up to 3 with their reasons) and how to fix them (a longer step
        timeout when every failure is the pool's timeout, else regenerating the games).
    """
    t0 = time.perf_counter()
    failures: dict[str, str] = {}
    cache_path = games.root / CHECK_CACHE
    known: set[str] = set()
    if cache:
        try:
            known = set(json.loads(cache_path.read_text()).get("passed", []))
        except (OSError, ValueError, AttributeError):
            known = set()
    todo: list[tuple[GameRecord, str]] = []
    passed: set[str] = set()
    n_cached = 0
    timeouts = 0  # failures that are the pool's step timeout (EnvFailure kind 'timeout'), not a broken game
    cut_short: dict[str, int] = {}  # games whose episode the env ended before the walkthrough did → its length
    for g in games.games:
        try:
            files = _game_files(games.family, g.path)
            missing = [str(f) for f in files if not f.exists()]
            if missing:
                failures[g.name] = f"missing {', '.join(missing)}"
                continue
            sig = _signature(games.family, g, files)
        except (GameLoadError, OSError) as e:
            failures[g.name] = str(e)
            continue
        if sig in known:
            passed.add(sig)
            n_cached += 1
        else:
            todo.append((g, sig))
    for start in range(0, len(todo), pool.size):  # plumbing: play pool.size games at once, walkthroughs in lockstep
        chunk = todo[start:start + pool.size]
        live: dict[int, StepResult] = {}
        for i, r in enumerate(pool.reset(list(range(len(chunk))), [g.path for g, _ in chunk])):
            if isinstance(r, StepResult):
                live[i] = r
            else:
                failures[chunk[i][0].name] = f"reset failed: {r.reason}"
                timeouts += getattr(r, "kind", "") == "timeout"
        t = 0
        ended_at: dict[int, int] = {}  # slot → the walkthrough commands played when the env ended the episode
        while True:
            for i, r in live.items():
                if r.done and i not in ended_at:
                    ended_at[i] = t
            idx = [i for i, r in live.items() if not r.done and t < len(chunk[i][0].walkthrough)]
            if not idx:
                break
            for i, r in zip(idx, pool.step(idx, [chunk[i][0].walkthrough[t] for i in idx])):
                if isinstance(r, StepResult):
                    live[i] = r
                else:
                    failures[chunk[i][0].name] = f"step {t + 1} of the walkthrough failed: {r.reason}"
                    timeouts += getattr(r, "kind", "") == "timeout"
                    del live[i]
            t += 1
        for i, r in live.items():
            g, sig = chunk[i]
            if (g.walkthrough and not r.info.won and turn_limit is not None and turn_limit < len(g.walkthrough)
                    and ended_at.get(i) == turn_limit):
                cut_short[g.name] = len(g.walkthrough)  # the env's own turn limit ended it, not the game file
                failures[g.name] = (f"the env ended the episode after {ended_at[i]} of its walkthrough's "
                                    f"{len(g.walkthrough)} commands (its turn limit, env.max_turns / --max-turns?)")
            elif g.walkthrough and not r.info.won:
                failures[g.name] = (f"replaying its walkthrough ({len(g.walkthrough)} commands) does not win "
                                    f"(score {r.info.score:g}/{r.info.max_score:g}; a missing or stale game file?)")
            else:
                passed.add(sig)
    if cache:
        try:
            atomic_write_text(cache_path, json.dumps({"passed": sorted(passed)}))
        except OSError:  # a read-only games dir: check again next time
            pass
    if failures:
        shown = "; ".join(f"{name}: {' '.join(reason.split())[:300]}" for name, reason in list(failures.items())[:3])
        more = f" (and {len(failures) - 3} more)" if len(failures) > 3 else ""
        fix = ("every failure is the env step timeout, not a broken game: raise --step-timeout (env.step_timeout_s; "
               "30 s is the default)" if timeouts == len(failures) else
               f"every failure is the env's turn limit, not a broken game: raise --max-turns (env.max_turns) to at "
               f"least {max(cut_short.values())}, the longest walkthrough" if len(cut_short) == len(failures) else
               "regenerate the games dir (`agentrl make-games ... --force`)")
        raise GameSetError(f"{len(failures)} of {len(games)} games in {games.root} failed the game check: {shown}"
                           f"{more}; {fix}")
    return {"games": len(games), "played": len(todo), "cached": n_cached,
            "seconds": round(time.perf_counter() - t0, 3)}
