"""Every phase of a run timed and recorded; the noise scale within its budget; a stop signal after the measured
epochs leaves the run completed, naming what it skipped. Through train_job into a real MLflow store."""

from __future__ import annotations

import os
import signal
import uuid

import pytest
from mlflow.tracking import MlflowClient

import trainbench.core.stop_signals as stop_signals
import trainbench.data.loader as loader
import trainbench.measure.noise_scale as noise_scale
import trainbench.train as train
from trainbench.compose import compose_run
from trainbench.core.errors import JobFailed
from trainbench.core.vocab import RUN_PHASES, Artifact, Outcome, ParamKey, Phase, Summary, Tag, phase_metric
from trainbench.data.in_memory import make_market_data
from trainbench.models.base import ModelSpec
from trainbench.models.registry import REGISTRY


class _StepRegistry:
    """The real registry, except that the model's ``memory_step`` (the noise scale's step) runs ``hook``
    first on every call."""

    def __init__(self, hook, epoch_hook=None):
        self.hook, self.epoch_hook = hook, epoch_hook

    def __getattr__(self, attr):
        return getattr(REGISTRY, attr)

    def resolve(self, model_cfg):
        return self.get(model_cfg.name)

    def get(self, name):
        spec, hook, epoch_hook = REGISTRY.get(name), self.hook, self.epoch_hook

        def build(cfg, data, ctx):
            tr = spec.build(cfg, data, ctx)

            class Hooked(type(tr)):  # a subclass, so that the memory predictor's copy of the model copies it
                def train_epoch(self):
                    if epoch_hook is not None:
                        epoch_hook()
                    return super().train_epoch()

                def memory_step(self, batch_size):
                    step = super().memory_step(batch_size)

                    def hooked():
                        hook()
                        return step()
                    return hooked

            tr.__class__ = Hooked
            return tr

        return ModelSpec(name=spec.name, config_cls=spec.config_cls, build=build, data_kind=spec.data_kind)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """One MLflow store for the runs here (creating one costs seconds); each run has its own sweep id."""
    return tmp_path_factory.mktemp("phases")


@pytest.fixture
def sigterm_restored():
    """train_job turns SIGTERM into KeyboardInterrupt for its process: put the test process's back after."""
    old = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, old)


def _job(store, monkeypatch, hook, *overrides, epoch_hook=None):
    monkeypatch.setattr(train, "REGISTRY", _StepRegistry(hook, epoch_hook))
    monkeypatch.setattr(loader, "load_market_data", lambda *a, **k: make_market_data())
    sweep = f"phases-{uuid.uuid4().hex[:8]}"
    cfg = compose_run(["model=dqn", "debug=default", "trainer.epochs=2", "trainer.warmup_epochs=1",
                       "model.updates_per_epoch=3", "model.learning_starts=64", "trainer.latency.samples=1",
                       f"tracking.uri=sqlite:///{store}/mlflow.db", f"tracking.artifact_location={store}/a",
                       f"sweep_id={sweep}", *overrides])
    outcome = train.train_job(cfg)
    client = MlflowClient(f"sqlite:///{store}/mlflow.db")
    exp = client.get_experiment_by_name("trainbench")
    (run,) = client.search_runs([exp.experiment_id], f"tags.{Tag.SWEEP_ID} = '{sweep}'")
    return outcome, client, run


