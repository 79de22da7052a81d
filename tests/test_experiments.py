"""Every experiment bundle composes, validates and builds its model (glob over conf/experiment/)."""


import pytest
import torch

from trainbench import CONF_DIR
from trainbench.compose import compose_run
from trainbench.config.run import validate
from trainbench.data.in_memory import make_market_data
from trainbench.models.base import BuildContext
from trainbench.models.registry import REGISTRY

EXPERIMENTS = sorted(p.stem for p in (CONF_DIR / "experiment").glob("*.yaml"))


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_experiment_composes_and_validates(name):
    obj = validate(compose_run([f"experiment={name}"]))
    assert obj.model.name in REGISTRY


def test_tlob_paper_keeps_the_book_data_and_paper_sizes():
    obj = validate(compose_run(["experiment=tlob_paper"]))
    assert (obj.model.seq_len, obj.model.hidden_dim, obj.data.name) == (128, 40, "mbp10")


def test_tft_volatility_builds_at_googles_size():
    obj = validate(compose_run(["experiment=tft_volatility"]))
    tr = REGISTRY.get("tft").build(obj.model, make_market_data(1200), BuildContext(device=torch.device("cpu")))
    # 2.79 M: pytorch-forecasting's count at this size (models/tft.py: structure follows the references)
    assert tr.info()["num_params"] > 2_700_000 and tr.batch_size == 64
    assert tr.info()["attention_span"] == "all"  # Google's span: every step queries
