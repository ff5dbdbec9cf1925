"""`agentrl` command line: make-games, eval, sft, train, demo. Each subcommand calls the library functions the
notebooks call.

    agentrl make-games textworld --challenge tw-cooking --challenge-args "--recipe 1 --take 1 --go 1" --n 16 --out DIR
    agentrl make-games textworld --world-size 2 --nb-objects 3 --quest-length 4 --n 16 --seed 0 --out DIR
    agentrl eval --model embedded --games DIR --out eval.json
    agentrl sft --model embedded --games DIR --out runs/sft
    agentrl train --algo ppo --reward dense --games DIR --init runs/sft --out runs/ppo
    agentrl demo
"""
from __future__ import annotations

import argparse
import errno
import logging
import math
import os
import signal
import sys
import tempfile
from pathlib import Path

from .config import ALGO_PRESETS, REWARDS, SEED_MAX, ConfigError, EnvConfig, RunConfig


def _make_games(a) -> None:
    import inspect

    from .envs import get_family

    make_games = get_family(a.family).make_games
    _require(make_games is not None, f"the {a.family} family has no game maker; write its manifest.json yourself")
    # the family's game maker gets the flags named as its keyword parameters (textworld: --challenge ... --force,
    # alfworld: --split --task-types --official --force); the other families' flags are not passed
    accepted = inspect.signature(make_games).parameters
    params = {k: v for k, v in vars(a).items() if k in accepted and k not in ("out", "n", "seed")}
    gs = make_games(a.out, a.n, a.seed, **params)
    lens = [len(g.walkthrough) for g in gs.games]
    print(f"{len(gs)} {gs.family} games in {gs.root} (manifest.json); walkthrough length "
          f"{min(lens)}-{max(lens)}, max score {gs.games[0].max_score:g}")


def _require(ok: bool, message: str) -> None:
    """Raise ConfigError(message) unless `ok`: a bad flag value, found before any work starts."""
    if not ok:
        raise ConfigError(message)


def check_out_path(flag: str, out: str, is_dir: bool = False) -> None:
    """Check, before any work, that `out` (a file, or a directory when `is_dir`) can be written later: it is not a
    directory (file) / a file (directory), no ancestor is a file, and the nearest existing ancestor accepts a new
    file (probed with a temporary file, as permission bits do not tell for root or read-only mounts); leaves nothing
    behind.

    Raises:
        ConfigError: naming `flag` and `out`, saying what is in the way.
    """
    path = Path(out).expanduser()
    if not is_dir and path.is_dir():
        raise ConfigError(f"{flag} {out} is a directory; pass a file path, e.g. {Path(out) / 'eval.json'}")
    if is_dir and path.exists() and not path.is_dir():
        raise ConfigError(f"{flag} {out} is a file, not a directory; pick another path")
    ancestor = path if is_dir and path.is_dir() else path.parent
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise ConfigError(f"{flag} {out}: {ancestor} is a file, not a directory; pick another path")
    try:
        with tempfile.NamedTemporaryFile(dir=ancestor, prefix=".agentrl-write-check-"):
            pass
    except OSError as e:
        raise ConfigError(f"{flag} {out}: cannot write in {ancestor} ({e.strerror or e}); pick a writable path") from e


def _check_model_flags(a) -> None:
    """--device and --dtype, checked against this machine before games or models load (models.pick_device)."""
    from .models import ModelLoadError, pick_device, pick_dtype

    try:
        device = pick_device(a.device)
    except ModelLoadError as e:
        raise ConfigError(f"--device {a.device}: {e}") from e
    try:
        pick_dtype(a.dtype, device)
    except ModelLoadError as e:
        raise ConfigError(f"--dtype {a.dtype}: {e}") from e


