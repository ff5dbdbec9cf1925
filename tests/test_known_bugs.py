"""The silent bugs of multi-turn RL that real frameworks shipped, one test each, each with a negative control.

Every test runs a check on what the library produces (it must pass) and then on the same pipeline with the bug
planted by a monkeypatch or a hand-written buggy variant (the check must fail), so no check can pass vacuously. The
checks the chapters' exercises also run live in agentrl_lib/known_bugs.py.

| bug (where it shipped)                                                   | check                                      |
|--------------------------------------------------------------------------|--------------------------------------------|
| re-tokenising decoded text instead of training the sampled ids (TRL 5224) | trained ids == sampled ids; log-probs agree |
| role / template tokens inside the loss mask (Unsloth 5673, verifiers 47)  | mask == exactly the sampled reply tokens   |
| a logits warper at sampling, absent from the logged log-probs (top-k 50)  | rank ≥ 50 tokens occur; sampler gap ≈ 0    |
| position ids built from the wrong length (meow-tea-taro)                  | batched rollout log-probs == unbatched     |
| padding / post-eos tokens attended across turns of the KV cache           | batched rollout log-probs == unbatched     |
| a lost dense-reward game out-scoring a won one (meow-tea-taro)            | every win > every non-win                  |
| a group of one episode silently removing the GRPO/RLOO baseline           | advantage 0, finite, counted               |
| the loss counting the gaps between turns as response length (OpenRLHF 1243) | loss == brute-force token mean           |
| REINFORCE++ reward-to-go reset at observation spans (verl, "reset after EOS") | won episode's early turns keep credit |
| bi-level GAE turn boundaries inferred from non-zero rewards (RAGEN)       | A_t = G_k − V_t with the real turn ends    |
| TextWorld's running score used as the step reward (a first wrapper's bug) | step rewards == score increments, Σ = max  |
| outcome score on the last ATTENDED token, an observation (verl 6392, miles 1827) | won episode's turns keep its reward (GAE, REINFORCE++) |
"""  # noqa: E501  (a table: one row per bug, its check beside it)
from __future__ import annotations

import pytest
import torch

import agentrl_lib.generation as generation_mod
from agentrl_lib import losses
from agentrl_lib.advantages import grpo_advantages, rloo_advantages
from agentrl_lib.config import AlgoConfig
from agentrl_lib.envs.pool import SerialPool
from agentrl_lib.generation import HFGenerator
from agentrl_lib.known_bugs import (
    check_reinforce_pp_keeps_credit_across_observations,
    check_singleton_groups,
    check_step_rewards_are_score_increments,
    check_wins_outscore_non_wins,
    sparse_three_turn_batch,
)
from agentrl_lib.models import load_policy
from agentrl_lib.policy import token_forward
from agentrl_lib.prompts import ChatFormat
from agentrl_lib.rewards import dense_turn_rewards
from agentrl_lib.rollout import collate, rollout
from agentrl_lib.sft import expert_examples

EOS_BIAS = 10.0
"""Added to the end-of-turn logit of the tiny random model, so replies end at different lengths (p(eos) ≈ 0.3 per
token) and the batch has post-eos padding and in-block padding holes between turns."""


@pytest.fixture(scope="module")
def tiny(tiny_model_dir):
    model, tok = load_policy(tiny_model_dir, device="cpu")
    eos = ChatFormat(tok).eos_id

    def bias_eos(module, args, out):  # a forward hook on the output layer: generation and training both see it
        out = out.clone()
        out[..., eos] += EOS_BIAS
        return out

    model.get_output_embeddings().register_forward_hook(bias_eos)
    return model, tok


@pytest.fixture(scope="module")
def tiny_plain(tiny_model_dir):
    """The tiny random model without the eos bias: replies run to max_new_tokens, so many random tokens are decoded
    together (text whose re-tokenisation differs from the sampled ids)."""
    return load_policy(tiny_model_dir, device="cpu")


def play(tiny, games, n_episodes=4, max_turns=3, max_new_tokens=6, temperature=1.0, seed=0):
    model, tok = tiny
    torch.manual_seed(seed)
    paths = [games.games[i % len(games.games)].path for i in range(n_episodes)]
    trajs, stats = rollout(HFGenerator(model, tok), tok, SerialPool(n_episodes), paths, max_turns=max_turns,
                           max_new_tokens=max_new_tokens, temperature=temperature)
    return trajs, stats


