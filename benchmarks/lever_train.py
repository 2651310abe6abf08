"""``cookbook.train`` with issue 19's code-level levers switched on by environment variables.

Launched by :mod:`benchmarks.levers` in place of ``-m cookbook.train`` (same ``accelerate launch``
command, same arguments), so each lever is measured on the cookbook's own loop:

* ``LEVER_LIGER=1``: Liger kernels' fused linear cross-entropy for LLaMA
  (``liger_kernel.transformers.apply_liger_kernel_to_llama(fused_linear_cross_entropy=True)``, the
  other Liger kernels off so only this lever changes): the loss is computed chunk by chunk from the
  last hidden states and ``lm_head``, and the ``[micro batch, seq, vocab]`` logits are never stored.
* ``LEVER_ZENFLOW_NATIVE=1``: Accelerate's DeepSpeed wrapper stops forcing a gradient-accumulation
  boundary on every ``backward`` (``accelerate/utils/deepspeed.py``, ``DeepSpeedEngineWrapper.backward``
  calls ``engine.set_gradient_accumulation_boundary(sync_gradients)``), so DeepSpeed's ZenFlow decides
  its own update boundaries (``deepspeed/runtime/zenflow/engine.py``, ``is_zenflow_update_boundary``:
  the CPU update every ``update_interval`` steps). Without it ZenFlow still runs, but every step is a
  boundary: update_interval is in effect 1 (the CPU step overlaps the next step, one step late).
"""
from __future__ import annotations

import contextlib
import os
import sys


def apply_levers() -> list[str]:
    """Apply the levers named in the environment; returns what was applied (for the log)."""
    done = []
    if os.environ.get("LEVER_LIGER") == "1":
        from liger_kernel.transformers import apply_liger_kernel_to_llama
        apply_liger_kernel_to_llama(rope=False, cross_entropy=False, fused_linear_cross_entropy=True,
                                    rms_norm=False, swiglu=False)
        done.append("liger fused_linear_cross_entropy (LlamaForCausalLM.forward patched)")
    if os.environ.get("LEVER_ZENFLOW_NATIVE") == "1":
        from accelerate.utils import deepspeed as acc_ds

        def backward(self, loss, sync_gradients=True, **kwargs):
            if getattr(self.engine, "zenflow", False):
                self.engine.backward(loss, **kwargs)   # DeepSpeed (ZenFlow) picks the boundary
                if sync_gradients:
                    self.engine.step()
                return
            return _orig(self, loss, sync_gradients=sync_gradients, **kwargs)

        _orig = acc_ds.DeepSpeedEngineWrapper.backward
        acc_ds.DeepSpeedEngineWrapper.backward = backward
        done.append("accelerate DeepSpeedEngineWrapper.backward: ZenFlow decides update boundaries")
    return done


@contextlib.contextmanager
def as_entry():
    """Inside: ``cookbook.launch.launch`` runs the same ``accelerate launch`` command with this module as the
    ranks' entry (``-m benchmarks.lever_train`` instead of ``-m cookbook.train``), ``command.sh`` rewritten."""
    import dataclasses

    from cookbook import launch as L
    orig = L.prepare_run

    def prepare_run(*a, **k):
        folder = orig(*a, **k)
        cmds = tuple([("benchmarks.lever_train" if x == "cookbook.train" else x) for x in c] for c in folder.commands)
        folder = dataclasses.replace(folder, commands=cmds)
        (folder.run_dir / "command.sh").write_text("#!/usr/bin/env bash\n" + folder.command_text + "\n")
        return folder
    L.prepare_run = prepare_run
    try:
        yield
    finally:
        L.prepare_run = orig


def main(argv=None) -> int:
    done = apply_levers()
    print(f"[levers] {done or 'none'}", flush=True)
    from cookbook.train import main as train_main
    return train_main(argv)


if __name__ == "__main__":
    sys.exit(main())
