"""The conformance check: does a model measure honestly? Run it on your own model before benchmarking it.

    python -m trainbench.check my_pkg.my_model:SPEC                  # a module path
    python -m trainbench.check lstm_forecaster                       # or a registered model's name
    python -m trainbench.check my_pkg.my_model:SPEC --set hidden=16 --set batch_size=32 --bars 2000

In a test: ``trainbench.conformance.assert_conforms(SPEC)`` (or ``run_checks`` for the results).

It builds the model on small synthetic data (the ``small`` size of ``SPEC.sizes`` plus ``--set``) and
checks what honest timing needs, printing each check, and a fix for each one that fails:

- ``spec``: SPEC is a valid :class:`~trainbench.models.base.ModelSpec`;
- ``build``: ``build(cfg, data, ctx)`` returns a :class:`~trainbench.models.base.Trainable`;
- ``outputs``: ``train_epoch()`` returns finite 0-d tensors on the run's device, detached, with ``loss``
  and ``grad_norm``;
- ``no host sync``: an epoch reads no tensor on the host (``.item()``, ``.cpu()``, ``float(t)``, ``if t:``,
  ...) from the model's own code (:func:`trainbench.measure.host_sync.forbid_host_syncs`; on a CUDA device
  every synchronising op is caught as well; on a CPU such reads from any module and data-dependent ops such
  as ``nonzero`` and mask indexing, :func:`trainbench.measure.host_sync.watch_host_syncs`);
- ``fixed work``: two epochs run the same optimiser steps, tensor ops, elements written, matmul FLOPs
  (``torch.utils.flop_counter``) and ``samples_per_epoch``;
- ``determinism``: the same seed gives the same epochs, another seed other ones;
- ``memory``: ``memory_step(batch_size)`` and ``batch_limit`` for memory fitting (steps at several sizes
  without a host read, and one traced with fake tensors by the memory predictor);
- ``inference``: ``inference(batch_size)`` runs a forward pass that changes no parameter and keeps no graph;
- ``eval_epoch`` (when the model has one): 0-d tensors, no host sync.

Exit status: 0 when every check passes, 1 when one fails, 2 for bad input (a spec that cannot be loaded,
an unknown ``--set`` key).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from trainbench.core.errors import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, ConformanceError, UnknownModelError
from trainbench.core.trainable import Evaluates, StepsForMemory, Trainable, lacks
from trainbench.core.vocab import ParamKey, Series
from trainbench.models.base import BuildContext, ModelSpec
from trainbench.models.runtime import seed_everything

_FIX_SYNC = ("keep every value on the device inside train_epoch: no .item(), .cpu(), .tolist(), float(t), "
             "int(t), `if t:`; accumulate with trainbench.api.EpochMeter and return the tensors (the harness "
             "reads them once, after the timer stops)")


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""


# --------------------------------------------------------------------------------------------------
# inputs: config and data
# --------------------------------------------------------------------------------------------------


def make_config(spec: ModelSpec, size: str = "small", overrides: dict[str, Any] | list[str] | None = None) -> Any:
    """The model's config: its defaults, ``SPEC.sizes[size]``, then ``overrides`` (a dict or ``key=value``s)."""
    from omegaconf import OmegaConf

    node = OmegaConf.structured(spec.config_cls)
    node.name, node.size = spec.name, size
    node = OmegaConf.merge(node, dict(spec.sizes.get(size, {})))
    if isinstance(overrides, dict):
        node = OmegaConf.merge(node, overrides)
    elif overrides:
        node = OmegaConf.merge(node, OmegaConf.from_dotlist(list(overrides)))
    return OmegaConf.to_object(node)


def sample_data(kind: str, n: int | None = None, device: str | torch.device = "cpu", seed: int = 0) -> Any:
    """Synthetic data of ``kind`` (``bars``: random-walk minute bars; ``book``: a simulated MBP-10 book)."""
    if kind == "book":
        from trainbench.data.in_memory import book_market_data
        from trainbench.data.synth import book_from_events, generate_book

        return book_market_data(book_from_events(generate_book(n or 2000, seed=seed), 0.00005, "6EH4"),
                                name="check-book")
    from trainbench.data.in_memory import make_market_data

    return make_market_data(n or 3000, seed=seed, device=str(device))


