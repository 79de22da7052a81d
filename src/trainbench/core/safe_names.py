"""Names that become folder names, MLflow filter strings and tags: sweep ids and experiment names.

They enter through the command line (``sweep_id=``, ``tracking.experiment=``, analyze.py's ``sweep=`` and
``compare=``) and end up in ``reports/<sweep_id>/``, in ``tags.sweep_id = '<id>'`` search filters and in
the MLflow UI. A safe character set keeps every such use correct: letters, digits, ``.``, ``_`` and ``-``,
starting with a letter or digit (so never ``..`` or a hidden folder), at most :data:`MAX_LEN` characters.
Experiment names may also hold spaces (the MLflow UI shows them), but no quote, slash or control character.
"""

from __future__ import annotations

import re
from pathlib import Path

from trainbench.core.errors import UnsafeName

MAX_LEN = 100
_SWEEP_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_EXPERIMENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._ -]*")


def check_sweep_id(value: str, key: str = "sweep_id") -> str:  # config key
    """``value`` if it is a safe sweep id, else :class:`UnsafeName` naming ``key`` and the rule."""
    if not (len(value) <= MAX_LEN and _SWEEP_ID.fullmatch(value)):
        raise UnsafeName(f"{key}={value!r} is not a valid sweep id: use letters, digits, '.', '_' and '-', "
                         f"starting with a letter or digit, at most {MAX_LEN} characters (e.g. {key}=baseline-1).")
    return value


def check_experiment(value: str, key: str = "tracking.experiment") -> str:
    if not (len(value) <= MAX_LEN and _EXPERIMENT.fullmatch(value)):
        raise UnsafeName(f"{key}={value!r} is not a valid experiment name: use letters, digits, spaces, '.', '_' "
                         f"and '-', starting with a letter or digit, at most {MAX_LEN} characters.")
    from trainbench.core.secrets import secret_name_in

    leaked = secret_name_in(value)
    if leaked:
        raise UnsafeName(f"{key} contains the value of the secret environment variable {leaked}: an experiment "
                         "name is stored and shown in clear, so choose a name without it.")
    return value


def safe_id(text: str) -> str:
    """A derived id (from a folder name) mapped onto the safe set: other characters become ``_``."""
    out = re.sub(r"[^A-Za-z0-9._-]", "_", text)[:MAX_LEN]
    return out if out[:1].isalnum() else f"s{out}"[:MAX_LEN]


def sweep_id(explicit: str | None, output_dir: str | Path, multirun: bool) -> str:
    """The sweep id of a job and of its sweep: ``explicit`` (the ``sweep_id`` key) when given; else derived
    from Hydra's output folder (``hydra.sweep.dir`` of a sweep, ``hydra.run.dir`` of a single run) as
    ``<folder name>-<6 hex digits of its absolute path>``, a single run's folder named by its last two
    parts (``<date>_<time>``). Every job of a sweep, the sweep's parent run and its summary derive the same
    id from the same folder. A secret value in it (a folder named after a token,
    :func:`trainbench.core.secrets.redact`) is left out here, once, so that the id every side records, searches
    for and prints is the same and holds no secret."""
    from trainbench.core.secrets import redact

    if explicit:
        given = str(explicit)
        return given if redact(given) == given else safe_id(redact(given))
    import hashlib

    base = Path(output_dir)
    digest = hashlib.sha1(str(base.resolve()).encode()).hexdigest()[:6]
    slug = safe_id(redact(base.name if multirun else "_".join(base.parts[-2:])))  # a folder name may hold anything
    return f"{slug}-{digest}"


def inside(folder: str | Path, name: str) -> Path:
    """``folder/name``, refusing any ``name`` that would resolve outside ``folder``."""
    base = Path(folder).resolve()
    target = (base / name).resolve()
    if target == base or base not in target.parents:
        raise UnsafeName(f"{name!r} would write outside {base}: use a plain name.")
    return target
