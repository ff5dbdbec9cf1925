"""train.max_tokens_per_microbatch: gradient accumulation over token-budget micro-batches gives the minibatch's
gradient (the minibatch's token count stays the loss denominator), with a negative control that plants per-micro-batch
means (the mistake every hand-written accumulation loop makes first)."""
import copy
import functools
from pathlib import Path

import pytest
import torch

import agentrl_lib.policy as policy_mod
import agentrl_lib.trainer as trainer_mod
import agentrl_lib.update as update_mod
from agentrl_lib.config import AlgoConfig, ConfigError, EnvConfig, ModelConfig, RewardConfig, RunConfig, TrainConfig
from agentrl_lib.envs.pool import SerialPool
from agentrl_lib.policy import token_forward
from agentrl_lib.trainer import Trainer
from agentrl_lib.update import microbatches, select

from helpers import ParityEnv, scripted_games


def test_microbatches_partition_the_rows_within_the_budget():
    lengths = [10, 50, 30, 30, 5, 70]
    parts = microbatches(lengths, 60)
    assert sorted(i for p in parts for i in p) == list(range(len(lengths)))   # every row exactly once
    for p in parts:
        assert len(p) == 1 or len(p) * max(lengths[i] for i in p) <= 60       # a row over budget stands alone
    assert [5] in parts and [1] in parts                                        # 70 and 50 alone; 30 + 30 together
    assert microbatches(lengths, 0) == [list(range(6))]
    with pytest.raises(ConfigError, match="max_tokens_per_microbatch"):
        TrainConfig(max_tokens_per_microbatch=-1).validate()


def _gradients(algo: str, budget: int, tiny_model_dir, tmp_path, name: str, train_fields: dict | None = None,
               **algo_fields) -> tuple[dict, dict, list]:
    """One RL step on the scripted game; the gradients the optimizer was about to apply, the metrics row, and the
    micro-batches cut."""
    games = scripted_games(tmp_path / "games")
    algo_fields = {"kl_coef": 0.01, **algo_fields}
    cfg = RunConfig(env=EnvConfig(games=str(games), max_turns=2), reward=RewardConfig(kind="dense"),
                    algo=AlgoConfig.from_preset(algo, group_size=4, **algo_fields), model=ModelConfig(device="cpu"),
                    train=TrainConfig(**{**dict(steps=1, games_per_step=2, minibatch_size=8, lr=1e-3, max_new_tokens=6,
                                                temperature=1.0, seed=1, max_tokens_per_microbatch=budget),
                                         **(train_fields or {})}))
    trainer = Trainer(cfg, tmp_path / name, init=tiny_model_dir, pool=SerialPool(8, factory=ParityEnv),
                      progress=False)
    grads: dict[str, torch.Tensor] = {}

    def capture(*args, **kwargs):  # the update's gradients, before any optimizer changes the weights
        params = list(trainer.policy.named_parameters())
        if trainer.value_head is not None:
            params += [("value_head." + n, p) for n, p in trainer.value_head.named_parameters()]
        grads.update({n: p.grad.detach().clone() for n, p in params if p.grad is not None})

    trainer.opt.step = capture
    cuts: list = []
    real = update_mod.microbatches
    update_mod.microbatches = lambda lengths, b: cuts.append(real(lengths, b)) or cuts[-1]
    try:
        row = trainer.step(0)
    finally:
        update_mod.microbatches = real
        trainer.close()
    assert row["skipped_update"] == 0.0 and grads
    return grads, row, cuts