@pytest.mark.slow
def test_every_phase_is_recorded_and_a_slow_step_stops_the_noise_scale_at_its_budget(
        store, monkeypatch, sigterm_restored, capsys):
    clock = {"t": 0.0}
    monkeypatch.setattr(noise_scale, "_clock", lambda: clock["t"])

    def slow():  # each step of the noise scale takes 1000 s on the budget's clock
        clock["t"] += 1000.0

    outcome, client, run = _job(store, monkeypatch, slow, "trainer.noise_scale.budget_frac=1")
    assert outcome == Outcome.COMPLETED and run.data.tags[Tag.OUTCOME] == Outcome.COMPLETED
    m = run.data.metrics
    # the first pair fits the estimate the measured epochs give; after it, the next one cannot fit
    assert m[Summary.NOISE_SCALE_PAIRS] == 1
    assert "allowed 1 of 16 pairs" in run.data.tags[Tag.NOISE_SCALE_NOTE]
    for p in RUN_PHASES:  # every phase of a completed run, each with its seconds
        assert m[phase_metric(p)] >= 0, p
    wall = m[Summary.RUN_WALL_S]
    assert sum(m[phase_metric(p)] for p in RUN_PHASES) <= wall * 1.01
    assert m[Summary.MEASURED_SHARE_PCT] == pytest.approx(100 * m[phase_metric(Phase.MEASURED_EPOCHS)] / wall, rel=0.05)
    assert Tag.PHASES_SKIPPED not in run.data.tags
    mode = run.data.tags[Tag.WORKLOAD_PROFILE_MODE]  # which tensors the profile traced, and why
    assert mode.startswith("real tensors (a real step ~") and "step on fake tensors ~" in mode
    assert run.data.tags[Tag.WORKLOAD_PROFILE_METHOD].startswith("real tensors; train_epoch: steps scaled (steps 2 of 3)")
    note = run.data.tags["mlflow.note.content"]
    assert "run wall time" in note and "of which the measured epochs" in note
    out = capsys.readouterr().out
    assert "dqn: completed in" in out and "of the run's wall time" in out and "noise scale" in out


def test_no_pair_is_taken_when_not_one_fits_and_the_run_says_so(store, monkeypatch, sigterm_restored):
    outcome, _, run = _job(store, monkeypatch, lambda: None, "trainer.noise_scale.budget_frac=1e-9",
                           "trainer.profile_workload=false")
    assert outcome == Outcome.COMPLETED
    assert run.data.metrics[Summary.NOISE_SCALE_PAIRS] == 0 and Summary.NOISE_SCALE not in run.data.metrics
    assert "not one pair of steps fits the budget" in run.data.tags[Tag.NOISE_SCALE_NOTE]


def test_a_sigterm_in_the_noise_scale_keeps_the_run_completed_and_names_what_was_skipped(
        store, monkeypatch, sigterm_restored):
    def sigterm():
        os.kill(os.getpid(), signal.SIGTERM)

    outcome, client, run = _job(store, monkeypatch, sigterm, "trainer.noise_scale.budget_frac=1")
    assert outcome == Outcome.COMPLETED
    assert run.info.status == "FINISHED" and run.data.tags[Tag.OUTCOME] == Outcome.COMPLETED
    # a CPU run without a memory budget predicts its CUDA peak for the analysis, after the noise scale
    assert run.data.tags[Tag.PHASES_SKIPPED] == f"{Phase.NOISE_SCALE},{Phase.MEMORY_PREDICTION},{Phase.WORKLOAD_PROFILE}"
    assert "stop signal" in run.data.tags[Tag.NOISE_SCALE_NOTE]
    m = run.data.metrics
    assert m[Summary.EPOCHS_MEASURED] == 2 and Summary.EPOCH_TIME_MS_MEAN in m  # what it measured is kept
    assert phase_metric(Phase.LATENCY) in m and phase_metric(Phase.WORKLOAD_PROFILE) not in m
    assert Summary.NOISE_SCALE not in m and Summary.WORKLOAD_FLOPS_PER_EPOCH not in m
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert Artifact.EPOCHS in artifacts and Artifact.WORKLOAD_PROFILE not in artifacts
    assert "stopped after the measured epochs" in run.data.tags["mlflow.note.content"]


def test_the_noise_scale_can_be_turned_off(store, monkeypatch, sigterm_restored):
    calls = []
    outcome, _, run = _job(store, monkeypatch, lambda: calls.append(1), "trainer.noise_scale.enabled=false",
                           "trainer.profile_workload=false")
    assert outcome == Outcome.COMPLETED and calls == []
    assert "turned off" in run.data.tags[Tag.NOISE_SCALE_NOTE] and phase_metric(Phase.NOISE_SCALE) not in run.data.metrics


def test_a_signal_after_the_epoch_loop_is_noted_skips_what_follows_then_is_passed_on(sigterm_restored):
    got = []
    signal.signal(signal.SIGTERM, lambda signum, frame: got.append(signum))  # e.g. a sweep's handler
    phases = train._Phases()
    phases.stops.note_after_loop()  # the harness calls it once the epoch loop has ended
    os.kill(os.getpid(), signal.SIGTERM)
    written = not got  # noted: the recording goes on
    assert phases.optional(Phase.WORKLOAD_PROFILE, lambda: 1 / 0) is None  # the phases after it are skipped
    phases.stops.pass_on()
    assert written and got == [signal.SIGTERM] and phases.signal == f"signal {int(signal.SIGTERM)}"
    assert phases.skipped == [Phase.WORKLOAD_PROFILE]
    assert signal.getsignal(signal.SIGTERM).__name__ == "<lambda>"  # its handler is back