def _eval(a) -> None:
    from .envs.base import check_env_errors, load_game_set
    from .envs.pool import open_pool
    from .evaluate import evaluate, format_eval, save_eval
    from .models import load_policy

    _require(a.max_turns >= 1, f"--max-turns must be >= 1 (got {a.max_turns}); 8-12 suits small TextWorld games")
    _require(a.batch_size >= 1, f"--batch-size must be >= 1 (got {a.batch_size})")
    _require(math.isfinite(a.temperature) and a.temperature >= 0,
             f"--temperature must be >= 0 (got {a.temperature}); 0 is greedy, 0.7 samples as in training")
    if a.out:
        check_out_path("--out", a.out)
    _check_model_flags(a)
    games = load_game_set(a.games)
    env_cfg = EnvConfig(process_pool=a.process_pool, step_timeout_s=a.step_timeout,
                        max_env_error_frac=a.max_env_error_frac, show_admissible=a.show_admissible,
                        show_inventory=a.show_inventory)
    env_cfg.validate()
    pool = open_pool(env_cfg, min(a.batch_size, len(games)), games)  # every game checked before the model loads
    try:
        model, tok = load_policy(a.model, a.device, a.dtype)
        res = evaluate(model, tok, games, max_turns=a.max_turns, temperature=a.temperature, batch_size=a.batch_size,
                       env=env_cfg, pool=pool)
    finally:
        pool.close()
    res["model"], res["games"] = a.model, str(games.root)
    print(format_eval(res, a.model))
    if a.out:
        save_eval(res, a.out)
        print(f"wrote {a.out}")
    reasons = res["env_error_reasons"] or [""]
    check_env_errors(res["env_errors"], res["n_games"], env_cfg.max_env_error_frac, reasons[0], "evaluation")


def _sft(a) -> None:
    from .envs.base import load_game_set
    from .sft import sft

    _require(math.isfinite(a.epochs) and a.epochs > 0,
             f"--epochs must be > 0 (got {a.epochs}); 1 is the warm-up the Practitioner's Guide uses")
    _require(math.isfinite(a.lr) and a.lr > 0, f"--lr must be > 0 (got {a.lr}); 5e-5 is the default")
    _require(a.batch_size >= 1, f"--batch-size must be >= 1 (got {a.batch_size})")
    _require(a.max_turns is None or a.max_turns >= 1, f"--max-turns must be >= 1 (got {a.max_turns})")
    _require(0 <= a.seed <= SEED_MAX, f"--seed must be in [0, {SEED_MAX}] (got {a.seed})")
    _require(a.lora_rank >= 0, f"--lora-rank must be >= 0 (got {a.lora_rank}); 0 is full fine-tuning")
    check_out_path("--out", a.out, is_dir=True)
    _check_model_flags(a)
    s = sft(a.model, load_game_set(a.games), a.out, epochs=a.epochs, lr=a.lr, batch_size=a.batch_size,
            max_turns=a.max_turns, seed=a.seed, device=a.device, dtype=a.dtype, lora_rank=a.lora_rank,
            show_admissible=a.show_admissible, show_inventory=a.show_inventory)
    print(f"SFT on {s['examples']} walkthroughs ({s['assistant_tokens']} action tokens): loss "
          f"{s['train_loss'][0]:.3f} → {s['train_loss'][-1]:.3f} in {s['seconds']:.0f}s; model in {a.out}/policy")


OVERRIDES = {  # CLI flag -> (section, key)
    "reward": ("reward", "kind"), "games": ("env", "games"), "max_turns": ("env", "max_turns"),
    "group_size": ("algo", "group_size"), "steps": ("train", "steps"), "games_per_step": ("train", "games_per_step"),
    "lr": ("train", "lr"), "epochs": ("train", "epochs"), "minibatch_size": ("train", "minibatch_size"),
    "kl_coef": ("algo", "kl_coef"), "keep_top_std": ("algo", "keep_top_std"), "seed": ("train", "seed"),
    "format_penalty": ("reward", "format_penalty"), "temperature": ("train", "temperature"),
    "lora_rank": ("model", "lora_rank"), "device": ("model", "device"), "dtype": ("model", "dtype"),
    "process_pool": ("env", "process_pool"), "gradient_checkpointing": ("train", "gradient_checkpointing"),
}


OVERRIDES.update({"step_timeout": ("env", "step_timeout_s"), "max_env_error_frac": ("env", "max_env_error_frac")})


def _field_doc(section: str, name: str) -> str:
    """A config field's docstring (config.py), as the help of its flag ('%' escaped for argparse)."""
    import ast
    import inspect

    from . import config

    cls = {"env": config.EnvConfig}[section]
    body = ast.parse(inspect.getsource(cls)).body[0].body
    for node, nxt in zip(body, body[1:]):
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", None) == name and \
                isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant):
            return " ".join(str(nxt.value.value).split()).replace("%", "%%")
    return ""


