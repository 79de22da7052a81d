"""Config validation: a typo or an out-of-range value fails at start-up, naming the key."""

import dataclasses
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hydra.errors import ConfigCompositionException
from omegaconf.errors import ConfigKeyError, ValidationError

from trainbench import CONF_DIR
from trainbench.compose import compose_run
from trainbench.config.reference import describe, reference
from trainbench.config.run import DataConfig, TrainerConfig, validate
from trainbench.config.shared import HardwareConfig, load_hardware_profiles
from trainbench.core.errors import ConfigError
from trainbench.core.vocab import ParamKey, Summary

REPO = Path(__file__).resolve().parents[1]


def test_default_config_composes_and_validates():
    obj = validate(compose_run(["trainer=default"]))
    assert obj.model.name == "dqn" and obj.model.batch_size == 230
    assert obj.trainer.epochs == 500 and obj.trainer.warmup_epochs == 5
    assert obj.tracking.uri.startswith("sqlite:///") and obj.tracking.uri.endswith("mlruns/mlflow.db")


@pytest.mark.parametrize("override,key", [
    ("model.batch_size=-1", ParamKey.BATCH_SIZE),
    ("model.batch_size=0", ParamKey.BATCH_SIZE),
    ("trainer.epochs=0", "trainer.epochs"),
    ("trainer.warmup_epochs=-2", ParamKey.WARMUP_EPOCHS),
    ("data.train_frac=1.5", "data.train_frac"),
    ("model.lr=0", "model.lr"),
])
def test_out_of_range_values_name_the_key(override, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        validate(compose_run([override]))


@pytest.mark.parametrize("override,bound", [
    ("data.n_bars=1000000000", "10000000"),  # the generator would allocate ~300 GB, then a traceback
    ("data.features.vol_window=100000000", "100000"),
    ("trainer.latency.samples=1000000000", "100000"),
])
def test_sizes_that_allocate_have_an_upper_bound_named_with_the_fix(override, bound):
    key = override.split("=")[0]
    with pytest.raises(ConfigError) as e:
        validate(compose_run([override]))
    msg = str(e.value)
    assert f"it must be <= {bound}" in msg and f"Set e.g. {key}=<value <= {bound}>" in msg, msg
    assert len(msg.splitlines()) == 1


def test_unknown_device_fails_at_compose_naming_the_key():
    with pytest.raises((ConfigCompositionException, ValidationError)) as e:
        compose_run(["trainer.device=gpu"])
    assert "trainer.device" in str(e.value) or "device" in str(e.value.__cause__)


def test_typo_in_a_key_fails():
    with pytest.raises((ConfigCompositionException, ConfigKeyError)) as e:
        compose_run(["trainer.epoch=3"])
    assert "epoch" in str(e.value) + str(e.value.__cause__)


def test_batch_size_auto_is_accepted_but_not_words():
    assert validate(compose_run(["model.batch_size=auto"])).model.batch_size == "auto"
    with pytest.raises(ConfigError, match=ParamKey.BATCH_SIZE):
        validate(compose_run(["model.batch_size=big"]))


def test_every_field_has_a_doc():
    for schema in (DataConfig, TrainerConfig):
        for key, _, _, doc in describe(schema):
            assert doc, f"{key} has no doc"


def test_the_reference_lists_every_registered_models_keys_with_type_default_and_doc():
    """`python -m trainbench.config` prints run.py's and analyze.py's keys and each model's own."""
    from trainbench.models.registry import REGISTRY


    rows = reference(REGISTRY.specs())
    for key, type_, _default, doc in rows:
        assert type_ and doc, f"{key} lacks a type or a doc"
    heads = [i for i, r in enumerate(rows) if r[0].startswith("# model=")]
    assert [rows[i][0] for i in heads] == [f"# model={n}" for n in REGISTRY.names()]
    for i, spec in zip(heads, REGISTRY.specs(), strict=True):
        section = rows[i + 1:(heads + [len(rows)])[heads.index(i) + 1]]
        assert {r[0] for r in section} == {f"model.{f.name}" for f in dataclasses.fields(spec.config_cls)}
    tft = dict((r[0], r) for r in rows[heads[REGISTRY.names().index("tft")]:])
    assert tft["model.heads"][1:3] == ("int", "4")
    assert dict((r[0], r) for r in rows)["trainer.device"][1] == "auto|cpu|cuda"


def test_python_m_trainbench_config_prints_the_model_keys():
    p = subprocess.run([sys.executable, "-m", "trainbench.config"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "# model=tft" in p.stdout and re.search(r"^model\.heads +int +4 +Attention heads", p.stdout, re.M)
    assert re.search(r"^decision\.buffer +float +0\.5 ", p.stdout, re.M)


@pytest.mark.parametrize("model,overrides,key", [
    ("tft", ["model.hidden=30", "model.heads=4"], "model.hidden=30 is not divisible by model.heads=4"),
    ("tft", ["model.quantiles=[0.5,1.5]"], "model.quantiles"),
    ("mamba2", ["model.headdim=12"], "model.headdim=12 must divide expand \\* d_model"),
    ("mamba2", ["model.dt_min=0.5", "model.dt_max=0.1"], "model.dt_min=0.5 exceeds model.dt_max"),
])
def test_a_models_own_rules_fail_in_validate(model, overrides, key):
    """A model's cross-field rules (ModelConfig.check) are start-up errors, not failures of a built model."""
    with pytest.raises(ConfigError, match=key):
        validate(compose_run([f"model={model}", "size=small", *overrides]))


@pytest.mark.slow
def test_a_models_own_rules_accept_batch_size_auto():
    assert validate(compose_run(["model=tft", "size=small", "model.batch_size=auto"])).model.batch_size == "auto"
    assert validate(compose_run(["model=mamba2", "size=small", "model.batch_size=auto"])).model.batch_size == "auto"


def test_a_models_own_rule_exits_2_before_any_run_opens(tmp_path):
    """run.py model=tft model.hidden=30 model.heads=4: one error line, exit 2, nothing written to MLflow."""
    p = subprocess.run([sys.executable, "run.py", "debug=default", "model=tft", "model.hidden=30", "model.heads=4",
                        f"tracking.uri=sqlite:///{tmp_path}/mlflow.db",
                        f"tracking.artifact_location={tmp_path}/artifacts", f"paths.data_dir={tmp_path}/data",
                        f"hydra.run.dir={tmp_path}/out"],
                       cwd=REPO, capture_output=True, text=True, timeout=300)
    assert p.returncode == 2, p.stderr
    errors = [line for line in p.stderr.splitlines() if line.startswith("error:")]
    assert errors == ["error: model.hidden=30 is not divisible by model.heads=4: pick heads among the divisors "
                      "of hidden."], p.stderr
    assert "Traceback" not in p.stderr
    assert not (tmp_path / "mlflow.db").exists()  # the store was never opened: no run, not even a FAILED one
    assert not (tmp_path / "artifacts").exists()


def test_hardware_profiles_are_read_through_the_schema(tmp_path):
    """Peaks and bandwidths reach MFU and the projection only through HardwareConfig."""
    profiles = load_hardware_profiles(CONF_DIR / "hardware")
    assert {p.stem for p in (CONF_DIR / "hardware").glob("*.yaml")} == set(profiles)
    assert profiles["t4"].peak_tflops == {"fp32": 8.1, "fp16": 65.0} and profiles["t4"].memory_gbps == 320
    (tmp_path / "ok.yaml").write_text("defaults: [base_hardware, _self_]\ngpu: NVIDIA L4\npeak_tflops: {fp32: 30.3}\n")
    assert load_hardware_profiles(tmp_path)["ok"].gpu == "NVIDIA L4"
    for text, key in (("gpu: X\npeak_tflops: {fp8: 100}\n", "hardware.peak_tflops.fp8"),
                      ("gpu: X\nmemory_gbs: 300\n", "memory_gbs"),
                      ("gpu: X\nmemory_gbps: -1\n", "hardware.memory_gbps"),
                      ("gpu: X\nvram_mb: lots\n", "vram_mb")):
        (tmp_path / "bad.yaml").write_text(text)
        with pytest.raises(ConfigError, match=key) as e:
            load_hardware_profiles(tmp_path)
        assert "bad.yaml" in str(e.value)


def test_hardware_profiles_read_again_only_when_a_file_changes_and_each_caller_gets_its_own(tmp_path):
    (tmp_path / "ok.yaml").write_text("gpu: NVIDIA L4\npeak_tflops: {fp32: 30.3}\n")
    first = load_hardware_profiles(tmp_path)
    first["ok"].peak_tflops["fp32"] = 1.0  # a caller's change stays its own
    assert load_hardware_profiles(tmp_path)["ok"].peak_tflops == {"fp32": 30.3}
    (tmp_path / "ok.yaml").write_text("gpu: NVIDIA L4\npeak_tflops: {fp32: 30.4}\n")  # same size, same second
    assert load_hardware_profiles(tmp_path)["ok"].peak_tflops == {"fp32": 30.4}
    (tmp_path / "new.yaml").write_text("gpu: NVIDIA T4\n")
    assert set(load_hardware_profiles(tmp_path)) == {"ok", "new"}
    (tmp_path / "new.yaml").write_text("gpu: X\nvram_mb: lots\n")  # a bad file fails on every call
    for _ in range(2):
        with pytest.raises(ConfigError, match="vram_mb"):
            load_hardware_profiles(tmp_path)


def test_power_w_doc_says_what_the_decision_does():
    """hardware.power_w=None: NVML's measured power, else the runs' param, else the local cost is unpriced."""
    from trainbench.analysis.decision.decision import local_power

    doc = next(d for k, _, _, d in describe(HardwareConfig) if k == "power_w")
    assert "NVML" in doc and "unpriced" in doc and " 0 " not in doc

    class Run:
        def __init__(self, metrics, params):
            self.metrics, self.params = metrics, params

    hw = HardwareConfig(name="auto")
    assert local_power(hw, [Run({Summary.GPU_POWER_W_MEAN: 50.0}, {})])[0] == 50.0
    assert local_power(hw, [Run({}, {"hardware.power_w": "60"})])[0] == 60.0
    assert local_power(hw, [Run({}, {})])[0] is None  # unpriced, not 0
    assert local_power(HardwareConfig(name="x", power_w=70), [Run({Summary.GPU_POWER_W_MEAN: 50.0}, {})])[0] == 70.0


def test_a_folder_of_paths_that_is_or_lies_under_a_file_is_refused_naming_that_key(tmp_path):
    from trainbench.config.analyze import validate_analyze

    afile = tmp_path / "afile"
    afile.write_text("x")
    for override, says in ((f"paths.root={afile}", f"paths.root={afile} is a file, not a folder"),
                           (f"paths.data_dir={afile}/data", f"paths.data_dir={afile}/data lies under {afile}")):
        with pytest.raises(ConfigError, match=re.escape(says)):
            validate(compose_run(["model=dqn", override], root=str(tmp_path)))
    with pytest.raises(ConfigError, match=re.escape(f"paths.root={afile} is a file")):
        validate_analyze(compose_run([f"paths.root={afile}"], config_name="analyze", root=str(tmp_path)))
    validate(compose_run(["model=dqn", f"paths.root={tmp_path}/new"], root=str(tmp_path)))  # not made yet: fine