def test_the_profile_traces_fake_tensors_where_a_fake_step_costs_less_than_a_real_one():
    from types import SimpleNamespace

    model = SimpleNamespace(samples_per_epoch=4096, batch_size=1024)  # 4 steps an epoch
    epoch = {Summary.EPOCH_TIME_MS_MEAN: 200_000.0}  # a real step: 50 s
    fake, why = train._trace_on_fakes(model, epoch, predict_s=2.0)  # the prediction's two fake steps: 1 s each
    assert fake and why == "a step on fake tensors ~1.0 s < a real step ~50.0 s"
    fake, why = train._trace_on_fakes(model, {Summary.EPOCH_TIME_MS_MEAN: 40.0}, predict_s=2.0)
    assert not fake and why == "a real step ~10 ms <= a step on fake tensors ~1.0 s"
    assert train._trace_on_fakes(model, epoch, predict_s=None) == (
        False, "no fake step measured to compare with a real one")


def test_a_sigterm_while_the_run_opens_ends_it_interrupted_not_left_running(store, monkeypatch, sigterm_restored):
    """A sweep stopped just as a job's run was created (CI: local_gpus' SIGTERM test): the run ends as
    interrupted, with its status, instead of staying RUNNING for good."""
    from trainbench.tracking.writer import RunWriter

    start = RunWriter.start

    def start_then_sigterm(self, *a, **k):
        run_id = start(self, *a, **k)  # the run exists in the store
        os.kill(os.getpid(), signal.SIGTERM)
        return run_id

    monkeypatch.setattr(RunWriter, "start", start_then_sigterm)
    with pytest.raises(JobFailed, match="ended as interrupted"):
        _job(store, monkeypatch, lambda: None, "sweep_id=phases-opens")
    client = MlflowClient(f"sqlite:///{store}/mlflow.db")
    exp = client.get_experiment_by_name("trainbench")
    (run,) = client.search_runs([exp.experiment_id], f"tags.{Tag.SWEEP_ID} = 'phases-opens'")
    assert run.info.status == "KILLED" and run.data.tags[Tag.OUTCOME] == Outcome.INTERRUPTED
    assert Summary.EPOCHS_MEASURED not in run.data.metrics


def test_a_sigterm_while_a_run_fails_to_open_still_reaches_its_handler(store, monkeypatch, sigterm_restored):
    """The run could not be opened (the store went away) while a sweep's SIGTERM was held: the job fails with
    its own error, and the signal reaches the sweep's handler instead of being dropped."""
    from trainbench.tracking.writer import RunWriter

    def start_fails(self, *a, **k):
        _sigterm()
        raise RuntimeError("the store went away")

    got = []
    monkeypatch.setattr(RunWriter, "start", start_fails)
    monkeypatch.setattr(stop_signals, "interrupt_on_stop_signals",
                        lambda: signal.signal(signal.SIGTERM, lambda signum, frame: got.append(signum)))
    with pytest.raises(RuntimeError, match="the store went away"):
        _job(store, monkeypatch, lambda: None)
    assert got == [signal.SIGTERM]


def _sigterm():
    os.kill(os.getpid(), signal.SIGTERM)


def test_a_sigterm_while_a_failure_is_handled_keeps_what_was_measured(store, monkeypatch, sigterm_restored):
    """A data-parallel rank whose peer died (CI): its collective breaks, and torchrun's SIGTERM lands while the
    harness handles that failure. The run ends ``failed``, with its summary and artifacts, not ``interrupted``
    with the epochs alone."""
    import trainbench.measure.harness as harness

    epochs = {"n": 0}

    def third_fails():
        epochs["n"] += 1
        if epochs["n"] == 3:
            raise RuntimeError("Connection reset by peer")

    monkeypatch.setattr(harness.log, "exception", lambda *a, **k: _sigterm())  # the signal inside the handler
    with pytest.raises(JobFailed, match="ended as failed"):
        _job(store, monkeypatch, lambda: None, "trainer.epochs=5", epoch_hook=third_fails)
    client = MlflowClient(f"sqlite:///{store}/mlflow.db")
    (run,) = client.search_runs([client.get_experiment_by_name("trainbench").experiment_id],
                                f"tags.{Tag.ERROR} LIKE '%Connection reset by peer%'")
    assert run.info.status == "FAILED" and run.data.tags[Tag.OUTCOME] == Outcome.FAILED
    assert run.data.metrics[Summary.EPOCHS_MEASURED] == 1  # the warmup epoch, then one measured before it failed
    assert Artifact.EPOCHS in {a.path for a in client.list_artifacts(run.info.run_id)}


