"""The probe's tunable windows and thresholds, with their defaults and validation.

Every option is a keyword argument of `loopcheck.probe(...)`; the README's probe section explains each one.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from loopcheck.catalog import codes
from loopcheck.errors import ProbeUsageError


# Integer options whose default, None, lets the probe choose the value while it runs.
AUTOMATIC = frozenset({"check_every"})


@dataclass(frozen=True)
class ProbeConfig:
    # How often (in optimizer steps) device statistics are read, checks run and metrics logged.
    every: int = 20
    # The checks that need not look at every step run on one optimizer step in `check_every` (and
    # on each of the first steps): exact gradient norms (LP101/LP102; NaN/Inf is looked for in the
    # loss and the earliest small gradient at every step), gradient-reset tracking (LP403) and graph
    # marks (LP202). The loss, modes, LR and data wait are looked at every step. None: 4, or on the
    # CPU up to 16 where the norms' measured cost asks for it (`loopcheck.probe.cadence`).
    check_every: int | None = None
    # Robust rolling level (median / MAD) for gradient-norm and loss spikes, in measurements (the
    # loss is measured at every step, gradient norms at the steps `check_every` picks).
    window: int = 100
    warmup: int = 30
    spike_z: float = 8.0
    spike_ratio: float = 10.0
    # Vanishing gradients: total norm under `vanish_norm`, or one module's norm under
    # `vanish_ratio` times the total, for `vanish_steps` steps in a row.
    vanish_norm: float = 1e-8
    vanish_ratio: float = 1e-7
    vanish_steps: int = 100
    # Per-module NaN/Inf localisation: forward outputs every step; with backward_hooks, also
    # each module's output gradient (more precise backward localisation, more overhead).
    localize: bool = True
    backward_hooks: bool = False
    # GradScaler: this many skipped steps in a row, or this share of the last `skip_window`
    # attempts, is no longer normal overflow handling.
    skip_streak: int = 25
    skip_rate: float = 0.25
    skip_window: int = 200
    # LP202: a loss graph still alive this many steps after its backward is retained.
    retain_steps: int = 20
    # LP201: memory sampled every `every` steps; growth in nearly every one of
    # `memory_samples` consecutive samples adding up to at least `memory_growth_mb`.
    memory_samples: int = 10
    memory_growth_mb: float = 64.0
    # LP404: trainable parameters still without a gradient after this many steps.
    unused_after: int = 50
    # LP601: median share of step time spent waiting for data over `stall_window` steps.
    stall_share: float = 0.5
    stall_window: int = 50
    # LP301: a per-step schedule stepped only every `cadence_ratio` optimizer steps or less often.
    cadence_ratio: int = 5
    # Codes to leave out (detectors whose codes are all ignored are not installed).
    ignore: tuple[str, ...] = field(default=())
    # Print the findings table on stderr when the probe exits.
    summary: bool = True

    @classmethod
    def from_options(cls, options: dict[str, Any]) -> "ProbeConfig":
        known = {f.name: f for f in fields(cls)}
        unknown = sorted(set(options) - set(known))
        if unknown:
            raise ProbeUsageError(
                f"unknown probe option(s): {', '.join(unknown)}; valid options are {', '.join(sorted(known))}"
            )
        values: dict[str, Any] = {}
        for name, value in options.items():
            default = known[name].default
            if name == "ignore":
                value = _codes(value)
            elif name in AUTOMATIC and value is None:
                pass
            elif isinstance(default, bool):
                if not isinstance(value, bool):
                    raise ProbeUsageError(f"probe option {name} must be True or False, not {value!r}")
            elif isinstance(default, int) or name in AUTOMATIC:
                if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                    also = " or None" if name in AUTOMATIC else ""
                    raise ProbeUsageError(f"probe option {name} must be a positive integer{also}, not {value!r}")
            elif isinstance(default, float):
                if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                    raise ProbeUsageError(f"probe option {name} must be a positive number, not {value!r}")
                value = float(value)
            values[name] = value
        config = cls(**values)
        if config.warmup >= config.window:
            raise ProbeUsageError(f"probe option warmup ({config.warmup}) must be smaller than window ({config.window})")
        if not 0 < config.stall_share < 1 or not 0 < config.skip_rate < 1:
            raise ProbeUsageError("probe options stall_share and skip_rate are fractions between 0 and 1")
        return config

    def wants(self, code: str) -> bool:
        return code not in self.ignore

    def to_dict(self) -> dict[str, Any]:
        return {f.name: (list(v) if isinstance(v := getattr(self, f.name), tuple) else v) for f in fields(self)}


def _codes(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    try:
        items = [str(v).strip().upper() for v in value]
    except TypeError:
        raise ProbeUsageError(f"probe option ignore takes LP codes, not {value!r}") from None
    known = set(codes("LP"))
    result: list[str] = []
    for item in items:
        matched = [c for c in known if c.startswith(item)] if item else []
        if not matched:
            raise ProbeUsageError(f"probe option ignore: {item!r} is not an LP code or prefix (see `loopcheck rules LP`)")
        result.extend(sorted(matched))
    return tuple(dict.fromkeys(result))
