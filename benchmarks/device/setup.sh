# Sourced at the start of every device call (one H200, no network): the carried wheels and Debian's libaio.
#   carry: [".whl", ".debs"]   (.whl: `pip download` / `pip wheel` output, .debs: `apt-get download libaio1 libaio-dev`)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || { echo "wheel install failed"; exit 3; }
export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH TORCH_CUDA_ARCH_LIST=9.0 PYTHONUNBUFFERED=1
if ls .debs/*.deb >/dev/null 2>&1 && [ ! -e /usr/local/include/libaio.h ]; then
  mkdir -p /tmp/aio && for d in .debs/*.deb; do dpkg -x "$d" /tmp/aio; done
  cp /tmp/aio/usr/include/libaio.h /usr/local/include/ && cp -a /tmp/aio/usr/lib/x86_64-linux-gnu/libaio.so* /usr/local/lib/ \
    && ldconfig || echo "libaio not installed: NVMe offload unavailable"
fi
mkdir -p "$OUT"
python3 - > "$OUT/machine.json" <<'PY'
import json, os, platform, shutil, subprocess
import psutil, torch, transformers, accelerate, deepspeed
gpu = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
                     capture_output=True, text=True).stdout.strip()
print(json.dumps({"gpu": gpu, "cpu_cores": os.cpu_count(), "host_memory_gib": psutil.virtual_memory().total / 2**30,
                  "disk_free_gib": shutil.disk_usage("/tmp").free / 2**30, "python": platform.python_version(),
                  "torch": torch.__version__, "cuda": torch.version.cuda, "transformers": transformers.__version__,
                  "accelerate": accelerate.__version__, "deepspeed": deepspeed.__version__}, indent=1))
PY
cat "$OUT/machine.json"
