"""Reading what runs wrote to an MLflow store, with MLflow's client."""

from __future__ import annotations

from mlflow.tracking import MlflowClient


def train_runs(client: MlflowClient, experiment: str = "trainbench") -> list:
    """Every train run (``tags.kind = 'train'``) of ``experiment``; none when the experiment does not exist."""
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        return []
    return client.search_runs([exp.experiment_id], "tags.kind = 'train'", max_results=1000)


def metric_steps(client: MlflowClient, run_id: str, key: str = "loss") -> list[int]:
    """The sorted steps at which ``run_id`` logged ``key``."""
    return sorted(m.step for m in client.get_metric_history(run_id, key))
