"""Will a run fit in memory? An estimate made before anything is allocated (one of ``train.py``'s up-front checks,
``poslab.running.precheck``), against the memory this machine has free: a size that cannot run is refused with the
estimate in the message, instead of sitting at step 0 for minutes and then failing (or swapping).

What the estimate counts, per process (4 bytes a value; the saved activations 2 under mixed precision):

- the parameters, their gradients and AdamW's two moments: 16 bytes a parameter (the embedding, the blocks, the
  output layer and the encoding's own, a learned table included); evaluation keeps all four (the trainer still
  holds the optimizer after training);
- a training step's saved activations: batch x length x layers x (12 x d_model + 2 x the MLP width; 4 x for
  SwiGLU) values. That is what a pre-norm block keeps per token for the backward pass (the norms' inputs and
  outputs, q, k, v, rotated q and k, the attention output, the MLP's hidden layer before and after its
  activation), and measured peaks on the CPU are 1.0 to 1.3 times it (tiny and byte models, fp32);
- attention scores, where the path materialises them (``SCORE_TENSORS``): ``model.attention=explicit`` keeps each
  layer's softmax weights (batch x heads x length^2, fp32) for the backward pass, plus one such tensor being
  computed; an encoding with a per-layer score term (CoPE, the forget gate, FIRE) at least two per layer (the term
  and the mask it is added to); an encoding with only a score bias (ALiBi, KERPLE, T5, Sandwich) its
  heads x length^2 mask, once (the fused kernel takes it without a per-row copy); the fused paths otherwise
  (``sdpa`` without a mask, ``flex``) nothing quadratic;
- the logits: batch x length x outputs, three copies (the logits, their fp32 softmax, its gradient);
- a synthetic task's evaluation sets, held from the start of the run: ``eval_size`` sequences at every evaluation
  length, and a selection set at every length past training, 16 bytes a token (tokens and targets).

Evaluation at the longest length (no gradients) keeps one layer's working set at a time: batch x length x
(4 x d_model + 2 x the MLP width; 4 x for SwiGLU) values, two score tensors where they are materialised, and the
logits.

Not counted: the framework itself (torch and Lightning, a few hundred MB), the allocator's slack, CUDA's context,
data loading buffers, and an encoding's own intermediates beyond those above (CoPE builds about twenty
batch x heads x length^2 tensors a layer). The figure is therefore a floor: a run is refused only when even
the floor exceeds the memory free, so no size that could run is refused, and one just under the limit may still
run out of memory.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from poslab.errors import ConfigError
from poslab.running.compose import world_size

VALUE = 4  # bytes of an fp32 value
ADAMW = 4  # values a trained parameter holds: the weight, its gradient, AdamW's two moments
TOKEN = 16  # bytes of one position of an evaluation set: an int64 token and an int64 target
LOGIT_COPIES = 3  # the logits, their fp32 softmax (cross-entropy), its gradient
MIXED = ("bf16-mixed", "16-mixed", "bf16", "16")
#: batch x heads x length^2 tensors per layer that a training step keeps (saved for the backward pass), and that
#: one layer holds while it is computed (training, evaluation), by how the scores are computed (``score_path``)
SCORE_TENSORS = {"explicit": (1, 1), "term": (2, 2), "bias": (0, 0), "fused": (0, 0)}
GB = 1e9


@dataclass
class Estimate:
    """The memory one stage of a run needs at least (``parts``: bytes by what holds them), and how to say it."""

    stage: str  # "a training step" | "evaluation at length N"
    sizes: str  # the settings that set it: "task.train_length=100000 with task.batch_size=64"
    lower: list[str]  # what to lower, in the order to try
    parts: dict[str, int] = field(default_factory=dict)
    details: dict[str, str] = field(default_factory=dict)  # what a part is made of, said after its size

    @property
    def total(self) -> int:
        return sum(self.parts.values())

    def breakdown(self) -> str:
        said = [f"{name} {size_text(size)}{self.details.get(name, '')}" for name, size in self.parts.items() if size]
        return ", ".join(said)


@dataclass
class Limit:
    """The memory a process may still allocate, and where that figure comes from (said in a refusal)."""

    bytes: int
    where: str  # "this machine (MemAvailable in /proc/meminfo)", "GPU 0 (nvidia-smi memory.free)"


def size_text(size: float) -> str:
    for unit, scale in (("TB", 1e12), ("GB", GB), ("MB", 1e6), ("kB", 1e3)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{int(size)} B"


# ---- the estimate -------------------------------------------------------------------------------------------------
def mlp_width(model: DictConfig) -> tuple[int, int]:
    """(the MLP's hidden width, how many hidden-width tensors a token keeps: 2 for GELU, 4 for SwiGLU)."""
    hidden = int(model.mlp_hidden or 4 * int(model.d_model))  # null: 4 x d_model
    return hidden, 4 if str(model.mlp) == "swiglu" else 2


def vocabulary(cfg: DictConfig) -> int:
    """Input symbols (the outputs are as many or fewer): a synthetic task's ``vocab_size``, a corpus's bytes (257)
    or its bpe vocabulary."""
    task = cfg.task
    if "vocab_size" in task:
        return int(task.vocab_size)
    corpus = cfg.get("corpus") or {}
    return int(corpus.get("vocab_size") or 257) if corpus.get("tokenizer") == "bpe" else 257


def parameter_count(cfg: DictConfig, max_length: int, train_length: int) -> int:
    """The model's parameters, counted from its settings: embedding, blocks, output layer, and the encoding's own
    (built on PyTorch's meta device: no memory; an encoding that cannot be built there counts none)."""
    model = cfg.model
    d, layers, vocab = int(model.d_model), int(model.n_layers), vocabulary(cfg)
    hidden, _ = mlp_width(model)
    gated = 2 if str(model.mlp) == "swiglu" else 1
    bias = bool(model.bias)
    block = 4 * d * d + d * hidden * (gated + 1) + (4 * d + hidden * gated + d if bias else 0) + 4 * d
    head = 0 if model.tie_embeddings else d * vocab + (vocab if bias else 0)
    return vocab * d + layers * block + head + encoding_parameters(cfg, max_length, train_length)


def encoding_parameters(cfg: DictConfig, max_length: int, train_length: int) -> int:
    import torch

    from poslab.encodings import ModelShape, build_encoding

    settings = OmegaConf.to_container(cfg.encoding, resolve=True)
    shape = ModelShape.from_config(cfg.model)
    try:
        with torch.device("meta"):
            encoding = build_encoding(settings, shape, max_length, train_length=train_length)  # type: ignore[arg-type]
    except Exception:  # noqa: BLE001  (an encoding whose construction computes on real values: not counted)
        return 0
    return sum(p.numel() for p in encoding.parameters())


def score_path(cfg: DictConfig) -> str:
    """How the attention scores are computed (``SCORE_TENSORS``): ``explicit`` (model.attention=explicit), ``term``
    (an encoding with a per-layer score term: batch x heads x length^2 per layer), ``bias`` (only a score bias: one
    heads x length^2 mask), or ``fused`` (nothing quadratic is kept)."""
    from poslab.encodings.base import PositionEncoding, encoding_class

    attention = str(cfg.model.attention)
    if attention == "explicit":
        return "explicit"
    if attention == "flex":
        return "fused"
    cls = encoding_class(str(cfg.encoding.name))
    if cls.score_term is not PositionEncoding.score_term:
        return "term"
    return "bias" if cls.score_bias is not PositionEncoding.score_bias else "fused"


def score_bytes(cfg: DictConfig, batch: int, length: int, training: bool) -> int:
    """The attention scores a step keeps (``SCORE_TENSORS``): batch x heads x length^2 fp32 tensors where the path
    materialises them, or an encoding's heads x length^2 bias mask."""
    model, path = cfg.model, score_path(cfg)
    heads, layers = int(model.n_heads), int(model.n_layers)
    if path == "bias":
        return heads * length**2 * VALUE
    kept, working = SCORE_TENSORS[path]
    return ((kept * layers if training else 0) + working) * batch * heads * length**2 * VALUE


def lengths(cfg: DictConfig) -> tuple[int, list[int], str]:
    """(the training length, the evaluation lengths, the setting that gives the training length)."""
    task = cfg.task
    if "context_length" in task:  # a language model: its evaluation lengths (null: 1x to 16x its context)
        from poslab.config.settings import lm_eval_lengths

        return int(task.context_length), lm_eval_lengths(task), "task.context_length"
    return int(task.train_length), [int(n) for n in task.eval_lengths or []], "task.train_length"


def evaluation_sets(cfg: DictConfig) -> int:
    """Bytes of a synthetic task's evaluation and selection sets (a language model's windows are cut per batch)."""
    task = cfg.task
    if "eval_size" not in task:
        return 0
    train, evaluated, _ = lengths(cfg)
    positions = sum(evaluated) + sum(n for n in evaluated if n > train)  # a selection set past training
    return int(task.eval_size) * positions * TOKEN


def training_estimate(cfg: DictConfig, parameters: int) -> Estimate:
    model, task = cfg.model, cfg.task
    length, _, key = lengths(cfg)
    batch = max(1, int(task.batch_size) // world_size(cfg))
    d, layers = int(model.d_model), int(model.n_layers)
    hidden, copies = mlp_width(model)
    activation = 2 if str(cfg.trainer.precision) in MIXED else VALUE
    kept = batch * length * layers * (12 * d + copies * hidden) * activation  # saved for the backward pass
    estimate = Estimate(
        "a training step",
        f"{key}={length} with task.batch_size={task.batch_size}",
        ["task.batch_size", key],
    )
    estimate.parts = {
        "activations": kept,
        "attention scores": score_bytes(cfg, batch, length, training=True),
        "logits": batch * length * vocabulary(cfg) * LOGIT_COPIES * VALUE,
        "parameters and AdamW": parameters * ADAMW * VALUE,
        "evaluation sets": evaluation_sets(cfg),
    }
    estimate.details["activations"] = f" for {batch} x {length} tokens x {layers} layers of width {d}"
    return estimate


def evaluation_estimate(cfg: DictConfig, parameters: int) -> Estimate:
    model, task = cfg.model, cfg.task
    _, evaluated, key = lengths(cfg)
    length = max(evaluated)
    size = int(task.get("eval_size") or task.get("val_windows") or 1)
    batch = max(1, min(int(task.eval_batch_size), size // world_size(cfg) or 1))
    if key == "task.context_length":  # a language model's batches hold eval_batch_size x context tokens at any length
        batch = max(1, int(task.eval_batch_size) * int(task.context_length) // length)
    d = int(model.d_model)
    hidden, copies = mlp_width(model)
    working = batch * length * (4 * d + copies * hidden) * VALUE  # one layer at a time, nothing saved
    if key == "task.context_length":  # a language model evaluates from its context to its longest eval length
        sizes = f"task.eval_lengths={evaluated} with task.eval_batch_size={task.eval_batch_size}"
        lower = ["the longest task.eval_lengths", key]
    else:
        sizes = f"task.eval_lengths={evaluated} with task.eval_batch_size={task.eval_batch_size}"
        lower = ["the longest task.eval_lengths"]
    estimate = Estimate(f"evaluation at length {length}", sizes, ["task.eval_batch_size", *lower])
    estimate.parts = {
        "activations": working,
        "attention scores": score_bytes(cfg, batch, length, training=False),
        "logits": batch * length * vocabulary(cfg) * 2 * VALUE,
        "parameters and AdamW": parameters * ADAMW * VALUE,
        "evaluation sets": evaluation_sets(cfg),
    }
    estimate.details["activations"] = f" for {batch} x {length} tokens of width {d}, one layer at a time"
    return estimate


def estimates(cfg: DictConfig) -> list[Estimate]:
    """The memory a training step and the evaluation at the longest length need at least (the module docstring)."""
    from poslab.config.settings import max_length, train_length

    task = OmegaConf.to_container(cfg.task, resolve=True)
    assert isinstance(task, dict)
    parameters = parameter_count(cfg, max_length(task), train_length(task))
    return [training_estimate(cfg, parameters), evaluation_estimate(cfg, parameters)]


# ---- the memory there is -----------------------------------------------------------------------------------------
def host_memory() -> Limit | None:
    """What this process may still allocate on the host: ``MemAvailable`` (/proc/meminfo: free memory plus the caches
    the kernel can drop), lowered to the room left under a container's cgroup limit where there is one; None where
    neither can be read (not Linux): then nothing is refused."""
    limits = []
    available = meminfo_available()
    if available is not None:
        limits.append(Limit(available, "this machine (MemAvailable in /proc/meminfo)"))
    room = cgroup_room()
    if room is not None:
        limits.append(Limit(room, "this container (its cgroup memory limit less its usage)"))
    return min(limits, key=lambda limit: limit.bytes) if limits else None


def meminfo_available(path: Path = Path("/proc/meminfo")) -> int | None:
    try:
        for line in path.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def cgroup_room(root: Path = Path("/sys/fs/cgroup")) -> int | None:
    """The cgroup's memory limit less its usage (cgroup v2, else v1); None without a limit."""
    for limit_file, usage_file in (
        (root / "memory.max", root / "memory.current"),
        (root / "memory" / "memory.limit_in_bytes", root / "memory" / "memory.usage_in_bytes"),
    ):
        try:
            limit, usage = limit_file.read_text().strip(), int(usage_file.read_text().strip())
        except (OSError, ValueError):
            continue
        if limit.isdigit() and int(limit) < 1 << 60:  # "max", or v1's "no limit" (a huge number)
            return max(0, int(limit) - usage)
    return None


def gpu_memory(devices: int) -> Limit | None:
    """The free memory of the GPU with the least of it among the first ``devices`` this process sees, from
    ``nvidia-smi`` (asking CUDA would start it in this process, before Hydra's launcher starts the jobs); None
    where it cannot be asked: then nothing is refused."""
    try:
        answer = subprocess.run(
            ["nvidia-smi", "--query-gpu=index,memory.free", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout
        free = {index.strip(): int(mib) * 2**20 for index, mib in (line.split(",") for line in answer.splitlines())}
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    visible = [g.strip() for g in os.environ.get("CUDA_VISIBLE_DEVICES", ",".join(free)).split(",") if g.strip()]
    used = [g for g in visible if g in free][: max(1, devices)]
    if not used:
        return None
    index = min(used, key=lambda g: free[g])
    return Limit(free[index], f"GPU {index} (memory.free from nvidia-smi)")


def uses_gpu(cfg: DictConfig) -> bool | None:
    """Whether the run trains on a GPU: True, False, or None for accelerators not checked here (mps, tpu)."""
    accelerator = str(cfg.trainer.accelerator)
    if accelerator in ("gpu", "cuda"):
        return True
    if accelerator == "cpu":
        return False
    if accelerator == "auto":
        from poslab.runs.launching import visible_gpus

        return bool(visible_gpus())
    return None


# ---- the check ---------------------------------------------------------------------------------------------------
def check_memory(configs: list[DictConfig], concurrent_jobs: int = 1) -> None:
    """Refuse, in one sentence, the first job whose training step or evaluation needs more memory than its process
    has (``estimates`` against ``host_memory`` or ``gpu_memory``). On the host, the processes of a DDP run on the CPU
    and the jobs a local multirun runs at once (``concurrent_jobs``) share the memory."""
    host: Limit | None = None
    for cfg in configs:
        gpu = uses_gpu(cfg)
        if gpu is None:
            continue
        if gpu:
            limit, sharing = gpu_memory(world_size(cfg)), 1
        else:
            host = host or host_memory()
            limit, sharing = host, world_size(cfg) * concurrent_jobs
        if limit is None:
            continue
        for estimate in estimates(cfg):
            if estimate.total * sharing > limit.bytes:
                raise ConfigError(refusal(estimate, limit, sharing, cfg))


def refusal(estimate: Estimate, limit: Limit, sharing: int, cfg: DictConfig) -> str:
    share = limit.bytes / sharing
    room = f"the {size_text(limit.bytes)} free on {limit.where}"
    if sharing > 1:  # DDP processes on the CPU and a local multirun's parallel jobs
        room = f"the {size_text(share)} each of {sharing} processes running at once may have of {room[4:]}"
    lower = " or ".join(estimate.lower)
    path = score_path(cfg)
    scores = estimate.parts.get("attention scores", 0)
    if scores > estimate.total / 2 and path == "explicit":
        lower += " (or use model.attention=sdpa: explicit materialises every layer's attention weights)"
    elif scores > estimate.total / 2 and path == "term":
        lower += f" (encoding={cfg.encoding.name} materialises batch x heads x length^2 scores in every layer)"
    elif sharing > 1 and estimate.total <= limit.bytes:  # it would fit alone
        lower += " (or run fewer processes at once: POSLAB_JOBS, trainer.devices)"
    return (
        f"{estimate.sizes} needs at least {size_text(estimate.total)} of memory for {estimate.stage} "
        f"({estimate.breakdown()}), more than {room}; nothing was written: lower {lower}."
    )