# ---------------------------------------------------------------------------------------------------------- checks
def check_logprobs_reproduce(model, tok, trajs, temperature=1.0, tol=1e-4) -> None:
    """The trainer's forward of each trajectory's ids (right-padded, positions 0..n-1) reproduces the log-probs the
    rollout logged for them. Fails for re-tokenised ids, wrong positions, leaked padding or a hidden warper."""
    batch = collate(trajs, tok.pad_token_id, "cpu")
    with torch.no_grad():
        out = token_forward(model, batch["input_ids"], batch["attention_mask"], batch["mask"], temperature)
    gap = ((out["logprobs"] - batch["behaviour_logprobs"]).abs() * batch["mask"]).max().item()
    assert gap < tol, f"rollout log-probs differ from the trainer's by {gap:.3g}"


def policy_spans(tr) -> list[list[int]]:
    spans, cur = [], []
    for i, m in zip(tr.ids, tr.mask):
        if m:
            cur.append(i)
        elif cur:
            spans.append(cur)
            cur = []
    return spans + ([cur] if cur else [])


def check_mask_is_exactly_the_replies(trajs, sampled: list[list[int]], chat: ChatFormat) -> None:
    """Each trajectory's mask-1 spans are exactly its sampled replies, in order, and hold no template role token."""
    start_id = chat.tok.convert_tokens_to_ids("<|im_start|>")
    by_traj = iter(sampled)
    for tr in trajs:
        spans = policy_spans(tr)
        assert len(spans) == tr.n_turns, f"{len(spans)} policy spans for {tr.n_turns} turns"
        for span in spans:
            assert start_id not in span, "a chat-template role token is inside the loss mask"
        want = [next(by_traj) for _ in range(tr.n_turns)]
        for span, ids in zip(spans, want):
            assert span == ids, "the trained ids are not the sampled ids"


def record_sampled(monkeypatch, retokenise_with=None) -> list[list[list[int]]]:
    """Wrap HFGenerator.generate to record what was sampled each turn; optionally plant TRL 5224 (the trajectory gets
    tokenizer(decode(sampled ids)) instead of the sampled ids)."""
    calls: list[list[list[int]]] = []
    real = HFGenerator.generate

    def wrapped(gen, max_new_tokens, temperature):
        out = real(gen, max_new_tokens, temperature)
        eos_id = gen.eos_id
        calls.append([list(x) for x in out.ids])
        if retokenise_with is not None:
            tok = retokenise_with
            ids = []
            for row in out.ids:
                body = [x for x in row if x != eos_id]
                re = tok(tok.decode(body), add_special_tokens=False)["input_ids"]
                ids.append(re + [x for x in row if x == eos_id])
            out.ids = ids
            out.logprobs = [lp[:len(r)] + [0.0] * max(0, len(r) - len(lp)) for lp, r in zip(out.logprobs, ids)]
        return out

    monkeypatch.setattr(HFGenerator, "generate", wrapped)
    return calls


def flatten_per_traj(calls, trajs) -> list[list[int]]:
    """Reorder the recorded per-call rows into per-trajectory replies (rows are the live episodes, in order)."""
    live = list(range(len(trajs)))
    per_traj: dict[int, list[list[int]]] = {i: [] for i in live}
    for rows in calls:
        for i, ids in zip(live, rows):
            per_traj[i].append(ids)
        live = [i for i in live if len(per_traj[i]) < trajs[i].n_turns]
    return [ids for i in range(len(trajs)) for ids in per_traj[i]]


# ------------------------------------------------------------------------------------------------- the bug tests
def test_trained_ids_are_the_sampled_ids_not_a_retokenisation(tiny_plain, cooking_games, monkeypatch):
    model, tok = tiny_plain
    chat = ChatFormat(tok)
    calls = record_sampled(monkeypatch)
    trajs, _ = play(tiny_plain, cooking_games, max_new_tokens=12)
    check_mask_is_exactly_the_replies(trajs, flatten_per_traj(calls, trajs), chat)
    check_logprobs_reproduce(model, tok, trajs)
    # negative control: plant TRL 5224 (train on tokenizer(decode(sampled)))
    calls = record_sampled(monkeypatch, retokenise_with=tok)
    trajs, _ = play(tiny_plain, cooking_games, max_new_tokens=12)
    with pytest.raises(AssertionError, match="not the sampled ids|policy spans|differ"):
        check_mask_is_exactly_the_replies(trajs, flatten_per_traj(calls, trajs), chat)
    with pytest.raises(AssertionError, match="differ"):
        check_logprobs_reproduce(model, tok, trajs)