def test_a_sigterm_between_the_epochs_and_their_record_keeps_the_run_completed(store, monkeypatch, sigterm_restored):
    """The signal lands after the epoch loop, in the first write of its result (it raised there, and the run
    ended ``interrupted`` without its summary): the run is recorded, completed, the optional phases skipped,
    and the signal then reaches the handler it would have (here a sweep's)."""
    from trainbench.tracking.writer import RunWriter

    set_tags = RunWriter.set_tags

    def signal_at_the_stop_reason(self, tags):
        set_tags(self, tags)
        if Tag.STOP_REASON in tags:
            _sigterm()

    got = []
    monkeypatch.setattr(RunWriter, "set_tags", signal_at_the_stop_reason)
    monkeypatch.setattr(stop_signals, "interrupt_on_stop_signals",
                        lambda: signal.signal(signal.SIGTERM, lambda signum, frame: got.append(signum)))
    outcome, client, run = _job(store, monkeypatch, lambda: None)
    assert outcome == Outcome.COMPLETED and run.data.tags[Tag.OUTCOME] == Outcome.COMPLETED
    assert run.data.metrics[Summary.EPOCHS_MEASURED] == 2 and Summary.EPOCH_TIME_MS_MEAN in run.data.metrics
    assert run.data.tags[Tag.PHASES_SKIPPED] == f"{Phase.LATENCY},{Phase.NOISE_SCALE},{Phase.MEMORY_PREDICTION}," \
                                                 f"{Phase.WORKLOAD_PROFILE}"
    assert Artifact.EPOCHS in {a.path for a in client.list_artifacts(run.info.run_id)}
    assert got == [signal.SIGTERM]  # passed on once the run had ended
    assert signal.getsignal(signal.SIGTERM) is not None and signal.getsignal(signal.SIGTERM).__name__ == "<lambda>"


def test_a_sigterm_in_the_ends_writes_does_not_cut_them(store, monkeypatch, sigterm_restored):
    """torchrun's SIGTERM reached rank 0 while it set its run's status (CI): only the end's wait for a store that
    is away stops at a signal, never the writes before it."""
    from trainbench.tracking.writer import RunWriter

    set_tags = RunWriter.set_tags

    def signal_at_the_outcome(self, tags):
        set_tags(self, tags)
        if Tag.OUTCOME in tags:
            _sigterm()

    monkeypatch.setattr(RunWriter, "set_tags", signal_at_the_outcome)
    outcome, _, run = _job(store, monkeypatch, lambda: None, "trainer.noise_scale.enabled=false")
    assert outcome == Outcome.COMPLETED
    assert run.info.status == "FINISHED" and run.data.tags[Tag.OUTCOME] == Outcome.COMPLETED


def test_a_sigterm_after_the_epochs_of_a_sweeps_job_stops_the_sweep(store, monkeypatch, sigterm_restored):
    """An in-process sweep: the job's run ends completed with what it measured, and the signal, passed on once
    the run has ended, reaches the sweep's handler (train_job keeps it), so that no further job starts."""
    from omegaconf import OmegaConf

    from trainbench.sweep import jobs

    monkeypatch.setattr(jobs, "record_job", lambda *a: None)
    monkeypatch.setattr(jobs, "install_lost_interrupt_hook", lambda: None)
    monkeypatch.setattr(jobs.STATE, "stop_signal", None)
    monkeypatch.setattr(jobs.STATE, "installed", False)
    sigint = signal.getsignal(signal.SIGINT)
    try:
        jobs.install_stop_handlers()
        outcome = jobs.sweep_job(OmegaConf.create({}), lambda cfg: _job(
            store, monkeypatch, _sigterm, "trainer.noise_scale.budget_frac=1")[0])
        assert outcome == Outcome.COMPLETED
        assert jobs.stop_requested() and jobs.STATE.stop_signal == signal.SIGTERM
    finally:
        signal.signal(signal.SIGINT, sigint)


