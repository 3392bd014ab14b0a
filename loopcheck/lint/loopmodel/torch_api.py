"""What loopcheck knows about PyTorch and its ecosystem, as tables: optimizer, scheduler, EMA
and wrapper classes, the names and annotations that reveal a role, the cadence a scheduler is
sized for, what an accumulation guard looks like, and which method calls are events."""

from __future__ import annotations

import builtins
import re
from functools import lru_cache

from loopcheck.lint.loopmodel.facts import Role, SchedulerCadence


OPTIMIZER_CLASSES = frozenset(
    {
        "SGD", "Adam", "AdamW", "Adamax", "Adagrad", "Adadelta", "RMSprop", "Rprop", "ASGD", "NAdam",
        "RAdam", "LBFGS", "SparseAdam", "Lion", "Adafactor", "LAMB", "Lamb", "FusedAdam", "FusedLAMB",
        "FusedSGD", "AdamW8bit", "Adam8bit", "PagedAdamW", "PagedAdamW8bit", "PagedAdamW32bit",
        "SGD8bit", "Lion8bit", "AdaBelief", "Ranger", "Adan", "Sophia", "ZeroRedundancyOptimizer",
        "Muon", "Shampoo", "Lookahead", "create_optimizer_v2", "create_optimizer",
    }
)
SCHEDULER_CLASSES = frozenset(
    {
        "LambdaLR", "MultiplicativeLR", "StepLR", "MultiStepLR", "ConstantLR", "LinearLR",
        "ExponentialLR", "SequentialLR", "CosineAnnealingLR", "ChainedScheduler", "ReduceLROnPlateau",
        "CyclicLR", "CosineAnnealingWarmRestarts", "OneCycleLR", "PolynomialLR", "SWALR",
        "CosineLRScheduler", "StepLRScheduler", "PlateauLRScheduler", "WarmupCosineSchedule",
    }
)


_LR_STEP_KEYWORDS = frozenset({"epoch", "metrics", "metric"})


def is_lr_step_call(args: list) -> bool:
    """Whether a `step(...)` call's arguments are those of a learning-rate scheduler: torch's take
    `step()`, `step(epoch)` or ReduceLROnPlateau's `step(metrics, epoch)`, timm's `step(epoch,
    metric=...)`. A `step` with more positional arguments or other keywords belongs to another
    kind of scheduler (a diffusion sampler's `step(model_output, timestep, sample)`)."""
    positional = [a for a in args if a.keyword is None and not a.star]
    keywords = {a.keyword.value for a in args if a.keyword is not None}
    return len(positional) <= 2 and keywords <= _LR_STEP_KEYWORDS


EMA_CLASSES = frozenset(
    {"AveragedModel", "ModelEma", "ModelEmaV2", "ModelEmaV3", "ExponentialMovingAverage", "EMA", "EMAModel"}
)
WRAPPERS = frozenset(
    {"DDP", "DistributedDataParallel", "DataParallel", "FSDP", "FullyShardedDataParallel", "compile"}
)
# frameworks whose models are not torch modules (a `model` bound to their calls has no role)
FOREIGN_FRAMEWORKS = frozenset({
    "tensorflow", "tf", "keras", "onnx", "onnxruntime", "ort", "jax", "flax", "sklearn", "xgboost", "lightgbm",
    "paddle", "mxnet", "tflite_runtime", "openvino", "numpy", "scipy", "pandas", "statsmodels",
})
# library objects whose call runs the network under `torch.no_grad()` itself, like `generate`:
# diffusers' pipelines (`StableDiffusionPipeline.from_pretrained(...)`, `AutoPipelineFor...`) and
# transformers' `pipeline(...)`
INFERENCE_PIPELINES = re.compile(r"diffusers\.(\w+\.)*\w*Pipeline\w*(\.from_\w+)?$|transformers\.(pipelines\.)?pipeline$")
# objects whose `.save(...)` writes a file like `torch.save` (Fabric's takes the path first and
# stores the state dicts of the modules and optimizers it is given)
SAVE_RECEIVERS = frozenset({"accelerator", "xm", "fabric", "self.accelerator", "self.fabric"})
# calls that iterate their first argument and hand its items on (progress bars, loggers, prefetchers)
LOADER_WRAPPERS = frozenset({
    "enumerate", "tqdm", "iter", "islice", "trange", "track", "prefetch", "cycle", "log_every", "progress",
    "BackgroundGenerator", "DataPrefetcher", "CudaPrefetcher", "prefetcher", "Prefetcher", "repeat_loader",
    "infinite_loader", "auto_tqdm", "rich_progress",
})
# calls that iterate each of their arguments (`zip(range(steps), loader)`)
LOADER_WRAPPERS_ANY = frozenset({"zip", "chain", "zip_longest", "product"})
_MOVE_METHODS = frozenset(
    {"to", "cuda", "cpu", "half", "float", "double", "bfloat16", "to_empty", "train", "eval", "requires_grad_"}
)
_PARAM_METHODS = frozenset({"parameters", "named_parameters"})
_EMA_RE = re.compile(r"EMA|(?:^|[a-z_])Ema(?=[A-Z0-9_]|$)")