def test_no_template_or_environment_token_in_the_loss_mask(tiny, cooking_games, monkeypatch):
    model, tok = tiny
    chat = ChatFormat(tok)
    calls = record_sampled(monkeypatch)
    trajs, _ = play(tiny, cooking_games)
    check_mask_is_exactly_the_replies(trajs, flatten_per_traj(calls, trajs), chat)
    # the SFT examples obey the same rule: the mask is exactly the walkthrough's actions and their end tokens
    for ex, game in zip(expert_examples(cooking_games, chat), cooking_games.games):
        spans = policy_spans(type("T", (), {"ids": ex["input_ids"], "mask": ex["assistant_masks"]})())
        assert spans == [chat.action_ids(a) for a in game.walkthrough]
    # negative control: the Unsloth 5673 / verifiers 47 mistake, a mask that runs from the first reply to the end
    # (the user turns and role headers between replies included)
    for tr in trajs:
        tr.mask = [0] * tr.prompt_len + [1] * (len(tr.ids) - tr.prompt_len)
    with pytest.raises(AssertionError, match="role token|policy spans"):
        check_mask_is_exactly_the_replies(trajs, flatten_per_traj(calls, trajs), chat)


def test_sampling_has_no_hidden_warper(tiny_model_dir, cooking_games, monkeypatch):
    """Item 1 of the correctness issue: transformers fills an unset top_k with 50. At T = 1 the tiny random model's
    distribution is nearly uniform over 49k tokens, so plain sampling draws tokens of rank >= 50 almost always."""
    from transformers.generation.logits_process import LogitsProcessorList

    model, tok = load_policy(tiny_model_dir, device="cpu")  # no eos bias: long replies, many samples
    processors: list[list[str]] = []
    orig_call = LogitsProcessorList.__call__

    def spy(self, *a, **k):
        processors.append([type(p).__name__ for p in self])
        return orig_call(self, *a, **k)

    monkeypatch.setattr(LogitsProcessorList, "__call__", spy)

    def ranks_and_gap():
        processors.clear()
        torch.manual_seed(0)
        trajs, stats = rollout(HFGenerator(model, tok), tok, SerialPool(2), [cooking_games.games[0].path] * 2,
                               max_turns=2,
                               max_new_tokens=8, temperature=1.0)
        batch = collate(trajs, tok.pad_token_id, "cpu")
        with torch.no_grad():
            hidden = model.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
            logits = model.lm_head(hidden[:, :-1])
        sel = batch["mask"][:, 1:].bool()
        chosen = logits.gather(-1, batch["input_ids"][:, 1:, None]).squeeze(-1)
        rank = (logits > chosen[..., None]).sum(-1)[sel]
        return rank, stats.sampler_gap, trajs

    rank, gap, trajs = ranks_and_gap()
    assert (rank >= 50).float().mean() > 0.5, "tail tokens are never sampled: a top-k warper is active"
    assert gap < 1e-4 and all(p == ["TemperatureLogitsWarper"] or p == [] for p in processors), processors
    check_logprobs_reproduce(model, tok, trajs)
    # negative control: plant the bug (a sampling config that leaves top_k at transformers' default of 50)
    real = generation_mod.sampling_config

    def leaky(temperature, max_new_tokens, eos_id, pad_id):
        cfg = real(temperature, max_new_tokens, eos_id, pad_id)
        cfg.top_k = 50
        return cfg

    monkeypatch.setattr(generation_mod, "sampling_config", leaky)
    rank, gap, trajs = ranks_and_gap()
    assert (rank >= 50).sum() == 0 and gap > 1.0
    assert any("TopKLogitsWarper" in p for p in processors)
    with pytest.raises(AssertionError, match="differ"):
        check_logprobs_reproduce(model, tok, trajs)