def test_latency_leaves_out_a_training_batch_whose_first_passes_cannot_fit_and_says_why():
    # a 30 s training step: a pass ~10 s, one warmup and one sample ~20 s, against a 1 s share of the budget
    sizes, notes = train.latency_batches(1024, step_s=30.0, share_s=1.0, warmup=3)
    assert sizes == [1] and len(notes) == 1
    assert notes[0].startswith("not measured at batch 1024: 2 pass(es) there (~10.0 s each") and "1.0 s" in notes[0]
    # within the estimate's slack (x2) it is measured: 2 x 1 s passes / 2 <= the 1 s share
    assert train.latency_batches(1024, step_s=3.0, share_s=1.0, warmup=3) == ([1, 1024], [])
    assert train.latency_batches(1024, step_s=None, share_s=1.0, warmup=3) == ([1, 1024], [])  # no estimate
    assert train.latency_batches(1, step_s=30.0, share_s=2.0, warmup=3) == ([1], [])  # batch 1: always


def test_a_run_whose_training_batch_latency_cannot_fit_records_batch_1_and_the_note(store, monkeypatch, sigterm_restored):
    outcome, _, run = _job(store, monkeypatch, lambda: None, "trainer.latency.budget_frac=1e-9",
                           "trainer.noise_scale.enabled=false", "trainer.profile_workload=false")
    assert outcome == Outcome.COMPLETED
    batch = int(run.data.params[ParamKey.BATCH_SIZE])
    assert batch > 1 and run.data.tags[Tag.LATENCY_NOTE].startswith(f"not measured at batch {batch}: ")
    m = run.data.metrics
    assert Summary.INFER_LATENCY_MS_P50 in m  # batch 1, the trading case, is always measured
    assert not [k for k in m if k.endswith(f"_b{batch}")]


@pytest.mark.slow
def test_a_sigterm_while_the_store_is_created_leaves_it_whole_and_the_run_interrupted(tmp_path, monkeypatch,
                                                                                       sigterm_restored):
    """A signal while a new store is created (its migration) is noted, not raised inside SQLAlchemy: the
    store is finished, the run opens and ends as interrupted, and the store stays readable."""
    from trainbench.tracking import connection

    connect = connection.connect

    def connect_with_sigterm(*a, **k):
        os.kill(os.getpid(), signal.SIGTERM)  # as the store's tables are being made
        return connect(*a, **k)

    monkeypatch.setattr(train, "connect", connect_with_sigterm)
    with pytest.raises(JobFailed, match="ended as interrupted"):
        _job(tmp_path, monkeypatch, lambda: None, "sweep_id=phases-store")
    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    (run,) = client.search_runs([client.get_experiment_by_name("trainbench").experiment_id])
    assert run.info.status == "KILLED" and run.data.tags[Tag.OUTCOME] == Outcome.INTERRUPTED


@pytest.mark.parametrize(("overrides", "after"), [
    (["trainer.latency.enabled=true", "trainer.noise_scale.enabled=true", "trainer.profile_workload=true"],
     "then latency, the gradient noise scale (at most 10% of the epochs' time) and the workload profile."),
    (["trainer.latency.enabled=false", "trainer.noise_scale.enabled=true", "trainer.profile_workload=false"],
     "then the gradient noise scale (at most 10% of the epochs' time)."),
    (["trainer.latency.enabled=true", "trainer.noise_scale.enabled=false", "trainer.profile_workload=false"],
     "then latency."),
    (["trainer.latency.enabled=false", "trainer.noise_scale.enabled=false", "trainer.profile_workload=false"],
     "nothing after them."),
    (["trainer.noise_scale.enabled=true", "trainer.distributed.nproc=2", "model.batch_size=64"],
     "nothing after them (one process's phases are not measured across ranks)."),
])
def test_the_plan_line_names_every_phase_after_the_epochs(overrides, after):
    from trainbench.config.run import validate

    obj = validate(compose_run(["model=tft", "size=tiny", "trainer=quick", *overrides]))
    assert train.run_plan_line("tft", obj, "cpu").endswith(after)
