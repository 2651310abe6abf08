"""benchmarks/summarise.py on one real device call (call 4 of 2026-12-04, tests/fixtures/device_call)."""
import json
import tarfile

from benchmarks.summarise import main, summarise


def test_summarise_one_call(tmp_path):
    with tarfile.open("tests/fixtures/device_call/runs.tgz") as t:
        t.extractall(tmp_path / "raw", filter="data")
    steps = [json.loads(x) for x in (tmp_path / "raw/l3b-sdpa-m16/metrics.jsonl").read_text().splitlines()]
    want = sum(r["tokens_per_s"] for r in steps[1:]) / (len(steps) - 1)
    out = summarise("tests/fixtures/device_call", "sample")
    runs = {r["name"]: r for r in out["runs"]}
    assert set(runs) == {"l3b-sdpa-m16", "l3b-flex-liger-m32"} and out["machine"]["deepspeed"] == "0.19.8"
    sdpa, flex = runs["l3b-sdpa-m16"], runs["l3b-flex-liger-m32"]
    assert abs(sdpa["tokens_per_s_after_first"] - want) < 0.1 and sdpa["first_step_s"] == steps[0]["step_time_s"]
    assert sdpa["attention"] == "sdpa" and flex["attention"] == "flex_attention" and flex["liger"] and not sdpa["liger"]
    assert sdpa["command"].startswith("accelerate launch") and "--attention sdpa" in sdpa["command"]
    # the projection keeps the measured fraction of the step floor, so it is below the H200's tokens/s
    assert 0 < sdpa["rtx4090_tokens_per_s"] < sdpa["tokens_per_s_after_first"]


def test_resummarising_a_call_replaces_it(tmp_path):
    ref = tmp_path / "ref.json"
    for _ in range(2):
        main(["tests/fixtures/device_call", "--call", "c4", "--into", str(ref)])
    main(["tests/fixtures/device_call", "--call", "c5", "--into", str(ref)])
    data = json.loads(ref.read_text())
    assert sorted(data["calls"]) == ["c4", "c5"] and len(data["runs"]) == 4


def test_summarise_a_levers_call():
    """benchmarks.levers' output (call 5 of 2026-12-04, the recipe against the HF Trainer + article config)."""
    raw = json.loads(open("tests/fixtures/levers_call/levers/levers.json").read())
    by = {r["name"]: r for r in raw["runs"]}
    out = summarise("tests/fixtures/levers_call", "c5")
    runs = {r["name"]: r for r in out["runs"]}
    assert set(runs) == {"recipe-fp32-sdpa-16", "recipe-fp32-flex-liger-32", "trainer-article"}
    art, flex = runs["trainer-article"], runs["recipe-fp32-flex-liger-32"]
    assert art["runner"] == "HF Trainer" and flex["runner"] == "cookbook"
    assert flex["tokens_per_s"] == by["recipe-fp32-flex-liger-32"]["tokens_per_s"] and flex["liger"]
    assert flex["attention"] == "flex" and flex["states"] == "fp32" and flex["micro_batch"] == 32
    assert (art["zero_stage"], art["offload_param"], art["micro_batch"], art["grad_accum"]) == (3, "cpu", 2, 8)
    assert flex["first_loss"] == by["recipe-fp32-flex-liger-32"]["losses"][0]


def test_projection_is_the_measurement_times_the_model_ratio():
    from benchmarks.summarise import project_rtx4090
    from cookbook.plan import Plan
    from cookbook.speed import Machine, gpu_spec, predict
    rec = {"model": "benchmarks/models/llama-3b", "world_size": 1, "seq_len": 1024, "micro_batch": 16,
           "grad_accum": 1, "zero_stage": 2, "offload_optimizer": "cpu", "offload_param": "none", "states": "fp32",
           "attention": "sdpa", "tokens_per_s": 1000.0}
    plan = Plan(model=rec["model"], num_gpus=1, gpu_memory_gib=24.0, seq_len=1024, micro_batch=16, grad_accum=1,
                zero_stage=2, offload_optimizer="cpu", offload_param="none")
    r = (predict(plan, Machine(gpu_spec("RTX 4090"), 16), attention="sdpa_masked").tokens_per_s
         / predict(plan, Machine(gpu_spec("H200"), 16), attention="sdpa_masked").tokens_per_s)
    assert 0.1 < r < 1.0                      # a 4090 is slower than an H200 on the same variant
    assert abs(project_rtx4090(rec, packed=True) - 1000.0 * r) < 1e-6
    assert project_rtx4090({**rec, "tokens_per_s": None}, packed=True) is None
