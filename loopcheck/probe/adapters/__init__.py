"""Thin adapters that run the probe inside training frameworks, over the same detectors.

- `loopcheck.probe.adapters.lightning.LoopcheckCallback`: a Lightning `Callback`;
- `loopcheck.probe.adapters.hf.LoopcheckCallback`: a Hugging Face `TrainerCallback`;
- `loopcheck.probe.adapters.accelerate`: objects returned by `accelerator.prepare(...)` are
  watched through the torch objects they wrap (used by the probe itself, nothing to call).

Each module imports its framework only when it is imported itself.
"""