# torch.nn modules without parameters or buffers that change: calling one is arithmetic, not a
# network's forward pass (no mode, nothing to evaluate)
PARAMETER_FREE_MODULES = frozenset({
    "Upsample", "UpsamplingBilinear2d", "UpsamplingNearest2d", "Identity", "Flatten", "Unflatten",
    "ReLU", "GELU", "SiLU", "Tanh", "Sigmoid", "Softmax", "LogSoftmax", "LeakyReLU", "ELU", "Mish",
    "MaxPool1d", "MaxPool2d", "MaxPool3d", "AvgPool1d", "AvgPool2d", "AvgPool3d",
    "AdaptiveAvgPool1d", "AdaptiveAvgPool2d", "AdaptiveMaxPool2d", "PixelShuffle", "PixelUnshuffle",
    "ZeroPad2d", "ConstantPad2d", "ReflectionPad2d", "ReplicationPad2d", "CosineSimilarity", "PairwiseDistance",
})

_NAME_ROLES: tuple[tuple[Role, re.Pattern[str]], ...] = (
    (Role.EMA, re.compile(r"^(ema|ema_model|model_ema|ema_net|swa_model|averaged_model|ema_\w+|\w+_ema)$")),
    (Role.SCHEDULER, re.compile(
        r"^(sched|scheduler|lr_scheduler|lr_sched|warmup_scheduler)(_?[a-z]|_\w+)?$|_(sched|scheduler)$")),
    (Role.SCALER, re.compile(r"^(scaler|grad_scaler|amp_scaler|loss_scaler)$|_scaler$")),
    (Role.OPTIMIZER, re.compile(r"^(opt|optim|optimi[sz]er)(_?[a-z]|_?\d+|_\w+)?$|_(opt|optim|optimi[sz]er)$")),
    (Role.LOADER, re.compile(r"^(loader|dataloader|dl)$|(_loader|_dataloader|_dl|loader)$")),
    (Role.SAMPLER, re.compile(r"sampler$")),
    (Role.CRITERION, re.compile(r"^(criterion|loss_fn|loss_func|loss_function|criterion_\w+|\w+_criterion)$")),
    (Role.MODEL, re.compile(
        r"^(model|net|network|backbone|generator|discriminator|encoder|decoder|student|teacher|"
        r"classifier|net_?[dg]|model_?[a-z0-9]|model_\w+|\w+_model|\w+_net)$")),
)


def _named_as(name: str, role: Role) -> bool:
    """The last part of a name says the role (`self.policy_model`, `net`)."""
    last = name.rsplit(".", 1)[-1]
    return any(r is role and p.search(last) for r, p in _NAME_ROLES)


_ANNOTATION_ROLES = (
    (re.compile(r"(^|\.)(_?LRScheduler|ReduceLROnPlateau|LambdaLR|OneCycleLR)$"), Role.SCHEDULER),
    (re.compile(r"(^|\.)Optimizer$"), Role.OPTIMIZER),
    (re.compile(r"(^|\.)GradScaler$"), Role.SCALER),
    (re.compile(r"(^|\.)DataLoader$"), Role.LOADER),
    (re.compile(r"(^|\.)(Module|DistributedDataParallel|DDP|PreTrainedModel)$"), Role.MODEL),
    (re.compile(r"(^|\.)(AveragedModel|ModelEma\w*|EMA\w*)$"), Role.EMA),
)

_STEP_TOKENS = re.compile(
    r"len\(\s*[\w.]*(loader|dl|data|dataset|batches)[\w.]*\s*\)|total_steps|num_training_steps|steps_per_epoch|"
    r"max_steps|num_warmup_steps|warmup_steps|training_steps|train_steps|total_iters|max_iters?\b|num_iters|"
    r"iterations|num_steps|n_steps|total_step|iters_per_epoch|num_update_steps|updates_per_epoch",
    re.I,
)
_EPOCH_TOKENS = re.compile(r"epochs?\b|n_epoch|num_epoch|max_epoch", re.I)

_ACCUM_NAME = re.compile(r"accum|grad_acc|accumulat|update_freq|sync_grad|sync_context|is_update_step|should_step|do_step|optimizer_step|micro", re.I)
_NOT_ACCUM = re.compile(r"log|print|eval|val|save|ckpt|checkpoint|report|display|vis|plot|sample|summary|test|write|snapshot|show|verbose", re.I)