def code_dirs(*objs: Any) -> tuple[str, ...]:
    """Where the model's code is (its host reads count): for each object (the spec's build and config class,
    the trainable's class), its top-level package's folder, or its module's file."""
    import inspect

    out = []
    for obj in objs:
        mod = sys.modules.get(getattr(obj, "__module__", "") or "")
        top = sys.modules.get((getattr(mod, "__package__", "") or "").split(".")[0]) if mod else None
        for m in (top, mod):
            path = getattr(m, "__file__", None)
            if path:
                p = Path(path).resolve()
                out.append(str(p.parent) if p.name == "__init__.py" else str(p))
                break
        else:
            with contextlib.suppress(TypeError, OSError):
                out.append(str(Path(inspect.getfile(obj)).resolve()))
    return tuple(dict.fromkeys(out))


# --------------------------------------------------------------------------------------------------
# the checks
# --------------------------------------------------------------------------------------------------


def _output_problems(out: Any, device: torch.device, keys: tuple[str, ...] = ("loss", Series.GRAD_NORM)) -> list[str]:
    if not isinstance(out, dict):
        return [f"it returned a {type(out).__name__}, not a dict of tensors"]
    problems = [f"no {k!r}" for k in keys if k not in out]
    for k, v in out.items():
        if not isinstance(v, torch.Tensor):
            problems.append(f"{k} is a {type(v).__name__}, not a tensor")
            continue
        if v.ndim != 0:
            problems.append(f"{k} has shape {tuple(v.shape)}, not 0-d")
        if v.device.type != device.type:
            problems.append(f"{k} is on {v.device}, not on the run's device {device}")
        if not v.is_floating_point():
            problems.append(f"{k} is {v.dtype}, not a float")
        if v.requires_grad:
            problems.append(f"{k} still holds its autograd graph (return it .detach()ed)")
    if not problems:
        bad = [k for k, v in out.items() if not math.isfinite(float(v.detach().float().cpu()))]
        problems += [f"{k} is not finite (the run would end as diverged)" for k in bad]
    return problems


@contextlib.contextmanager
def _count_steps() -> Iterator[list[int]]:
    steps = [0]

    def hook(*_: Any) -> None:
        steps[0] += 1

    from torch.optim.optimizer import register_optimizer_step_post_hook

    handle = register_optimizer_step_post_hook(hook)
    try:
        yield steps
    finally:
        handle.remove()


