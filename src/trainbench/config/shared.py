"""The configuration's shared sections and field rules: read by run.py's schemas (:mod:`.run`) and analyze.py's
(:mod:`.analyze`) alike.

- :func:`param`: a dataclass field with a doc and an optional numeric range (the key reference prints the doc,
  :func:`check_ranges` enforces the range);
- the sections both commands compose: ``paths`` (:class:`PathsConfig`), ``hardware`` (:class:`HardwareConfig`,
  the ``conf/hardware/*.yaml`` entries, read outside a composed config by :func:`load_hardware_profiles`) and
  ``tracking`` (:class:`TrackingConfig`, where the MLflow store is);
- the checks both apply: ranges, peak TFLOP/s, safe sweep ids and experiment names.

The ground floor's errors and names only: no torch, no MLflow.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import MISSING, OmegaConf

from trainbench.core.errors import ConfigError, UnsafeName
from trainbench.core.safe_names import check_experiment, check_sweep_id
from trainbench.core.secrets import URI_SCHEME, uri_secret


def param(default: Any = MISSING, doc: str = "", *, ge: float | None = None, gt: float | None = None,
          le: float | None = None, lt: float | None = None, factory: Any = None) -> Any:
    """A dataclass field with a doc string and an optional numeric range, checked by :func:`validate`."""
    meta = {"doc": doc, "ge": ge, "gt": gt, "le": le, "lt": lt}
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


@dataclass
class PathsConfig:
    root: str = param("${hydra:runtime.cwd}", "Project root: relative paths resolve against it.")
    data_dir: str = param("${paths.root}/data", "Where generated and downloaded DBN files are kept.")
    mlruns: str = param("${paths.root}/mlruns", "The embedded MLflow store (sqlite db and artifacts).")
    reports: str = param("${paths.root}/reports", "Where analyze.py writes reports/<sweep_id>/.")


@dataclass
class HardwareConfig:
    name: str = param("auto", "Profile label; `auto` describes whatever device the run finds.")
    gpu: str | None = param(None, "Expected GPU name (informational; the run records the real one).")
    vram_mb: int | None = param(None, "Memory of the card this profile describes, in MB.", ge=1)
    vram_budget_mb: int | None = param(
        None, "Cap this process's GPU memory to this many MB (torch.cuda.set_per_process_memory_fraction), so a "
        "large GPU stands in for a small one; the `auto` batch search fits within it. None: vram_mb, else the "
        "device's total.", ge=1)
    power_w: float | None = param(
        None, "Board power in W for the local electricity cost. None: the mean board power NVML measured during "
        "the runs, else the runs' hardware.power_w param, else the local cost is left unpriced (with a warning). "
        "At most 100 kW (a rack of GPUs).", ge=0, le=100_000)
    price_per_kwh: float = param(0.15, "Electricity price in USD per kWh (at most 100).", ge=0, le=100)
    peak_tflops: dict[str, float] = param(
        doc="Dense peak TFLOP/s per dtype: fp32 (CUDA cores), tf32, bf16, fp16 (tensor cores, fp32 accumulate); "
            "a dtype the card lacks is left out. MFU and projections use the peak of the run's precision.",
        factory=dict)
    memory_gbps: float | None = param(None, "Memory bandwidth in GB/s (datasheet).", gt=0)
    compute_capability: str | None = param(None, "CUDA compute capability, e.g. `8.6`.")
    source: str | None = param(None, "Where the figures come from (datasheet name).")
    uncertain: str | None = param(None, "What is uncertain about the figures, if anything.")


@dataclass
class TrackingConfig:
    kind: str = param("local", "local (sqlite under mlruns/) or server (a running mlflow server).")
    uri: str | None = param(None, "Tracking URI; overrides the default of `kind`.")
    experiment: str = param("trainbench", "MLflow experiment name.")
    artifact_location: str | None = param(None, "Artifact root for a new experiment (local: mlruns/artifacts).")
    timeout_s: float = param(10.0, "How long to wait for a tracking server, or for another process's lock on "
                             "the embedded SQLite store, before failing.", gt=0)
    spool_dir: str = param("${paths.mlruns}/spool", "Where a run spools its writes while the tracking store "
                           "is unreachable (one folder per run; upload leftovers with `trainbench sync`).")
    spool_wait_s: float = param(60.0, "At the end of a run with spooled writes, wait this long for the "
                                "store to come back before leaving the spool on disk.", ge=0)
    resend_every_s: float = param(5.0, "While spooling, try the store again at a flush at most this often.",
                                  gt=0)
    min_free_mb: float = param(100.0, "Refuse to start a run when the disk of the SQLite store or of spool_dir "
                               "has less free space than this (MB); 0 turns the check off.", ge=0)


def check_ranges(obj: Any, prefix: str) -> None:
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        key = f"{prefix}{f.name}"
        if dataclasses.is_dataclass(value):
            check_ranges(value, key + ".")
            continue
        if isinstance(value, list):
            for i, item in enumerate(value):
                if dataclasses.is_dataclass(item):
                    check_ranges(item, f"{key}[{i}].")
            continue
        if value is None or isinstance(value, bool) or not isinstance(value, int | float):
            continue
        problem = range_problem(key, value, f.metadata)
        if problem:
            raise ConfigError(problem)


def range_problem(key: str, value: float, meta: Any) -> str | None:
    """Why a number is not a valid value of a field with ``meta`` (its :func:`param` metadata), or None: out
    of its range, or not finite (``inf``, ``nan``: no setting of trainbench is infinite)."""
    if isinstance(value, float) and not math.isfinite(value):
        return (f"{key}={value} is invalid: it must be a finite number. ({meta.get('doc', '')}) "
                f"Set e.g. {key}=<a finite number>.")
    for bound, ok, word in (("ge", lambda v, b: v >= b, ">="), ("gt", lambda v, b: v > b, ">"),
                            ("le", lambda v, b: v <= b, "<="), ("lt", lambda v, b: v < b, "<")):
        b = meta.get(bound)
        if b is not None and not ok(value, b):
            return (f"{key}={value} is out of range: it must be {word} {b}. "
                    f"({meta.get('doc', '')}) Set e.g. {key}=<value {word} {b}>.")
    return None


PEAK_DTYPES = ("fp32", "tf32", "bf16", "fp16")
#: The most epochs a training plan may name (model.target_epochs, decision.target_epochs, decision.estimates,
#: decision.model_plans): a million epochs is beyond any plan; more is a typo that would project millions of hours.
MAX_TARGET_EPOCHS = 1_000_000


def check_peaks(hw: Any) -> None:
    """``hardware.peak_tflops`` maps known dtypes to positive numbers."""
    peaks = getattr(hw, "peak_tflops", None) or {}
    if not isinstance(peaks, dict):
        raise ConfigError(f"hardware.peak_tflops={peaks!r} is invalid: it is a map of dtype to dense TFLOP/s, "
                          "e.g. hardware.peak_tflops={fp32:19.5,bf16:312}.")
    for k, v in peaks.items():
        if k not in PEAK_DTYPES or isinstance(v, bool) or not isinstance(v, int | float) or v <= 0:
            raise ConfigError(f"hardware.peak_tflops.{k}={v!r} is invalid: keys are {', '.join(PEAK_DTYPES)}, "
                              "values positive TFLOP/s (leave out a dtype the card lacks).")


def check_names(tracking: Any, sweep_ids: dict[str, Any]) -> None:
    """Sweep ids and the experiment name in a safe character set (trainbench.core.safe_names)."""
    try:
        if tracking is not None:
            check_experiment(str(tracking.experiment))
        for key, value in sweep_ids.items():
            if value is not None:
                check_sweep_id(str(value), key)
    except UnsafeName as e:
        raise ConfigError(str(e)) from None


def _credentials_fix(scheme: str, key: str, shown: str) -> str:
    """Where the credentials of a ``scheme`` URI go instead, as the sentence that ends the refusal."""
    dialect = scheme.split("+", 1)[0]
    at = shown.split("://", 1)[1]
    if dialect in ("http", "https"):
        return (f"MLflow does not read them there. Set MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD (or "
                f"MLFLOW_TRACKING_TOKEN) in the environment and give {key}={shown}.")
    if dialect in ("postgresql", "postgres"):
        return ("put the password in ~/.pgpass (host:port:database:user:password, mode 600) or in PGPASSWORD "
                f"(libpq reads either) and give {key}={scheme}://<user>@{at}.")
    if dialect in ("mysql", "mariadb"):
        return ("put the password in a MySQL option file ([client] password=..., mode 600) and name it: "
                f"{key}={scheme}://<user>@{at}?read_default_file=<absolute path of the file>.")
    if dialect == "mssql":
        return ("use integrated (Kerberos) authentication, which the driver takes when the URI names no user: "
                f"{key}={scheme}://@{at}.")
    return ("keep the password in the credential store or environment variable of that service or driver and "
            f"give {key}={shown} without it.")


def uri_credentials_problem(uri: str | None, key: str = "tracking.uri") -> str | None:
    """Why ``uri`` may not be given because it carries credentials, or None.

    Every URI in the value is checked, whatever its scheme (a sweep lists several): a password
    (``postgresql+psycopg2://user:password@host/db``, ``mysql://``, ``mssql+pyodbc://``, ``http://``) or a
    query parameter that carries a secret (``?password=``, ``?sslpassword=``, ``?token=``, ``?sig=``: the rule
    is :func:`trainbench.core.secrets.uri_secret`) is refused, because a value on the command line is written by Hydra to
    ``.hydra/*.yaml`` and ``config.pickle`` and a run logs its config (MLflow param, config artifacts). For
    http(s) a user name alone is refused too: MLflow's HTTP client (urllib) does not take user-info from the
    URI (the request fails with a misleading name error). A database user without a password
    (``postgresql+psycopg2://mlflow@db:5432/mlflow``) is the documented form and passes. The message names
    the fix for the scheme (``MLFLOW_TRACKING_USERNAME``, ``PGPASSWORD`` / ``~/.pgpass``, a MySQL option file,
    integrated authentication) and never repeats the user or password.
    """
    text = str(uri or "")
    starts = list(URI_SCHEME.finditer(text))
    for i, m in enumerate(starts):
        scheme = m.group(1).lower()
        rest = text[m.end():starts[i + 1].start() if i + 1 < len(starts) else len(text)]
        authority = re.split(r"[/?#]", rest, maxsplit=1)[0]
        web = scheme in ("http", "https")
        what = uri_secret(rest)
        if what is None and web and "@" in authority:
            what = "a user name"
        if what is None:
            continue
        host = re.split(r"[?#;\s]", rest.rsplit("@", 1)[-1] if "@" in rest else rest, maxsplit=1)[0]
        shown = m.group(1) + "://" + host.rstrip(",]) '\"")
        return (f"{key} carries {what} ({shown} with credentials): credentials are never put in a URI (the "
                f"command line is written to .hydra/*.yaml and a run logs its config); "
                + _credentials_fix(scheme, key, shown))
    return None


def hydra_plain(node: Any) -> dict[str, Any]:
    """Hydra's runtime config (the ``hydra`` node) as plain containers, resolved as it is now where it
    resolves. Plain: the typed node holds the launcher's and sweeper's config classes, which a launcher that
    imports its plugins again in the job (submitit) makes unpicklable ("not the same object as ...")."""
    try:  # as resolved here (${now:...} would otherwise resolve again, later, elsewhere)
        return OmegaConf.to_container(node, resolve=True)  # type: ignore[return-value]
    except Exception:  # noqa: BLE001 - an interpolation only the job's own config resolves: as given
        return OmegaConf.to_container(node, resolve=False)  # type: ignore[return-value]


def hydra_typed(plain: dict[str, Any]) -> Any:
    """:func:`hydra_plain`'s containers as a ``hydra`` node of Hydra's own type (``HydraConf``), as
    ``HydraConfig.set_config`` and ``--experimental-rerun`` need it; keys a config adds under ``hydra`` stay."""
    from hydra.conf import HydraConf

    base = OmegaConf.structured(HydraConf)
    OmegaConf.set_struct(base, False)
    return OmegaConf.merge(base, plain)


def check_paths(paths: Any) -> None:
    """:class:`ConfigError` where a folder of ``paths`` (root, data_dir, mlruns, reports) is, or lies under, a
    file that is not a folder: it names that key and the file, instead of the first write failing there (which
    would name the tracking URI or the data file)."""
    for key in ("root", "data_dir", "mlruns", "reports"):
        value = getattr(paths, key, None)
        if not isinstance(value, str) or not value or "${" in value:
            continue
        path = Path(value)
        existing = next((p for p in (path, *path.parents) if p.exists()), None)
        if existing is not None and not existing.is_dir():
            where = "is" if existing == path else f"lies under {existing}, which is"
            raise ConfigError(f"paths.{key}={value} {where} a file, not a folder: give a folder "
                              f"(paths.{key}=<folder>; paths.root defaults to the working folder).")


def check_uri_credentials(uri: str | None, key: str = "tracking.uri") -> None:
    """:class:`ConfigError` when ``uri`` carries credentials (:func:`uri_credentials_problem`)."""
    problem = uri_credentials_problem(uri, key)
    if problem:
        raise ConfigError(problem)


#: What :func:`load_hardware_profiles` read, by the files' paths and bytes (an analysis asks several times).
_PROFILES: dict[tuple[tuple[str, bytes], ...], dict[str, HardwareConfig]] = {}


def load_hardware_profiles(conf_dir: str | Path | list[Path]) -> dict[str, HardwareConfig]:
    """Every ``conf/hardware/<name>.yaml`` read through :class:`HardwareConfig` ({name: profile}); of several
    folders (the team's first: :func:`trainbench.config.team.conf_dirs`), a name's first file.

    The way code outside a composed config (MFU peaks, the projection onto other GPUs) reads the hardware
    entries: a misspelled key, a wrong type, an out-of-range value or a bad ``peak_tflops`` fails here as
    :class:`ConfigError` naming the file and the key, exactly as ``hardware=<name>`` would at start-up.
    Validating the catalogue costs ~0.2 s and an analysis reads it several times: files of the same paths and
    bytes as a previous call are not read through the schema again (the caller gets its own copy).
    """
    folders = conf_dir if isinstance(conf_dir, list) else [Path(conf_dir)]
    paths = sorted((p for d in folders for p in Path(d).glob("*.yaml")), key=lambda p: p.name)
    key = tuple((str(p), p.read_bytes()) for p in paths)
    if key not in _PROFILES:
        if len(_PROFILES) >= 16:
            _PROFILES.clear()
        _PROFILES[key] = _read_hardware_profiles(paths)
    return copy.deepcopy(_PROFILES[key])


def _read_hardware_profiles(paths: list[Path]) -> dict[str, HardwareConfig]:
    from omegaconf.errors import OmegaConfBaseException

    out: dict[str, HardwareConfig] = {}
    for path in paths:
        if path.stem in out:
            continue  # the team's entry of that name, read first
        try:
            raw = OmegaConf.load(path)
            raw.pop("defaults", None)  # [base_hardware, _self_]: the schema merged here
            hw = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(HardwareConfig), raw))
            check_ranges(hw, "hardware.")
            check_peaks(hw)
        except (ConfigError, OmegaConfBaseException) as e:
            raise ConfigError(f"{path}: {e}".replace("\n", " ")) from None
        out[path.stem] = hw
    return out