def build_config(a, base: RunConfig | None = None) -> RunConfig:
    """`base` (a resumed run's saved config), else the --config file, else the defaults; then the flags given on
    the command line override it (e.g. `--resume --steps 40` extends a run)."""
    base = base or (RunConfig.load(a.config) if a.config else RunConfig())
    data = base.to_dict()
    if getattr(a, "algo", None) is not None:  # a preset: the fields of ALGO_PRESETS[--algo]
        data["algo"].update(ALGO_PRESETS[a.algo])
    for flag, (section, key) in OVERRIDES.items():
        v = getattr(a, flag, None)
        if v is not None:
            data[section][key] = v
    return RunConfig.from_dict(data)


def _train(a) -> None:
    from .checkpoint import resume_config
    from .trainer import Trainer

    run_dir = Path(a.out)
    cfg = build_config(a, resume_config(run_dir) if a.resume else None)  # "no run in DIR" when there is none
    if not cfg.env.games:
        raise ConfigError("no games: pass --games DIR (made by `agentrl make-games`) or set env.games in --config")
    eval_games = _check_train_inputs(a, cfg)
    trainer = None
    try:
        trainer = Trainer(cfg, run_dir, init=a.init, resume=a.resume)
        rows = trainer.train()
    except KeyboardInterrupt:  # Ctrl-C: one line, exit 130, the last checkpoint intact (no traceback)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not break the cleanup
        if trainer is not None:
            trainer.close()
        print(f"agentrl train: {_interrupted(trainer, run_dir)}", file=sys.stderr, flush=True)
        raise SystemExit(130) from None
    finally:
        if trainer is not None:
            trainer.close()
    if rows:
        last = rows[-1]
        print(f"done: {len(rows)} steps; last step success {last['success_rate']:.2f}, return {last['return_mean']:+.3f}; "
              f"metrics in {run_dir}/metrics.jsonl, curves in {run_dir}/learning_curve.png")
    if cfg.train.eval_games:
        from .evaluate import evaluate, format_eval, save_eval

        res = evaluate(trainer.policy, trainer.tok, eval_games, max_turns=cfg.env.max_turns,
                       temperature=cfg.train.eval_temperature, max_new_tokens=cfg.train.max_new_tokens, env=cfg.env)
        save_eval(res, run_dir / "eval.json")
        print(format_eval(res, "held-out"))


def _check_train_inputs(a, cfg: RunConfig):
    """What `train` would otherwise find out only after training: the held-out games (train.eval_games), --out, the
    device / dtype and a model path that does not exist. Returns the loaded eval GameSet, or None."""
    from .envs.base import load_game_set
    from .models import pick_device, pick_dtype, resolve_model_path

    check_out_path("--out", a.out, is_dir=True)
    pick_dtype(cfg.model.dtype, pick_device(cfg.model.device))
    if not a.resume:
        name = a.init or cfg.model.name
        if name != "embedded":  # the embedded model resolves by converting it (~20 s): leave that to the trainer
            resolve_model_path(name)
    return load_game_set(cfg.train.eval_games) if cfg.train.eval_games else None


def _interrupted(trainer, run_dir: Path) -> str:
    """The one line printed on Ctrl-C: where training stopped and how to go on."""
    resume = f"resume with: agentrl train --out {run_dir} --resume"
    if trainer is None:
        return "interrupted before training started; nothing was trained: run the same command again"
    where = (f"during step {trainer.step_in_progress}/{trainer.cfg.train.steps} (that step is not saved)"
             if trainer.step_in_progress else f"after step {trainer.last_step}")
    if trainer.last_checkpoint:
        return f"interrupted {where}; the last checkpoint is {trainer.last_checkpoint}; {resume}"
    return f"interrupted {where}; no checkpoint yet, so --resume starts over at step 1; {resume}"