def test_positions_follow_the_attention_mask_not_the_padded_width(tiny, cooking_games):
    """Left-padded batched rollouts with a KV cache across turns must give every row the positions of its own
    contiguous trajectory. Planted bug: positions from the padded width (cache length + arange)."""
    model, tok = tiny
    trajs, _ = play(tiny, cooking_games, n_episodes=4, max_turns=3)
    assert len({len(t.ids) for t in trajs}) > 1, "rows of different lengths are needed for padding"
    check_logprobs_reproduce(model, tok, trajs)

    def width_positions(module, args, kwargs):
        ids, attn = kwargs.get("input_ids"), kwargs.get("attention_mask")
        if ids is not None and attn is not None and kwargs.get("position_ids") is not None:
            past = attn.shape[1] - ids.shape[1]
            kwargs["position_ids"] = torch.arange(past, attn.shape[1]).expand(ids.shape[0], -1)
        return args, kwargs

    handle = model.register_forward_pre_hook(width_positions, with_kwargs=True)
    try:
        trajs, _ = play(tiny, cooking_games, n_episodes=4, max_turns=3)
    finally:
        handle.remove()
    with pytest.raises(AssertionError, match="differ"):
        check_logprobs_reproduce(model, tok, trajs)


def test_padding_and_post_eos_tokens_stay_invisible_across_turns(tiny, cooking_games, monkeypatch):
    model, tok = tiny
    trajs, _ = play(tiny, cooking_games, n_episodes=4, max_turns=3)
    lens = [[e - s for s, e in zip([t.prompt_len] + t.turn_ends[:-1], t.turn_ends)] for t in trajs]
    assert any(not all(t.truncated) for t in trajs) and len({x for row in lens for x in row}) > 1, \
        "replies of different lengths (post-eos padding) are needed"
    check_logprobs_reproduce(model, tok, trajs)

    # negative control: the attention mask of each generated block is left at 1 after a row's eos
    real = HFGenerator.generate

    def leaky(gen, max_new_tokens, temperature):
        out = real(gen, max_new_tokens, temperature)
        n_new = max(len(r) for r in out.ids)
        gen.attn[:, gen.attn.shape[1] - n_new:] = 1
        return out

    monkeypatch.setattr(HFGenerator, "generate", leaky)
    trajs, _ = play(tiny, cooking_games, n_episodes=4, max_turns=3)
    with pytest.raises(AssertionError, match="differ"):
        check_logprobs_reproduce(model, tok, trajs)


def test_a_lost_dense_game_never_outscores_a_won_one():
    check_wins_outscore_non_wins(dense_turn_rewards)

    # negative control: the reference code's normalisation (won games only, by the number of positive increments)
    def reference(increments, max_score, won):
        if won:
            pos = sum(1 for d in increments if d > 0) or 1
            return [d / max_score / pos for d in increments]
        return [d / max_score for d in increments]

    with pytest.raises(AssertionError, match="lost game"):
        check_wins_outscore_non_wins(reference)


@pytest.mark.filterwarnings(r"ignore:std\(\)")  # the planted naive GRPO takes the std of one value
def test_a_group_of_one_has_no_baseline_and_is_counted(tiny_model_dir):
    for est in (grpo_advantages, rloo_advantages):
        check_singleton_groups(est)
    from agentrl_lib.config import ConfigError, RunConfig
    from agentrl_lib.parts import run_parts

    with pytest.raises(ConfigError, match="group_size >= 2"):  # configured groups of one are refused up front
        run_parts(RunConfig(algo=AlgoConfig.from_preset("grpo", group_size=1)))

    # negative controls: GRPO without the guard (std of one return is NaN), and a "baseline" of the batch mean
    def naive_grpo(returns, groups):
        adv = torch.zeros_like(returns)
        for g in groups.unique():
            r = returns[groups == g]
            adv[groups == g] = (r - r.mean()) / (r.std() + 1e-6)
        return adv

    def batch_mean_fallback(returns, groups):
        adv = rloo_advantages(returns, groups)
        single = torch.tensor([(groups == g).sum() == 1 for g in groups])
        return torch.where(single, returns - returns.mean(), adv)

    with pytest.raises(AssertionError, match="non-finite"):
        check_singleton_groups(naive_grpo)
    with pytest.raises(AssertionError, match="without a baseline"):
        check_singleton_groups(batch_mean_fallback)


def check_loss_is_token_mean(loss_fn) -> None:
    """Two turns separated by environment tokens: the loss is the mean over the policy tokens only."""
    torch.manual_seed(0)
    mask = torch.tensor([[0, 0, 1, 1, 0, 0, 0, 0, 1, 1, 1, 0], [0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0]],
                        dtype=torch.float32)
    logp = torch.randn(2, 12) * 0.1 - 1
    old = logp + torch.randn(2, 12) * 0.05
    adv = torch.randn(2, 12)
    loss, _ = loss_fn(logp, old, adv, mask, AlgoConfig(clip_low=0.2, clip_high=0.2))
    terms = []
    for b in range(2):
        for t in range(12):
            if mask[b, t]:
                r = torch.exp(logp[b, t] - old[b, t])
                terms.append(min(r * adv[b, t], torch.clamp(r, 0.8, 1.2) * adv[b, t]).item())
    want = -sum(terms) / len(terms)
    assert abs(loss.item() - want) < 1e-6, f"loss {loss.item():.6f} != token mean {want:.6f}"


