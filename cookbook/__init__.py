"""The ZeRO cookbook: full fine-tunes of 7B-14B models with DeepSpeed ZeRO through Accelerate.

Modules: plan (one description of a run), models (architecture numbers), data (instruction data),
hardware (this machine and the GPUs' numbers), memory (estimator), dsconfig (config builder), lint
(config linter), env (environment checks), launch (Accelerate + DeepSpeed runs from a notebook),
train (the per-rank training entry), checkpoint (kill-safe checkpoints, the saved model), tables and
figures (what the notebooks show), articles (the source articles' claims, corrected), reference
(what real GPUs measured), results (what a notebook records), runall (execute the notebooks),
report (the run-all HTML report), notebooks (keep the notebooks clean source). Import them directly;
this package import stays light.
"""
__version__ = "0.1.0"