def _demo(a) -> None:
    from .demo import DemoBudget, run_demo

    fast = a.fast or os.environ.get("AGENTRL_FAST") == "1"
    budget = DemoBudget.fast() if fast else DemoBudget.full()
    if a.rl_steps is not None:
        budget.rl_steps = a.rl_steps
    run_demo(a.out, budget, algo=a.algo, reward=a.reward, model=a.model, seed=a.seed)


def build_parser() -> argparse.ArgumentParser:
    from .envs import family_names

    p = argparse.ArgumentParser(prog="agentrl", description="Multi-turn agentic RL for LLM agents in text games.")
    sub = p.add_subparsers(dest="cmd", required=True)

    g = sub.add_parser("make-games", help="generate a set of games with a manifest.json")
    g.add_argument("family", choices=family_names())
    g.add_argument("--out", required=True)
    g.add_argument("--n", type=int, default=16, help="number of games")
    g.add_argument("--seed", type=int, default=0, help="game i uses seed + i")
    g.add_argument("--challenge", choices=["tw-simple", "tw-cooking", "tw-coin_collector", "tw-treasure_hunter"],
                   help="textworld: a tw-make challenge instead of custom games")
    g.add_argument("--challenge-args", default="", help='textworld: e.g. "--recipe 1 --take 1 --go 1" or '
                                                        '"--rewards dense --goal detailed"')
    g.add_argument("--world-size", type=int, default=2, help="textworld custom: rooms")
    g.add_argument("--nb-objects", type=int, default=3, help="textworld custom: objects")
    g.add_argument("--quest-length", type=int, default=4, help="textworld custom: quest length")
    g.add_argument("--split", default="train", choices=["train", "valid_seen", "valid_unseen"], help="alfworld split")
    g.add_argument("--task-types", default="", help="alfworld: comma-separated task types (default all six)")
    g.add_argument("--official", action="store_true",
                   help="alfworld: index the official games under $ALFWORLD_DATA (alfworld-download) into --out")
    g.add_argument("--force", action="store_true", help="regenerate even if a cached identical set exists")
    g.set_defaults(func=_make_games)

    def env_flags(q, **defaults):  # train: None = keep the config's value; eval: the EnvConfig defaults
        def h(name):
            return _field_doc("env", name)

        q.add_argument("--process-pool", action=argparse.BooleanOptionalAction, default=defaults.get("process_pool"),
                       help=h("process_pool"))
        q.add_argument("--step-timeout", type=float, default=defaults.get("step_timeout"), metavar="S",
                       help=h("step_timeout_s"))
        q.add_argument("--max-env-error-frac", type=float, default=defaults.get("max_env_error_frac"),
                       metavar="F", help=h("max_env_error_frac"))

    def model_args(q, default="embedded"):
        q.add_argument("--model", default=default, help="'embedded', HF id, model dir, SFT dir or run dir")
        q.add_argument("--device", default="auto", help="auto (CUDA if available), cpu, cuda, ...")
        q.add_argument("--dtype", default="auto", help="auto (bf16 on CUDA, fp32 on CPU), float32, bfloat16")

    e = sub.add_parser("eval", help="success rate on a game set")
    model_args(e)
    e.add_argument("--games", required=True)
    e.add_argument("--out", help="write the result JSON here")
    e.add_argument("--max-turns", type=int, default=8)
    e.add_argument("--temperature", type=float, default=0.0)
    e.add_argument("--batch-size", type=int, default=8)
    e.add_argument("--show-admissible", action="store_true", help="list the admissible commands in each observation")
    e.add_argument("--show-inventory", action="store_true", help="append the inventory to each observation")
    env_defaults = EnvConfig()
    env_flags(e, process_pool=env_defaults.process_pool, step_timeout=env_defaults.step_timeout_s,
              max_env_error_frac=env_defaults.max_env_error_frac)
    e.set_defaults(func=_eval)

    s = sub.add_parser("sft", help="SFT warm-up on the games' walkthroughs (TRL SFTTrainer)")
    model_args(s)
    s.add_argument("--games", required=True)
    s.add_argument("--out", required=True)
    s.add_argument("--epochs", type=float, default=1.0)
    s.add_argument("--lr", type=float, default=5e-5)
    s.add_argument("--batch-size", type=int, default=4)
    s.add_argument("--max-turns", type=int, default=None)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--lora-rank", type=int, default=0)
    s.add_argument("--show-admissible", action="store_true",
                   help="list the admissible commands in each observation (use the same setting for RL and eval)")
    s.add_argument("--show-inventory", action="store_true",
                   help="append the inventory to each observation (use the same setting for RL and eval)")
    s.set_defaults(func=_sft)

    t = sub.add_parser("train", help="multi-turn RL (PPO / GRPO / RLOO)")
    t.add_argument("--out", required=True, help="run directory")
    t.add_argument("--config", help="YAML config (sections env, reward, algo, model, train); flags override it")
    t.add_argument("--init", help="start from this model (SFT dir, run dir, HF id; default: model.name)")
    t.add_argument("--resume", action="store_true", help="continue from the run dir's latest checkpoint")
    t.add_argument("--algo", choices=tuple(ALGO_PRESETS))
    t.add_argument("--reward", choices=REWARDS)
    t.add_argument("--games")
    for flag, typ in [("--max-turns", int), ("--group-size", int), ("--steps", int), ("--games-per-step", int),
                      ("--lr", float), ("--epochs", int), ("--minibatch-size", int), ("--kl-coef", float),
                      ("--keep-top-std", float), ("--seed", int), ("--format-penalty", float),
                      ("--temperature", float), ("--lora-rank", int)]:
        t.add_argument(flag, type=typ)
    t.add_argument("--device")
    t.add_argument("--dtype")
    env_flags(t)
    t.add_argument("--gradient-checkpointing", action="store_true", default=None,
                   help="recompute activations in updates: less memory for long (e.g. ALFWorld) trajectories")
    t.set_defaults(func=_train)

    d = sub.add_parser("demo", help="base → SFT → RL on held-out cooking games (12-20 min on 2 CPU cores, measured)")
    d.add_argument("--out", default="runs/demo")
    d.add_argument("--fast", action="store_true", help="tiny budget (also AGENTRL_FAST=1)")
    d.add_argument("--algo", default="ppo", choices=tuple(ALGO_PRESETS))
    d.add_argument("--reward", default="dense", choices=REWARDS)
    d.add_argument("--model", default="embedded")
    d.add_argument("--seed", type=int, default=0)
    d.add_argument("--rl-steps", type=int)
    d.set_defaults(func=_demo)
    return p


