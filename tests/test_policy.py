"""policy.py: token_forward's shared-prefix forward (rows that share their first prompt forward it once) gives the
plain forward's log-probs, values, entropy and gradients; a prefix claimed one token too long is caught."""
import functools

import pytest
import torch

import agentrl_lib.policy as policy_mod
from agentrl_lib.policy import ValueHead, common_prefix_length, prompt_groups, token_forward
from agentrl_lib.update import forward_in_chunks, prompt_chunks


@pytest.fixture(scope="module")
def tiny():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=120, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                      tie_word_embeddings=True)
    model = LlamaForCausalLM(cfg)
    model.train()
    head = ValueHead(32)
    torch.nn.init.normal_(head.linear.weight, std=0.5)  # non-zero values, so value gradients are checked too
    return model, head


def batch():
    """Two groups (rows 0-3 share a 24-token prompt, 4-5 an 18-token one), one row alone; right-padded; the first
    actions of rows 0 and 1 also agree (their common prefix runs past the prompt)."""
    g = torch.Generator().manual_seed(1)
    lengths, prompts = [44, 37, 40, 30, 44, 33, 28], [24, 24, 24, 24, 18, 18, 20]
    B, T = len(lengths), max(lengths)
    ids = torch.randint(1, 120, (B, T), generator=g)
    ids[1:4, :24] = ids[0, :24]
    ids[1, 24:29] = ids[0, 24:29]
    ids[5, :18] = ids[4, :18]
    am, mask = torch.zeros(B, T, dtype=torch.long), torch.zeros(B, T)
    for i, (n, p) in enumerate(zip(lengths, prompts)):
        am[i, :n] = 1
        ids[i, n:] = 0
        mask[i, p:n - 3] = 1
        mask[i, n - 2:n] = 1
    return ids, am, mask


def run(model, head, share: bool):
    model.zero_grad(set_to_none=True)
    head.zero_grad(set_to_none=True)
    ids, am, mask = batch()
    out = token_forward(model, ids, am, mask, 0.7, head, with_entropy=True, share_prefix=share)
    (out["logprobs"].sum() + out["values"].sum() + 0.1 * out["entropy"].sum()).backward()
    grads = {n: p.grad.clone() for n, p in [*model.named_parameters(), *head.named_parameters()] if p.grad is not None}
    return out, grads


def max_rel(a: dict, b: dict) -> float:
    return max(((a[k] - b[k]).norm() / (b[k].norm() + 1e-12)).item() for k in b)


def test_prompt_groups_and_common_prefix():
    ids, am, mask = batch()
    assert prompt_groups(ids, mask) == [[0, 1, 2, 3], [4, 5], [6]]
    assert common_prefix_length(ids[[0, 1]], am[[0, 1]]) == 29     # the prompt and the first action
    assert common_prefix_length(ids[[0, 1, 2, 3]], am[[0, 1, 2, 3]]) == 24
    assert common_prefix_length(ids[[0, 0]], am[[0, 0]]) == 43     # identical rows keep one token each
    chunks = prompt_chunks(am.sum(1).tolist(), prompt_groups(ids, mask), budget=4 * 44)
    assert sorted(i for c in chunks for i in c) == list(range(7)) and [0, 1, 2, 3] in chunks


def test_shared_prefix_forward_equals_the_plain_forward(tiny):
    model, head = tiny
    plain, g_plain = run(model, head, share=False)
    shared, g_shared = run(model, head, share=True)
    for k in ("logprobs", "values", "entropy"):
        assert torch.allclose(shared[k], plain[k], atol=1e-5, rtol=1e-5), k
    assert max_rel(g_shared, g_plain) < 1e-4


def test_a_prefix_one_token_too_long_is_caught(tiny, monkeypatch):
    """Negative control: sharing one token past the true common prefix gives the wrong rows row 0's token there."""
    model, head = tiny
    plain, g_plain = run(model, head, share=False)
    real = policy_mod.common_prefix_length
    monkeypatch.setattr(policy_mod, "common_prefix_length", lambda ids, am: real(ids, am) + 1)
    wrong, g_wrong = run(model, head, share=True)
    assert (wrong["logprobs"] - plain["logprobs"]).abs().max() > 1e-3 or max_rel(g_wrong, g_plain) > 1e-2


def test_no_grad_chunks_by_prompt_give_the_same_numbers(tiny):
    model, head = tiny
    ids, am, mask = batch()
    b = {"input_ids": ids, "attention_mask": am, "mask": mask}
    with torch.no_grad():
        ref = token_forward(model, ids, am, mask, 0.7, head, share_prefix=False)
    fwd = functools.partial(token_forward, model, temperature=0.7, value_head=head)
    out = forward_in_chunks(fwd, b, budget=4 * 44, groups=prompt_groups(ids, mask))
    for k in ref:
        assert torch.allclose(out[k], ref[k], atol=1e-5), k
