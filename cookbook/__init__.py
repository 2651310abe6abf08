"""The ZeRO cookbook: full fine-tunes of 7B-14B models with DeepSpeed ZeRO through Accelerate.

Modules: plan (one description of a run), models (architecture numbers), data (instruction data),
memory (estimator), dsconfig (config builder), lint (config linter), env (environment checks),
launch (Accelerate + DeepSpeed runs from a notebook), train (the per-rank training entry),
runall (execute the notebooks). Import them directly; this package import stays light.
"""
__version__ = "0.1.0"
