#!/usr/bin/env bash
# Here (not on the device): the wheels and .debs a device call carries (carry: [".whl", ".debs"]).
# The H200 image has torch 2.11, transformers 5.17, Accelerate 1.15, pandas, matplotlib, psutil, pyarrow, triton;
# it lacks DeepSpeed, pydantic, hjson, datasets, papermill, ipykernel, ipywidgets and liger-kernel
# (../shared/notes/device.md). DeepSpeed is a source archive: a pure-Python wheel is built here with DS_BUILD_OPS=0.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .whl .debs
PLAT="--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_31_x86_64 --platform manylinux_2_34_x86_64 --platform manylinux_2_35_x86_64"
PKGS="annotated_types asttokens comm datasets==5.2.0 debugpy dill entrypoints executing fastjsonschema fsspec hjson
 ipykernel ipython ipython_pygments_lexers ipywidgets jedi jsonschema jsonschema_specifications jupyter_client
 jupyter_core jupyterlab_widgets matplotlib_inline multiprocess nbclient nbformat nest_asyncio2 papermill parso pexpect
 platformdirs prompt_toolkit ptyprocess pure_eval pydantic pydantic_core pyzmq referencing rpds_py stack_data tenacity
 tornado traitlets truststore typing_inspection wcwidth widgetsnbextension liger_kernel einops py-cpuinfo msgpack nvidia_ml_py"
for p in $PKGS; do
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $PLAT -d .whl "$p" \
    || echo "could not fetch $p" >&2
done
ls .whl/deepspeed-*.whl >/dev/null 2>&1 || DS_BUILD_OPS=0 python3 -m pip wheel -q --no-deps deepspeed==0.19.8 -w .whl
(cd .debs && ls *.deb >/dev/null 2>&1 || apt-get download libaio1 libaio-dev 2>/dev/null || apt-get download libaio1t64 libaio-dev)
ls .whl | wc -l; du -sh .whl .debs
