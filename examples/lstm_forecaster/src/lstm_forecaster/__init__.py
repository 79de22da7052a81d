"""An LSTM forecaster of bar returns: an example trainbench model plugin (see model.py)."""

from lstm_forecaster.model import SPEC, LSTMForecasterConfig

__all__ = ["SPEC", "LSTMForecasterConfig"]