def scheduler_cadence(cls: str | None, qualified: str | None, args_text: str, lambda_text: str = "") -> SchedulerCadence:
    """The cadence a schedule is sized for, from its class and constructor arguments (values only)."""
    cls = cls or ""
    if cls == "ReduceLROnPlateau" or cls == "PlateauLRScheduler":
        return SchedulerCadence.METRIC
    if cls == "CosineAnnealingWarmRestarts":
        return SchedulerCadence.UNKNOWN
    if cls in ("OneCycleLR", "CyclicLR") or re.match(r"get_\w*schedule", cls) or cls == "get_scheduler":
        return SchedulerCadence.PER_STEP
    text = args_text + " " + lambda_text
    if _STEP_TOKENS.search(text):
        return SchedulerCadence.PER_STEP
    if cls in ("StepLR", "MultiStepLR"):
        numbers = [int(n) for n in re.findall(r"\b\d+\b", args_text)]
        if any(n >= 500 for n in numbers):  # sized like optimizer steps, not epochs
            return SchedulerCadence.UNKNOWN
        return SchedulerCadence.PER_EPOCH
    if cls == "ExponentialLR":
        return SchedulerCadence.PER_EPOCH
    if _EPOCH_TOKENS.search(text) and cls not in ("SequentialLR", "ChainedScheduler", "SWALR"):
        return SchedulerCadence.PER_EPOCH
    return SchedulerCadence.UNKNOWN


@lru_cache(maxsize=4096)
def is_accumulation_test(text: str) -> bool:
    """Does an `if` test look like an every-k-micro-batches (gradient accumulation) guard?"""
    if "%" in text:
        for match in re.finditer(r"%\s*\(?\s*([\w.]+)", text):
            modulus = match.group(1)
            if _NOT_ACCUM.search(modulus):
                continue
            if _ACCUM_NAME.search(modulus) or re.fullmatch(r"\d+|k|n|[\w.]*(freq|every|steps?|iters?|interval)\w*", modulus):
                return True
        return bool(_ACCUM_NAME.search(text)) and not _NOT_ACCUM.search(text.split("%")[-1])
    return bool(_ACCUM_NAME.search(text)) and not _NOT_ACCUM.search(text)


_BUILTINS = frozenset(dir(builtins))


# context managers that set whether autograd records
GRAD_CONTEXTS = frozenset({"no_grad", "inference_mode", "enable_grad", "set_grad_enabled"})
_CONSTANTS = {"None": False, "False": False, "True": True}
_TENSOR_METHODS = frozenset({
    "mean", "sum", "float", "double", "half", "item", "view", "reshape", "squeeze", "unsqueeze", "to", "detach",
    "clone", "contiguous", "flatten", "backward", "abs", "pow", "sqrt", "exp", "log", "norm", "cpu", "cuda",
})


# method name -> the builder method that turns such a call into events
METHOD_EVENTS = {
    "zero_grad": "_m_zero_grad",
    "zero_": "_m_zero_",
    "backward": "_m_backward",
    "manual_backward": "_m_backward",
    "step": "_m_step",
    "scale": "_m_scale",
    "unscale_": "_m_unscale",
    "update": "_m_update",
    "update_parameters": "_m_update_parameters",
    "train": "_m_mode",
    "eval": "_m_mode",
    "forward": "_m_forward",
    "generate": "_m_generate",  # a library model's generation (Hugging Face `model.generate(...)`)
    "set_epoch": "_m_set_epoch",
    "load_state_dict": "_m_load_state_dict",
    "requires_grad_": "_m_requires_grad_",
    "step_update": "_m_step",  # timm schedulers: per optimizer update (`step(epoch)` per epoch)
    "mul_": "_m_grad_rescale",
    "div_": "_m_grad_rescale",
}

# library functions that clip gradients (by norm or value)
CLIP_FUNCTIONS = frozenset({
    "clip_grad_norm_", "clip_grad_value_", "clip_grad_norm", "dispatch_clip_grad", "clip_grad_norm_fp32",
    "clip_grads_with_norm_", "clip_gradients",  # Lightning Fabric / LightningModule
})
# timm-style loss scalers, called as `loss_scaler(loss, optimizer, clip_grad=..., parameters=...,
# update_grad=...)`: backward of the scaled loss, unscale, clip, optimizer step and scale update in
# one call (the step only when `update_grad` is true)
LOSS_SCALER_CLASSES = frozenset({"NativeScaler", "NativeScalerWithGradNormCount", "ApexScaler", "LossScaler"})
# context managers that hand out the scaled loss (apex `amp.scale_loss(loss, optimizer)`); the
# gradients are unscaled when the block exits
SCALED_LOSS_CONTEXTS = frozenset({"scale_loss"})
# context managers for gradient accumulation, by method, with the word their receiver's name holds:
# inside `with accelerator.accumulate(model):` a prepared optimizer's `step()` and `zero_grad()` and
# a prepared scheduler's `step()` only act on the micro-batch that syncs gradients
# (`accelerator.sync_gradients`); a network's own `zero_grad()` still runs on every micro-batch
ACCUMULATION_CONTEXTS = {"accumulate": "accelerator"}
LOSS_SCALER_NAME = re.compile(r"(^|[._])(loss_scaler|amp_scaler|grad_scaler|scaler)$")
# `p.grad.mul_(clip_coef)`: a factor named like a clipping coefficient or a norm makes an in-place
# rescale of the gradients hand-written clipping
HAND_CLIP_FACTOR = re.compile(r"clip|norm|coef", re.I)