def _epoch_work(tr: Any) -> tuple[int, int, int, int, int]:
    """(optimiser steps, tensor ops, elements the ops wrote, matmul FLOPs, samples_per_epoch) of one epoch."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from trainbench.measure.flops import count_flops

    class Ops(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.ops = self.elements = 0

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            out = func(*args, **(kwargs or {}))
            self.ops += 1
            self.elements += sum(t.numel() for t in torch.utils._pytree.tree_leaves(out)
                                 if isinstance(t, torch.Tensor))
            return out

    with _count_steps() as steps, Ops() as ops:
        flops = count_flops(tr.train_epoch).total
    return steps[0], ops.ops, ops.elements, flops, int(tr.samples_per_epoch)


def _epochs(spec: ModelSpec, cfg: Any, data: Any, device: torch.device, seed: int, n: int = 2) -> list[dict]:
    previous = (torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.benchmark,
                torch.backends.cudnn.deterministic, os.environ.get("CUBLAS_WORKSPACE_CONFIG"))
    seed_everything(seed, True)  # what a run with trainer.deterministic=true does
    try:
        tr = spec.build(cfg, data, BuildContext(device=device, seed=seed, deterministic=True))
        return [{k: v.detach().float().cpu() for k, v in tr.train_epoch().items()} for _ in range(n)]
    finally:  # global state: never leak into what runs next
        torch.use_deterministic_algorithms(previous[0])
        torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic = previous[1], previous[2]
        if previous[3] is None:
            os.environ.pop("CUBLAS_WORKSPACE_CONFIG", None)
        else:
            os.environ["CUBLAS_WORKSPACE_CONFIG"] = previous[3]


@contextlib.contextmanager
def _host_reads(dirs: tuple[str, ...]) -> Iterator[list[str]]:
    """Every host read inside the block, one entry per place in the code (``file:line what``, in order): the
    model's own tensor reads (:func:`~trainbench.measure.host_sync.forbid_host_syncs`, with the CUDA sync
    debug mode on a GPU) and any module's reads and data-dependent ops
    (:func:`~trainbench.measure.host_sync.watch_host_syncs`)."""
    from trainbench.measure.host_sync import forbid_host_syncs, watch_host_syncs

    merged: list[str] = []
    with forbid_host_syncs(raise_on_sync=False, code_dirs=dirs) as own, watch_host_syncs() as anywhere:
        yield merged
    places: dict[str, list[str]] = {}
    for entry in [*own, *anywhere]:
        where, _, what = entry.partition(" ")
        if what not in places.setdefault(where, []):
            places[where].append(what)
    merged.extend(f"{where} {' / '.join(whats)}" for where, whats in places.items())


def _same(a: list[dict], b: list[dict]) -> bool:
    return len(a) == len(b) and all(x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)
                                    for x, y in zip(a, b, strict=True))


def run_checks(spec: ModelSpec | str, cfg: Any = None, data: Any = None, device: str | torch.device = "cpu",
               seed: int = 0, size: str = "small", overrides: dict[str, Any] | list[str] | None = None,
               bars: int | None = None) -> list[Check]:
    """Every check on ``spec`` (a ModelSpec or a ``package.module:SPEC`` path); see the module doc."""
    from trainbench.models.registry import check_spec

    if isinstance(spec, str):
        from trainbench.core import entrypoints as plugins

        spec = plugins.load_object(spec)
    why = check_spec(spec)
    if why:
        return [Check("spec", False, why, "export SPEC = ModelSpec(...) as docs/own-models.md shows")]
    assert isinstance(spec, ModelSpec)
    device = torch.device(device)
    checks = _Checks(spec, cfg if cfg is not None else make_config(spec, size, overrides),
                     data if data is not None else sample_data(spec.data_kind, bars, device, seed), device, seed)
    checks.results.append(Check("spec", True, f"{spec.name}: config {spec.config_cls.__name__}, data {spec.data_kind}"))
    if not checks.attempt("build", _FIX_BUILD, checks.c_build):
        return checks.results
    for name, fix, check in checks.after_build():
        checks.attempt(name, fix, check)
    return checks.results


_FIX_BUILD = ("build(cfg, data, ctx) returns a Trainable: subclass trainbench.api.TrainableBase and set module, "
              "samples_per_epoch and batch_size; implement train_epoch and inference")


class _Checks:
    """The checks of one model, in order (:func:`run_checks`); each ``c_<name>`` returns (passed, detail) and
    :meth:`attempt` records it, a model's exception being a failed check."""

    def __init__(self, spec: ModelSpec, cfg: Any, data: Any, device: torch.device, seed: int) -> None:
        self.spec, self.cfg, self.data, self.device, self.seed = spec, cfg, data, device, seed
        self.dirs: tuple[str, ...] = code_dirs(spec.build, spec.config_cls)
        self.results: list[Check] = []
        self.tr: Any = None

    def build(self) -> Any:
        seed_everything(self.seed, False)
        return self.spec.build(self.cfg, self.data, BuildContext(device=self.device, seed=self.seed))

    def attempt(self, name: str, fix: str, fn: Callable[[], tuple[bool, str]]) -> bool:
        try:
            ok, detail = fn()
        except Exception as e:  # noqa: BLE001 - a model's exception is a failed check, reported with the fix
            ok, detail = False, f"raised {type(e).__name__}: {e}"
        self.results.append(Check(name, ok, detail, "" if ok else fix))
        return ok

    def after_build(self) -> list[tuple[str, str, Callable[[], tuple[bool, str]]]]:
        """The checks of a built model: (name, fix, check), in order; ``eval_epoch`` where the model has one."""
        out = [
            ("outputs", "return {'loss': ..., 'grad_norm': ..., ...} of 0-d device tensors, e.g. EpochMeter.means() "
             "over the steps' detached values; grad_norm is what clip_and_step returns", self.c_outputs),
            ("no host sync", _FIX_SYNC, self.c_sync),
            ("fixed work", "make every epoch the same work: a fixed number of steps of a fixed batch size (drop "
             "the last partial batch; no early exit, no data-dependent lengths); do warm-up work in build", self.c_work),
            ("determinism", "draw every random number from torch's seeded generators: ctx.generator() for sampling "
             "inside epochs, torch.manual_seed(ctx.seed) before creating the module; no numpy/python randomness "
             "seeded elsewhere", self.c_determinism),
            ("memory", "give memory_step(batch_size) -> a zero-argument callable running one optimiser step of "
             "train_epoch's update on batch_size samples (no .item(); any size up to batch_limit), and set "
             "batch_limit (the largest batch the data allows; None when unlimited); see TrainableBase", self.c_memory),
            ("inference", "return a zero-argument callable that runs one forward pass in eval mode under "
             "torch.no_grad() on a batch prepared beforehand", self.c_inference),
        ]
        if isinstance(self.tr, Evaluates):
            out.append(("eval_epoch", "return {'val_loss': ...} of 0-d device tensors (trainbench.api.evaluate does), "
                        "with no host read", self.c_eval))
        return out

    def c_build(self) -> tuple[bool, str]:
        tr = self.tr = self.build()
        self.dirs = tuple(dict.fromkeys(self.dirs + code_dirs(type(tr))))
        if not isinstance(tr, Trainable):
            return False, f"{type(tr).__name__} lacks {', '.join(lacks(tr, Trainable))}"
        if not isinstance(tr.module, torch.nn.Module):
            return False, f"module is a {type(tr.module).__name__}, not a torch.nn.Module"
        bad = [a for a in (ParamKey.SAMPLES_PER_EPOCH, "batch_size")
               if isinstance(getattr(tr, a), bool) or not isinstance(getattr(tr, a), int) or getattr(tr, a) < 1]
        if bad:
            return False, f"{', '.join(bad)} must be positive ints"
        n = sum(p.numel() for p in tr.module.parameters())
        return True, f"{type(tr).__name__}: {n:,} parameters, batch {tr.batch_size}, {tr.samples_per_epoch} samples/epoch"

    def c_outputs(self) -> tuple[bool, str]:
        problems = _output_problems(self.tr.train_epoch(), self.device)
        return not problems, "; ".join(problems) or "loss, grad_norm and the rest: finite 0-d device tensors"

    def c_sync(self) -> tuple[bool, str]:
        with _host_reads(self.dirs) as found:
            self.tr.train_epoch()
        where = "every synchronising op (CUDA sync debug mode)" if self.device.type == "cuda" else \
            ("host reads (.item(), float(t), f-strings, .tolist(), .numpy(), np.asarray, .cpu(), .to(\"cpu\")) and "
             "data-dependent ops (nonzero, mask indexing, unique) from any module; on a GPU, --device cuda also "
             "catches the rest (docs/own-models.md)")
        return not found, (f"{len(found)} host reads: {', '.join(found[:5])}" if found
                           else f"none seen in an epoch; checked: {where}")

    def c_work(self) -> tuple[bool, str]:
        a, b = _epoch_work(self.tr), _epoch_work(self.tr)
        if a[0] == 0:
            return False, "an epoch made no optimiser step"
        what = ("optimiser steps", "tensor ops", "elements written", "matmul FLOPs", "samples")
        if a != b:
            return False, "epochs differ: " + ", ".join(f"{x:,} vs {y:,} {w}" for x, y, w in zip(a, b, what, strict=True)
                                                          if x != y)
        return True, "each epoch: " + ", ".join(f"{x:,} {w}" for x, w in zip(a, what, strict=True))

    def c_determinism(self) -> tuple[bool, str]:
        spec, cfg, data, device, seed = self.spec, self.cfg, self.data, self.device, self.seed
        a = _epochs(spec, cfg, data, device, seed)
        if not _same(a, _epochs(spec, cfg, data, device, seed)):
            return False, f"two builds with seed {seed} gave different epochs"
        other = _epochs(spec, cfg, data, device, seed + 1, n=1)
        if torch.equal(a[0]["loss"], other[0]["loss"]):
            return False, f"seed {seed + 1} gave the same first loss as seed {seed}: the seed does not reach the model"
        return True, f"seed {seed} twice: identical epochs; seed {seed + 1}: different"

    def c_memory(self) -> tuple[bool, str]:
        from trainbench.measure.host_sync import forbid_host_syncs
        from trainbench.measure.predict import Predictor

        m = self.build()
        if not isinstance(m, StepsForMemory):
            return False, f"no {' and no '.join(lacks(m, StepsForMemory))} (trainbench.core.trainable.StepsForMemory)"
        limit = m.batch_limit
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < m.batch_size):
            return False, f"batch_limit={limit!r} must be None or an int >= batch_size ({m.batch_size})"
        top = limit if limit is not None and limit <= 4 * m.batch_size else 2 * m.batch_size
        sizes = sorted({max(1, m.batch_size // 2), m.batch_size, top})
        for b in sizes:
            step = m.memory_step(b)
            with forbid_host_syncs(raise_on_sync=False, code_dirs=self.dirs) as found:
                step()
            if found:
                return False, f"memory_step({b}) read tensors on the host: {', '.join(sorted(set(found))[:3])}"
        peak = Predictor(m, (self.data,), target="cpu").predict(m.batch_size).peak_bytes
        return True, (f"memory_step at {sizes} (batch_limit {limit}); traced with fake tensors: predicted peak "
                      f"{peak / 2**20:.1f} MB at batch {m.batch_size}")

    def c_inference(self) -> tuple[bool, str]:
        tr = self.tr
        before = [p.detach().clone() for p in tr.module.parameters()]
        for b in sorted({1, tr.batch_size}):
            fn = tr.inference(b)
            if not callable(fn):
                return False, f"inference({b}) returned a {type(fn).__name__}, not a callable"
            out = fn()
            if isinstance(out, torch.Tensor) and out.requires_grad:
                return False, f"inference({b})() built an autograd graph"
        after = list(tr.module.parameters())
        if any(not torch.equal(x, y.detach()) for x, y in zip(before, after, strict=True)):
            return False, "a forward pass changed the parameters"
        return True, "forward passes at batch 1 and the training batch; no gradients, parameters unchanged"

    def c_eval(self) -> tuple[bool, str]:
        with _host_reads(self.dirs) as found:
            out = self.tr.eval_epoch()
        problems = _output_problems(out, self.device, keys=()) + [f"host read {f}" for f in found[:3]]
        return not problems, "; ".join(problems) or f"{', '.join(out) or 'no keys'}: 0-d tensors, no host sync"


def report(results: list[Check], out: Any = None) -> str:
    lines = []
    width = max(len(r.name) for r in results)
    for r in results:
        lines.append(f"  {'PASS' if r.ok else 'FAIL'}  {r.name:{width}s}  {r.detail}")
        if not r.ok:
            lines.append(f"        {'':{width}s}  fix: {r.fix}")
    passed = sum(r.ok for r in results)
    lines.append(f"{passed} of {len(results)} checks passed" + ("" if passed == len(results) else
                                                                 ": fix the failed ones before benchmarking"))
    return "\n".join(lines)


def assert_conforms(spec: ModelSpec | str, **kwargs: Any) -> list[Check]:
    """Run every check (arguments of :func:`run_checks`); raise :class:`ConformanceError` listing the failed
    ones with their fixes. For a model's own tests: ``assert_conforms(SPEC, overrides={"hidden": 8})``."""
    results = run_checks(spec, **kwargs)
    if not all(r.ok for r in results):
        raise ConformanceError("the model does not conform:\n" + report(results))
    return results


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m trainbench.check",
                                 description="Check that a model measures honestly (docs/own-models.md).")
    ap.add_argument("spec", help="package.module:SPEC, or the name of a registered model")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a model config value (repeatable), after the size's values")
    ap.add_argument("--size", default="small", help="the size of SPEC.sizes to build (default small)")
    ap.add_argument("--bars", type=int, default=None, help="synthetic bars (book events) to build on")
    ap.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    try:
        if ":" in args.spec:
            from trainbench.core import entrypoints as plugins

            spec = plugins.load_object(args.spec)
        else:
            from trainbench.models.registry import REGISTRY

            spec = REGISTRY.get(args.spec)
        cfg = make_config(spec, args.size, args.set) if isinstance(spec, ModelSpec) else None
    except UnknownModelError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except Exception as e:  # noqa: BLE001 - an OmegaConf error for a bad --set key or value
        print(f"error: --set {' '.join(args.set)}: {type(e).__name__}: {e}".replace("\n", " "), file=sys.stderr)
        return EXIT_BAD_INPUT
    name = getattr(spec, "name", args.spec)
    print(f"trainbench check: {name} ({args.spec}) on {args.device}, size {args.size}"
          + (f" with {' '.join(args.set)}" if args.set else ""))
    results = run_checks(spec, cfg=cfg, device=args.device, seed=args.seed, size=args.size, bars=args.bars)
    print(report(results))
    return EXIT_OK if all(r.ok for r in results) else EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
