"""The analysis states each model's fast-path switches and warns when pooled runs differ in one."""

from __future__ import annotations

from analysis_helpers import noisy, report_from_store

from trainbench.core.vocab import ParamKey


def test_switches_are_reported_and_mixed_runs_warned(store, tmp_path):
    same = {ParamKey.TRAINER_PRECISION: "bf16", ParamKey.TRAINER_COMPILE: "False", ParamKey.TRAINER_OPTIMIZER_IMPL: "auto"}
    store.add_run("dqn", noisy(5.0, 40, 0.01, 1), sweep_id="fp", extra_params=same)
    store.add_run("dqn", noisy(5.0, 40, 0.01, 2), sweep_id="fp", extra_params=same, job="1")
    store.add_run("ppo", noisy(9.0, 40, 0.01, 3), sweep_id="fp", job="2",
                  extra_params={**same, ParamKey.TRAINER_PRECISION: "fp32"})
    store.add_run("ppo", noisy(6.0, 40, 0.01, 4), sweep_id="fp", job="3", extra_params={**same, ParamKey.TRAINER_COMPILE: "True"})
    r = report_from_store(store, tmp_path, "sweep=fp", "decision.plan=[dqn,ppo]")
    dqn, ppo = r["models"]["dqn"], r["models"]["ppo"]
    assert dqn["fast_paths"] == same
    assert not any("differ" in w for w in dqn["stability"]["warnings"])
    assert ppo["fast_paths"][ParamKey.TRAINER_PRECISION] == ["bf16", "fp32"]
    text = " ".join(ppo["stability"]["warnings"])
    assert ParamKey.TRAINER_PRECISION in text and ParamKey.TRAINER_COMPILE in text and "optimizer_impl" not in text