def _max_rel_diff(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max(((a[k] - b[k]).norm() / (b[k].norm() + 1e-12)).item() for k in a)


@pytest.mark.trains
def test_microbatched_update_is_the_minibatch_update(tiny_model_dir, tmp_path, monkeypatch):
    algo = "ppo"  # the critic's value loss and the KL term ride along; GRPO's update is the same code without them
    plain, row_plain, _ = _gradients(algo, 0, tiny_model_dir, tmp_path, "plain")
    micro, row_micro, cuts = _gradients(algo, 300, tiny_model_dir, tmp_path, "micro")
    update_cuts = [c for c in cuts if sum(map(len, c)) == 8]
    assert any(len(c) > 2 for c in update_cuts), f"the budget did not split the minibatch: {cuts}"
    assert any(len(p) > 1 for c in update_cuts for p in c), "no micro-batch held two rows (padding never trimmed)"
    assert _max_rel_diff(micro, plain) < 1e-4
    for key in ("policy_loss", "entropy", "clip_frac", "approx_kl", "kl_ref", "grad_norm", "return_mean") + \
            (("value_loss", "explained_variance") if algo == "ppo" else ()):
        assert row_micro[key] == pytest.approx(row_plain[key], rel=1e-4, abs=1e-6), key

    # negative control: each micro-batch's own token mean (n_tokens=None) is not the minibatch's gradient
    real = update_mod.minibatch_loss

    def per_microbatch_mean(forward, mb, algo, max_tokens, n_tokens, n_episodes):
        return real(forward, mb, algo, max_tokens)

    monkeypatch.setattr(update_mod, "minibatch_loss", per_microbatch_mean)
    wrong, _, _ = _gradients(algo, 300, tiny_model_dir, tmp_path, "wrong")
    assert _max_rel_diff(wrong, plain) > 1e-2


def _padded_batch(vocab: int, lengths: list[int], T: int) -> dict[str, torch.Tensor]:
    """Right-padded rows of the given lengths in a (B, T) batch, T past the longest (as a rollout batch pads a
    minibatch's rows to the batch's longest episode); policy tokens on the second half of each row."""
    g = torch.Generator().manual_seed(0)
    B = len(lengths)
    ids = torch.randint(0, vocab, (B, T), generator=g)
    attn, mask = torch.zeros(B, T, dtype=torch.long), torch.zeros(B, T)
    for i, n in enumerate(lengths):
        attn[i, :n] = 1
        mask[i, n // 2:n] = 1
    ids = ids * attn  # pad id 0 after each row's end
    old = -torch.rand(B, T, generator=g) * mask
    adv = torch.randn(B, T, generator=g) * mask
    return {"input_ids": ids, "attention_mask": attn, "mask": mask, "old_logprobs": old, "advantages": adv}


def test_rows_cut_to_their_longest_give_the_padded_update(tiny_model_dir, monkeypatch):
    """The update forwards a minibatch cut to its own longest row, not padded to the rollout batch's longest episode
    (Trainer._loss_and_backward: update.select, then accumulate_microbatches with budget 0): the same loss and gradient,
    less work. The negative control cuts one token too many and is caught."""
    from agentrl_lib.models import load_policy

    policy, tok = load_policy(tiny_model_dir, device="cpu", dtype="float32")
    algo = AlgoConfig.from_preset("grpo", entropy_coef=0.01)
    b = _padded_batch(len(tok), [9, 17, 23], T=40)
    idx = torch.arange(3)
    forward = functools.partial(token_forward, policy, temperature=1.0)

    def grads_of(loss_fn) -> tuple[float, dict]:
        policy.zero_grad(set_to_none=True)
        loss = loss_fn()
        return loss.item(), {n: p.grad.clone() for n, p in policy.named_parameters() if p.grad is not None}

    def padded():  # the rows as the rollout batch holds them: 40 columns
        loss, _ = update_mod.minibatch_loss(forward, b, algo)
        loss.backward()
        return loss

    def cut():  # the trainer's route: the minibatch's rows cut to 23 columns
        return update_mod.accumulate_microbatches(forward, select(b, idx), algo)[0]

    loss_pad, g_pad = grads_of(padded)
    loss_cut, g_cut = grads_of(cut)
    assert loss_cut == pytest.approx(loss_pad, rel=1e-5) and _max_rel_diff(g_cut, g_pad) < 1e-4

    # negative control: a cut one column short drops the longest row's last policy token
    real = update_mod.minibatch_loss
    monkeypatch.setattr(update_mod, "minibatch_loss", lambda forward, mb, *a: real(
        forward, {k: v[:, :-1] for k, v in mb.items()}, *a))
    loss_short, g_short = grads_of(cut)
    assert loss_short != pytest.approx(loss_pad, rel=1e-5) or _max_rel_diff(g_short, g_pad) > 1e-3


@pytest.mark.trains
def test_old_logprobs_from_the_behaviour_policy_skip_the_forward_and_give_the_same_update(tiny_model_dir, tmp_path,
                                                                                          monkeypatch):
    """algo.old_logprobs 'behaviour': π_old is the rollout's log-probs, no no-grad forward runs (GRPO: nothing else
    needs it; a critic still does, for its values), and in fp32 on a CPU the update is the recomputed one's. Negative
    control: behaviour log-probs shifted by one token are not π_old, and the gradient shows it."""
    calls: list[bool] = []
    real_forward = update_mod.token_forward

    def spy(*a, **k):
        calls.append(torch.is_grad_enabled())
        return real_forward(*a, **k)

    monkeypatch.setattr(update_mod, "token_forward", spy)  # the no-grad passes (update.no_grad_forward)
    monkeypatch.setattr(policy_mod, "token_forward", spy)  # the update's (policy.TokenModel)
    recomputed, row_r, _ = _gradients("grpo", 0, tiny_model_dir, tmp_path, "recompute", kl_coef=0.0)
    assert calls.count(False) >= 1 and "logprob_mismatch" in row_r
    calls.clear()
    behaviour, row_b, _ = _gradients("grpo", 0, tiny_model_dir, tmp_path, "behaviour", kl_coef=0.0,
                                     old_logprobs="behaviour")
    assert calls and calls.count(False) == 0, "a no-grad forward ran although π_old came from the rollout"
    assert _max_rel_diff(behaviour, recomputed) < 1e-3
    assert row_b["ratio_mean"] == pytest.approx(1.0, abs=1e-4) and row_b["clip_frac"] == 0.0
    calls.clear()
    _gradients("ppo", 0, tiny_model_dir, tmp_path, "behaviour-ppo", old_logprobs="behaviour")
    assert calls.count(False) >= 1, "the critic's values need the no-grad forward"
    with pytest.raises(ConfigError, match="old_logprobs"):
        AlgoConfig(old_logprobs="behaviour", tis="on").validate()

    # negative control: the rollout's log-probs one token off
    real_collate = trainer_mod.collate

    def shifted(*a, **k):
        batch = real_collate(*a, **k)
        batch["behaviour_logprobs"] = torch.roll(batch["behaviour_logprobs"], 1, dims=1)
        return batch

    monkeypatch.setattr(trainer_mod, "collate", shifted)
    wrong, _, _ = _gradients("grpo", 0, tiny_model_dir, tmp_path, "shifted", kl_coef=0.0, old_logprobs="behaviour")
    assert _max_rel_diff(wrong, recomputed) > 1e-2


@pytest.mark.slow
@pytest.mark.trains
def test_shared_prompts_and_group_minibatches_give_the_plain_update(tiny_model_dir, tmp_path, monkeypatch):
    """train.share_prefix (each group's first prompt forwarded once, in the no-grad pass and the update) gives the
    plain forward's gradients; train.group_minibatches cuts minibatches of whole groups, whose update then equals the
    plain update over the same rows. Negative control: random-row minibatches of 4 are not the whole-group ones."""
    plain, row_plain, _ = _gradients("ppo", 0, tiny_model_dir, tmp_path, "plain", {"share_prefix": False})
    shared, row_shared, _ = _gradients("ppo", 0, tiny_model_dir, tmp_path, "shared", {"share_prefix": True})
    assert _max_rel_diff(shared, plain) < 1e-4
    assert row_shared["policy_loss"] == pytest.approx(row_plain["policy_loss"], rel=1e-4, abs=1e-6)

    seen: list[list[int]] = []
    real = Trainer._loss_and_backward

    def spy(self, batch, idx):
        seen.append(sorted(idx.tolist()))
        return real(self, batch, idx)

    monkeypatch.setattr(Trainer, "_loss_and_backward", spy)
    grouped, _, _ = _gradients("grpo", 0, tiny_model_dir, tmp_path, "grouped",
                               {"minibatch_size": 4, "group_minibatches": True}, kl_coef=0.0)
    assert sorted(seen) == [[0, 1, 2, 3], [4, 5, 6, 7]]  # each minibatch one whole group (group_size 4)
    seen.clear()
    _gradients("grpo", 0, tiny_model_dir, tmp_path, "rows", {"minibatch_size": 4}, kl_coef=0.0)
    assert sorted(seen) != [[0, 1, 2, 3], [4, 5, 6, 7]]  # the default: random rows


# ------------------------------------------------------------------------------------------------ AdamW implementations
def _adamw_after(impl: str, lr: float = 1e-3, steps: int = 3, state: dict | None = None) -> list[torch.Tensor]:
    """The weights after `steps` AdamW steps in implementation `impl` (update.adamw) from fixed random weights and
    fixed per-step gradients of a Llama-like set of shapes (matrices, vectors, one scalar-like)."""
    g = torch.Generator().manual_seed(0)
    shapes = [(64, 32), (32,), (128, 32), (1,), (32, 128)]
    params = [torch.nn.Parameter(torch.randn(s, generator=g) * 0.02) for s in shapes]
    grads = [[torch.randn(s, generator=g) * 10.0 ** -k for k, s in enumerate(shapes)] for _ in range(steps)]
    opt = update_mod.adamw([{"params": params, "lr": lr}], impl, weight_decay=0.0)
    assert update_mod.adamw_impl(opt) == impl
    for step in grads:
        for p, gr in zip(params, step):
            p.grad = gr.clone()
        opt.step()
    return [p.detach() for p in params]


def _ulps(a: list[torch.Tensor], b: list[torch.Tensor], lr: float = 1e-3) -> float:
    """The largest |a − b| over every element, in units of float32's spacing (eps × scale, 1 = one rounding step) at
    the element's scale max(|b|, lr): an AdamW step moves a weight by ~lr, so near-zero weights are compared at the
    scale of their update, the rest at their own."""
    return max(((x - y).abs() / torch.finfo(torch.float32).eps / y.abs().clamp(min=lr)).max().item()
               for x, y in zip(a, b))


def test_fused_and_foreach_adamw_step_as_the_plain_loop_does():
    """update.adamw's implementations make the same 3 steps (lr 1e-3, gradients from 1 to 1e-4) up to float32
    rounding: foreach and fused within 4 ulp of the plain loop's weights. Control: the plain loop at a planted lr
    1.1e-3 is thousands of ulp away (the comparison sees a real difference)."""
    plain = _adamw_after("plain")
    assert _ulps(_adamw_after("foreach"), plain) <= 4
    assert _ulps(_adamw_after("fused"), plain) <= 4
    assert _ulps(_adamw_after("plain", lr=1.1e-3), plain) > 1000  # control: another lr is caught


def test_adamw_takes_the_fastest_implementation_torch_offers(monkeypatch):
    """With no impl forced, update.adamw builds fused AdamW (CPU fused AdamW exists since torch 2.4), falls back to
    foreach where the constructor refuses fused, then to the plain loop; a forced impl that torch refuses raises,
    and a name not in ADAMW_IMPLS is refused. The trainer's optimizer is the fastest (make_optimizer)."""
    p = [torch.nn.Parameter(torch.zeros(3))]
    assert update_mod.adamw_impl(update_mod.adamw([{"params": p}])) == "fused"
    real = torch.optim.AdamW

    def refusing(*refused):
        def make(*a, **k):
            if any(k.get(flag) for flag in refused) or ("plain" in refused and k.get("foreach") is False):
                raise RuntimeError("no kernel for this device")
            return real(*a, **k)
        return make

    monkeypatch.setattr(torch.optim, "AdamW", refusing("fused"))
    assert update_mod.adamw_impl(update_mod.adamw([{"params": p}])) == "foreach"
    monkeypatch.setattr(torch.optim, "AdamW", refusing("fused", "foreach"))
    assert update_mod.adamw_impl(update_mod.adamw([{"params": p}])) == "plain"
    with pytest.raises(RuntimeError, match="no kernel"):
        update_mod.adamw([{"params": p}], "fused")
    monkeypatch.setattr(torch.optim, "AdamW", real)
    with pytest.raises(ValueError, match="must be one of fused, foreach, plain"):
        update_mod.adamw([{"params": p}], "apex")
    head = torch.nn.Linear(3, 1)
    assert update_mod.adamw_impl(update_mod.make_optimizer(head, None, TrainConfig())) == "fused"


def test_a_plain_adamw_checkpoint_resumes_fused():
    """load_state_dict copies the saved groups' implementation flags (torch), so the trainer switches the loaded
    optimizer back to its own (update.set_adamw_impl, Trainer after apply_training_state): a plain optimizer's state
    loaded into a fused one steps fused and lands where the plain one does (within 4 ulp). Control: without the
    switch the loaded optimizer says plain."""
    g = torch.Generator().manual_seed(1)
    w0, grads = torch.randn(16, 8, generator=g), [torch.randn(16, 8, generator=g) for _ in range(4)]

    def stepped(opt, p, gs):
        for gr in gs:
            p.grad = gr.clone()
            opt.step()
        return p.detach().clone()

    p = torch.nn.Parameter(w0.clone())
    plain = update_mod.adamw([{"params": [p], "lr": 1e-3}], "plain")
    stepped(plain, p, grads[:2])
    saved, mid = copy.deepcopy(plain.state_dict()), p.detach().clone()  # state_dict holds the live tensors
    expect = stepped(plain, p, grads[2:])
    q = torch.nn.Parameter(mid.clone())
    fused = update_mod.adamw([{"params": [q], "lr": 1e-3}], "fused")
    fused.load_state_dict(saved)
    assert update_mod.adamw_impl(fused) == "plain"  # control: what load_state_dict leaves
    update_mod.set_adamw_impl(fused, "fused")
    assert update_mod.adamw_impl(fused) == "fused" and fused.state[q]["step"].dtype == torch.float32
    assert _ulps([stepped(fused, q, grads[2:])], [expect]) <= 4


@pytest.mark.slow
@pytest.mark.subprocess
def test_bench_adamw_tiny(tmp_path, tiny_model_dir):
    """benchmarks/bench_adamw.py on the tiny model: one JSON line with each implementation's step and whole-update
    medians, speedups vs the plain loop, and fused / foreach weights within a few ulps of plain's (same steps);
    every implementation's update starts from the same weights (the same loss). Timings are not asserted."""
    import json
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parent.parent
    out = tmp_path / "adamw.jsonl"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]),
           "OMP_WAIT_POLICY": "PASSIVE"}
    proc = subprocess.run([sys.executable, str(root / "benchmarks" / "bench_adamw.py"), "--model", tiny_model_dir,
                           "--rounds", "1", "--steps", "1", "--lengths", "40,30", "--policy-tokens", "8,6",
                           "--prompt", "10", "--threads", "1", "--out", str(out)],
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (line,) = out.read_text().splitlines()
    res = json.loads(line)
    assert set(res["step"]) == set(res["update"]) == {"plain", "foreach", "fused"} and res["cpu"]
    assert res["step"]["foreach"]["max_ulps_vs_plain"] == 0 and res["step"]["fused"]["max_ulps_vs_plain"] < 8
    assert all(res[part][k]["speedup_vs_plain"] > 0 for part in ("step", "update") for k in ("foreach", "fused"))
    assert len({res["update"][k]["loss"] for k in res["update"]}) == 1
    assert res["update_tokens"] == 70 and res["config"]["rounds"] == 1 and res["seed"] == 0