USER_ERRNOS = {errno.ENOENT, errno.EEXIST, errno.ENOTDIR, errno.EISDIR, errno.EACCES, errno.EPERM, errno.ENOSPC,
               errno.EDQUOT, errno.EROFS, errno.ENAMETOOLONG, errno.ELOOP}
"""OSErrors that come from the user's paths or disk (not from a bug): main() reports them in one line."""


def is_user_error(e: BaseException) -> bool:
    """Whether main() reports `e` as one line (bad input, bad file, full disk) rather than let its traceback show a
    bug: configuration, game and model errors (ValueError subclasses), ValueErrors, too many env errors
    (TooManyEnvErrors), a missing module (with our install hint), and OSErrors about a path (a filename, or an errno
    of USER_ERRNOS)."""
    from .envs.base import GameLoadError, GameSetError, TooManyEnvErrors

    if isinstance(e, (ConfigError, GameSetError, GameLoadError, TooManyEnvErrors, ValueError, ModuleNotFoundError)):
        return True
    return isinstance(e, OSError) and (e.filename is not None or e.errno in USER_ERRNOS
                                       or isinstance(e, (FileNotFoundError, FileExistsError, PermissionError,
                                                         NotADirectoryError, IsADirectoryError)))


def error_line(cmd: str, e: BaseException) -> str:
    """`agentrl CMD: error: MESSAGE` on one line (multi-line messages, e.g. YAML's, are joined)."""
    if isinstance(e, OSError) and e.filename is not None and e.strerror:
        message = f"{e.strerror}: {e.filename}" + (f" -> {e.filename2}" if e.filename2 else "")
    else:
        message = str(e) or type(e).__name__
    return f"agentrl {cmd}: error: {' '.join(message.split())}"


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    a = build_parser().parse_args(argv)
    try:
        a.func(a)
    except Exception as e:
        if not is_user_error(e):
            raise  # a bug: its traceback is what a report needs
        print(error_line(a.cmd, e), file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