def test_loss_does_not_count_the_gaps_between_turns(monkeypatch):
    check_loss_is_token_mean(losses.policy_loss)

    # negative control: OpenRLHF 1243, the response length taken from the first to the last policy token
    def span_mean(x, mask, count=None):        # same signature as losses.masked_mean (count: a DDP denominator)
        m = mask.float()
        idx = m.nonzero()
        span = sum((idx[idx[:, 0] == b, 1].max() - idx[idx[:, 0] == b, 1].min() + 1).item()
                   for b in idx[:, 0].unique())
        return (x * m).sum() / span

    monkeypatch.setattr(losses, "masked_mean", span_mean)
    with pytest.raises(AssertionError, match="token mean"):
        check_loss_is_token_mean(losses.policy_loss)


# ------------------------------------------------------------------ issue 13: credit assignment across turns
def test_reinforce_pp_reward_to_go_does_not_reset_at_observation_spans(monkeypatch):
    from agentrl_lib import advantages

    check_reinforce_pp_keeps_credit_across_observations(advantages.ESTIMATORS["reinforce_pp"])

    # negative control: verl's compute_reinforce_plus_plus_outcome_advantage, running return × response mask
    def verl_reward_to_go(rewards, mask, turn_end, gamma=1.0):
        out = torch.zeros_like(rewards)
        running = torch.zeros(rewards.shape[0])
        for t in reversed(range(rewards.shape[1])):
            running = rewards[:, t] + gamma * running
            out[:, t] = running
            running = running * mask[:, t]  # "reset after EOS"
        return out * mask

    monkeypatch.setattr(advantages, "reward_to_go", verl_reward_to_go)
    with pytest.raises(AssertionError, match="lost its credit"):
        check_reinforce_pp_keeps_credit_across_observations(advantages.ESTIMATORS["reinforce_pp"])


def check_bilevel_turn_boundaries(estimator) -> None:
    """Bi-level GAE on a 3-turn episode whose middle turn earns 0 (rewards 0.5, 0, 1), λ = 1, γ = 0.5, γ_tok = 1:
    the turn-end token of turn k must carry A_k = G_k − V(end of turn k), with G = (1, 0.5, 1) read from the
    trajectory's turn ends. Inferring the boundaries from non-zero rewards (RAGEN's code) merges turn 2 into turn 3:
    turn 2's end is no longer terminal within its turn and bootstraps from turn 3's tokens with γ_tok."""
    from agentrl_lib.advantages import AdvantageInputs
    from agentrl_lib.config import AlgoConfig

    mask, turn_end, turns = sparse_three_turn_batch()
    rewards = torch.zeros_like(mask)
    rewards[0, [2, 7, 11]] = torch.tensor([0.5, 0.0, 1.0])
    rewards[1, 10] = 1.0
    values = torch.linspace(-0.3, 0.9, 13).repeat(2, 1)
    inp = AdvantageInputs(token_rewards=rewards, mask=mask, returns=rewards.sum(1), group_ids=torch.tensor([0, 0]),
                          turn_end=turn_end, values=values)
    adv, _ = estimator(inp, AlgoConfig(advantage="bilevel_gae", gamma=0.5, lam=1.0, gamma_token=1.0,
                                       normalize_advantages=False))
    G = [0.5 + 0.5 * (0.0 + 0.5 * 1.0), 0.0 + 0.5 * 1.0, 1.0]
    for k, pos in enumerate(turns[0]):
        for t in pos:  # λ = γ_tok = 1: every token of turn k has A_t = G_k − V_t
            assert adv[0, t].item() == pytest.approx(G[k] - values[0, t].item(), abs=1e-5), \
                f"turn {k + 1} of the episode got the credit of merged turns"


