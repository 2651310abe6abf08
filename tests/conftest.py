"""Fixtures shared by the test modules."""
import os

import pytest


@pytest.fixture(scope="module")
def ds_dist(tmp_path_factory):
    """A 1-process gloo group: DeepSpeedConfig reads the mpu's world size only once deepspeed.comm is up."""
    import torch.distributed as tdist
    import deepspeed
    created = False
    if not tdist.is_initialized():
        store = tdist.FileStore(str(tmp_path_factory.mktemp("dist") / "store"), 1)
        tdist.init_process_group("gloo", store=store, rank=0, world_size=1)
        created = True
    env = {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29555"}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update({k: os.environ.get(k) or v for k, v in env.items()})
    deepspeed.init_distributed(dist_backend="gloo", auto_mpi_discovery=False)
    yield
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
    if created:
        tdist.destroy_process_group()
