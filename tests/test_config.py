"""Config validation: a typo or an out-of-range value fails at start-up, naming the key."""

import pytest
from hydra.errors import ConfigCompositionException
from omegaconf.errors import ConfigKeyError, ValidationError

from trainbench.config import compose_run, describe
from trainbench.schema import ConfigError, DataConfig, TrainerConfig, validate


def test_default_config_composes_and_validates():
    obj = validate(compose_run())
    assert obj.model.name == "dqn" and obj.model.batch_size == 230
    assert obj.trainer.epochs == 500 and obj.trainer.warmup_epochs == 5
    assert obj.tracking.uri.startswith("sqlite:///") and obj.tracking.uri.endswith("mlruns/mlflow.db")


@pytest.mark.parametrize("override,key", [
    ("model.batch_size=-1", "model.batch_size"),
    ("model.batch_size=0", "model.batch_size"),
    ("trainer.epochs=0", "trainer.epochs"),
    ("trainer.warmup_epochs=-2", "trainer.warmup_epochs"),
    ("data.train_frac=1.5", "data.train_frac"),
    ("model.lr=0", "model.lr"),
])
def test_out_of_range_values_name_the_key(override, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        validate(compose_run([override]))


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
    with pytest.raises(ConfigError, match="model.batch_size"):
        validate(compose_run(["model.batch_size=big"]))


def test_every_field_has_a_doc():
    for schema in (DataConfig, TrainerConfig):
        for key, _, doc in describe(schema):
            assert doc, f"{key} has no doc"