def test_bilevel_gae_takes_turn_boundaries_from_turn_ends_not_rewards(monkeypatch):
    from agentrl_lib import advantages

    check_bilevel_turn_boundaries(advantages.ESTIMATORS["bilevel_gae"])

    # negative control: RAGEN's compute_bi_level_gae_advantage_return, turn ends = tokens with a non-zero reward
    real = advantages.bilevel_gae

    def ragen_bilevel(rewards, values, mask, turn_end, *args):
        return real(rewards, values, mask, ((rewards != 0) & (mask > 0)).float(), *args)

    monkeypatch.setattr(advantages, "bilevel_gae", ragen_bilevel)
    with pytest.raises(AssertionError, match="merged turns"):
        check_bilevel_turn_boundaries(advantages.ESTIMATORS["bilevel_gae"])


def last_attended_placement(rewards: list[float], turn_ends: list[int], attention_mask: torch.Tensor) -> torch.Tensor:
    """verl's placement (PR 6392, miles PR 1827): the episode's outcome (the sum of its turn rewards) on the last
    token with attention_mask 1, whatever that token is. When the sequence ends in an environment observation (a
    mask-0 span), that token is not a policy token."""
    out = torch.zeros(attention_mask.shape[0], dtype=torch.float32)
    out[int(attention_mask.sum()) - 1] = sum(rewards)
    return out


def check_outcome_reaches_policy_tokens(place) -> None:
    """Two sparse 3-turn episodes that both END IN AN OBSERVATION (trailing mask-0 tokens; the won one scores 1 on
    its last turn): placed by `place(turn_rewards, turn_ends, attention_mask)`, the outcome must reach the won
    episode's policy tokens under GAE (zero values, γ = λ = 1: every won token has advantage 1) and REINFORCE++ (every
    won token above every lost one). On the last attended token — an observation token, mask 0 — GAE never reads
    it: the win is lost. (The library's reward-to-go carries a reward through mask-0 tokens, so its REINFORCE++ keeps
    it here; verl's, which also resets at observation spans, loses it too.)"""
    from agentrl_lib.advantages import ESTIMATORS, AdvantageInputs
    from agentrl_lib.config import AlgoConfig

    mask, turn_end, _ = sparse_three_turn_batch()
    attn = torch.ones_like(mask, dtype=torch.long)
    assert (mask[:, -1] == 0).all(), "the case needs episodes that end in an observation"
    turn_rs = [[0.0, 0.0, 1.0], [0.0, 0.0, 0.0]]
    ends = [row.nonzero().flatten().tolist() for row in turn_end]
    rewards = torch.stack([place(r, e, a) for r, e, a in zip(turn_rs, ends, attn)])
    inp = AdvantageInputs(token_rewards=rewards, mask=mask, returns=torch.tensor([1.0, 0.0]),
                          group_ids=torch.tensor([0, 0]), turn_end=turn_end, values=torch.zeros_like(mask))
    adv, _ = ESTIMATORS["gae"](inp, AlgoConfig(advantage="gae", gamma=1.0, lam=1.0, normalize_advantages=False))
    won = adv[0][mask[0] > 0]
    assert torch.allclose(won, torch.ones_like(won)), f"the won episode lost its reward under GAE: {won.tolist()}"
    adv, _ = ESTIMATORS["reinforce_pp"](inp, AlgoConfig(advantage="reinforce_pp", gamma=1.0))
    assert adv[0][mask[0] > 0].min() > adv[1][mask[1] > 0].max(), "the won episode lost its reward under REINFORCE++"


def test_outcome_on_turn_end_not_on_the_last_attended_observation_token():
    from agentrl_lib.rewards import place_on_tokens

    check_outcome_reaches_policy_tokens(lambda r, ends, attn: place_on_tokens(r, ends, attn.shape[0]))

    # negative control: verl's placement on the last attended token (here an observation token, mask 0)
    with pytest.raises(AssertionError, match="lost its reward under GAE"):
        check_outcome_reaches_policy_tokens(last_attended_placement)


def test_step_reward_is_the_score_increment_not_the_running_score(cooking_games):
    from agentrl_lib.envs.textworld import TextWorldEnv

    check_step_rewards_are_score_increments(cooking_games, TextWorldEnv)

    # negative control: a wrapper that passes textworld's running score on as the reward
    class RunningScoreEnv(TextWorldEnv):
        def step(self, action):
            res = super().step(action)
            res.reward = res.info.score
            return res

    with pytest.raises(AssertionError, match="is not the score increment"):
        check_step_rewards_are_score_increments(cooking_games, RunningScoreEnv)
