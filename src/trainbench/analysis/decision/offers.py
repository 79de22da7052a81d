"""The cloud offers the decision prices: SkyPilot's catalogue format, screened, reduced and mapped onto
``conf/hardware`` entries.

Where the offers come from is ``decision.offers``: ``packaged`` (the dated extract shipped in the package,
``conf/offers/``, written by ``trainbench offers refresh``), ``skypilot`` (the newest
``~/.sky/catalogs/<version>/`` on this machine) or a path (a folder of ``<cloud>/vms.csv`` files, or one
``vms.csv``, in SkyPilot's format: https://github.com/skypilot-org/skypilot-catalog, ``catalogs/v8``).

One row of a catalogue is one instance type in one region (or zone): ``InstanceType, AcceleratorName,
AcceleratorCount, GpuInfo, Price, SpotPrice, Region``, columns in a per-cloud order. A row is read only if it
names an accelerator (GPU rows); it is left out, and counted, when its price is missing, non-finite,
non-positive or a placeholder (:data:`PLACEHOLDER_PRICES`), when its spot price is above its on-demand one, when
its GPU count is not a whole number or disagrees with ``GpuInfo``, or when the accelerator is a TPU. GCP prices
a GPU and its host VM in separate rows: a GPU row is joined with the row of the machine type that GPU comes in
(:data:`GCP_HOSTS`) in the same zone, and counted as left out where that machine is not fixed by the GPU (T4,
V100, ...) or its row is missing. The rows left are reduced to one offer per (cloud, instance type): the cheapest
on-demand price and the cheapest spot price, each with its region.

An offer's GPU is the ``conf/hardware`` entry :func:`trainbench.core.gpu_names.catalogue_entries` finds from its
names and memory; where the catalogue cannot tell two entries apart (an "H100" with 80 GB: PCIe or SXM) the
slower one is taken (:func:`slower`) and the offer says so (``gpu_note``); an offer with no entry is kept, not
projected, and counted.
"""

from __future__ import annotations

import ast
import csv
import datetime as dt
import io
import json
import math
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from trainbench.analysis.projection.gpus import GpuSpec
from trainbench.analysis.report_types import OffersSummary
from trainbench.core.errors import ConfigError
from trainbench.core.gpu_names import catalogue_entries

#: What ``decision.offers`` accepts besides a path (``none``: only the quoted prices of decision.catalogue).
PACKAGED, SKYPILOT, NONE = "packaged", "skypilot", "none"
#: A catalogue file larger than this is refused (the public AWS file, the largest, is about 3.6 MB).
MAX_FILE_BYTES = 64 * 2**20
#: Prices that stand for "no price": the public GCP file writes 700.0 for TPU slices it cannot price in a zone.
PLACEHOLDER_PRICES = frozenset({700.0})
#: The columns a catalogue file needs (SkyPilot's names; their order differs per cloud).
REQUIRED = ("InstanceType", "AcceleratorName", "AcceleratorCount", "Price", "Region")
#: GCP: the machine type a GPU comes in (its VM part is priced in its own row), by accelerator and GPU count.
GCP_HOSTS: dict[str, Any] = {
    "A100": lambda n: f"a2-highgpu-{n}g",
    "A100-80GB": lambda n: f"a2-ultragpu-{n}g",
    "H100": lambda n: f"a3-highgpu-{n}g",
    "H100-MEGA": lambda n: f"a3-megagpu-{n}g",
    "H200": lambda n: f"a3-ultragpu-{n}g",
    "B200": lambda n: f"a4-highgpu-{n}g",
    "L4": lambda n: {1: "g2-standard-4", 2: "g2-standard-24", 4: "g2-standard-48", 8: "g2-standard-96"}.get(n),
}
#: Why rows are left out, in the order they are tested (the report's and ``offers list``'s counting line).
SCREENS = {
    "price": "no price, or a non-finite or non-positive one",
    "placeholder": "a placeholder price (700.0)",
    "spot_above": "spot above on-demand",
    "count": "a GPU count that is not a whole number or disagrees with GpuInfo",
    "tpu": "a TPU, not a GPU",
    "no_host": "a GCP GPU row whose host VM is not fixed by the GPU or has no row in that zone",
    "spot_tenth": "a spot price of exactly a tenth of on-demand, dropped (the row kept)",
}
#: A spot price this close (relative) to a tenth of the on-demand price is a fill-in, not a market price: the
#: public AWS file carries it for whole regions (every instance type of ap-southeast-3, ap-east-1, ...).
TENTH_TOLERANCE = 1e-3
#: The packaged extract's provenance file (beside its ``<cloud>/vms.csv``).
SOURCE_FILE = "source.json"


@dataclass(frozen=True)
class Offer:
    """One instance type of one cloud, at its cheapest region: what the decision prices and projects."""

    cloud: str
    instance_type: str
    accelerator: str  # the catalogue's name (H100, A100-80GB, ...)
    gpus: int
    usd_per_hour: float  # on-demand, the cheapest region's
    region: str
    gpu: str | None = None  # the conf/hardware entry; None: no entry, not projected
    gpu_note: str | None = None  # how the entry was chosen where the catalogue could not tell
    spot_usd_per_hour: float | None = None  # the cheapest spot price, any region; None: no spot market
    spot_region: str | None = None
    source: str = ""  # where the price comes from (catalogue, commit)
    read: str | None = None  # the date the catalogue was read (or its files written)
    spot: bool = False  # priced at the spot price (decision.spot): an interruptible instance
    restart_allowance: float = 0.0  # the conservative hours' extra for interruptions (spot only)
    memory_gb: float | None = None  # memory per GPU, where the catalogue tells it
    gpu_name: str | None = None  # GpuInfo's name of the GPU (A100 PCIe, H100 SXM), where the catalogue gives one

    # what analysis/projection/projection.py reads of an instance (as of a decision.catalogue entry)
    @property
    def name(self) -> str:
        return f"{self.cloud}:{self.instance_type}" + (" (spot)" if self.spot else "")

    @property
    def price_date(self) -> str:
        return f"{self.source}, read {self.read}" if self.read else self.source

    @property
    def relative_speed(self) -> None:
        return None

    def as_spot(self, allowance: float) -> Offer:
        """The same instance priced at its spot price, with the restart allowance."""
        return replace(self, usd_per_hour=self.spot_usd_per_hour, region=self.spot_region, spot=True,
                       restart_allowance=allowance)


@dataclass
class Catalogue:
    """The offers of one source, and what was left out of it."""

    source: str  # packaged | skypilot | the path
    described: str  # the catalogue, its commits or its files' date
    read: str | None
    offers: list[Offer]
    rows: int  # GPU rows read (before the screens)
    screened: Counter[str] = field(default_factory=Counter)  # SCREENS key -> rows left out
    commits: dict[str, str] = field(default_factory=dict)

    def screened_line(self) -> str:
        """The one line that counts the rows left out."""
        out = {k: self.screened[k] for k in SCREENS if self.screened.get(k) and k != "spot_tenth"}
        n = sum(out.values())
        line = (f"{n} of {self.rows} GPU rows left out: " + ", ".join(f"{v} {SCREENS[k]}" for k, v in out.items())
                if n else f"{self.rows} GPU rows read, none left out")
        tenth = self.screened.get("spot_tenth", 0)
        return line + (f"; {tenth} spot prices of exactly a tenth of on-demand dropped (their rows kept)" if tenth
                       else "")


# --------------------------------------------------------------------------------------------------
# reading SkyPilot-format files
# --------------------------------------------------------------------------------------------------


@dataclass
class _Row:
    cloud: str
    instance: str
    accelerator: str
    count: float | None
    price: float | None
    spot: float | None
    region: str
    zone: str
    info: dict[str, Any] | None
    spot_region: str | None = None


def _num(text: str | None) -> float | None:
    """'' -> None (not told); unparsable -> nan."""
    text = (text or "").strip()
    if not text:
        return None
    try:
        return float(text)
    except ValueError:
        return math.nan


def _gpu_info(text: str | None) -> dict[str, Any] | None:
    """GpuInfo: a Python-literal dict (SkyPilot writes repr()), or JSON; unreadable -> None."""
    text = (text or "").strip()
    if not text:
        return None
    for parse in (ast.literal_eval, json.loads):
        try:
            v = parse(text)
            return v if isinstance(v, dict) else None
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
    return None


def _first_gpu(info: dict[str, Any] | None) -> dict[str, Any]:
    gpus = (info or {}).get("Gpus") or []
    return gpus[0] if gpus and isinstance(gpus[0], dict) else {}


def memory_gb(info: dict[str, Any] | None) -> float | None:
    """Memory per GPU from GpuInfo: ``SizeInMiB`` / 1024; a value under 1024 is taken as GB (the public RunPod
    file writes GB there, 80 for an 80 GB A100)."""
    size = (_first_gpu(info).get("MemoryInfo") or {}).get("SizeInMiB")
    if not isinstance(size, (int, float)) or not size > 0:
        return None
    return float(size) / 1024 if size >= 1024 else float(size)


def _read_file(cloud: str, path: Path) -> list[_Row]:
    """The rows of one vms.csv; a file too large, unreadable or without SkyPilot's columns is a ConfigError."""
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise ConfigError(f"{path}: {size / 2**20:.0f} MB, over the {MAX_FILE_BYTES // 2**20} MB a catalogue file "
                          "may have; point decision.offers at SkyPilot's vms.csv files (catalogs/v8/<cloud>/)")
    try:
        text = path.read_text(encoding="utf-8")
        reader = csv.DictReader(io.StringIO(text))
        header = reader.fieldnames or []
        missing = [c for c in REQUIRED if c not in header]
        if missing:
            raise ConfigError(f"{path}: not a SkyPilot catalogue file: no column {', '.join(missing)} (it needs "
                              f"{', '.join(REQUIRED)}; columns found: {', '.join(header) or 'none'})")
        rows = []
        for r in reader:
            acc = (r.get("AcceleratorName") or "").strip()
            rows.append(_Row(cloud=cloud, instance=(r.get("InstanceType") or "").strip(), accelerator=acc,
                             count=_num(r.get("AcceleratorCount")), price=_num(r.get("Price")),
                             spot=_num(r.get("SpotPrice")), region=(r.get("Region") or "").strip(),
                             zone=(r.get("AvailabilityZone") or "").strip(),
                             info=_gpu_info(r.get("GpuInfo")) if acc else None,
                             spot_region=(r.get("SpotRegion") or "").strip() or None))
        return rows
    except (UnicodeDecodeError, csv.Error) as e:
        raise ConfigError(f"{path}: not a readable CSV file ({e}); point decision.offers at SkyPilot's vms.csv "
                          "files") from None


def catalogue_files(path: Path) -> list[tuple[str, Path]]:
    """(cloud, file) of a folder of ``<cloud>/vms.csv`` (or a ``vms.csv`` in it), or of one file (its cloud: the
    folder it lies in when it is named vms.csv, else its name)."""
    if path.is_file():
        return [(path.parent.name if path.name == "vms.csv" and path.parent.name else path.stem, path)]
    if not path.is_dir():
        raise ConfigError(f"decision.offers={path}: no such file or folder; give a folder of <cloud>/vms.csv "
                          "files or one vms.csv (SkyPilot's format), or decision.offers=packaged|skypilot")
    files = [(p.parent.name, p) for p in sorted(path.glob("*/vms.csv"))]
    if (path / "vms.csv").is_file():
        files.insert(0, (path.name, path / "vms.csv"))
    if not files:
        raise ConfigError(f"decision.offers={path}: no <cloud>/vms.csv in it; give a folder of SkyPilot catalogue "
                          "files (catalogs/v8/<cloud>/vms.csv) or one vms.csv")
    return files


def _screen(row: _Row) -> str | None:
    """Why a GPU row is left out (a SCREENS key), or None."""
    if row.price is None or not math.isfinite(row.price) or row.price <= 0:
        return "price"
    if row.spot is not None and (not math.isfinite(row.spot) or row.spot <= 0):
        return "price"
    if row.price in PLACEHOLDER_PRICES or row.spot in PLACEHOLDER_PRICES:
        return "placeholder"
    if row.spot is not None and row.spot > row.price:
        return "spot_above"
    if row.accelerator.lower().startswith("tpu"):
        return "tpu"
    n = row.count
    if n is None or not math.isfinite(n) or n < 1 or n != int(n):
        return "count"
    told = _first_gpu(row.info).get("Count")
    if isinstance(told, (int, float)) and told != n:
        return "count"
    return None


def _join_gcp(gpu_rows: list[_Row], hosts: dict[tuple[str, str, str], _Row], screened: Counter[str]) -> list[_Row]:
    """GCP's GPU rows (no instance type) joined with their host VM's row in the same zone: one priced row each."""
    out = []
    for r in gpu_rows:
        make = GCP_HOSTS.get(r.accelerator)
        host = make(int(r.count)) if make else None
        vm = hosts.get((r.cloud, host, r.zone or r.region)) if host else None
        if vm is None or vm.price is None or not math.isfinite(vm.price) or vm.price <= 0:
            screened["no_host"] += 1
            continue
        spot = (round(r.spot + vm.spot, 6) if r.spot is not None and vm.spot is not None and math.isfinite(vm.spot)
                else None)
        out.append(_Row(cloud=r.cloud, instance=host, accelerator=r.accelerator, count=r.count,
                        price=round(r.price + vm.price, 6), spot=spot, region=r.region, zone=r.zone, info=r.info))
    return out


def _reduce(rows: Iterable[_Row]) -> dict[tuple[str, str], tuple[_Row, _Row | None]]:
    """(cloud, instance type) -> (the cheapest on-demand row, the cheapest spot row or None)."""
    best: dict[tuple[str, str], tuple[_Row, _Row | None]] = {}
    for r in rows:
        key = (r.cloud, r.instance)
        od, sp = best.get(key, (r, None))
        if r.price < od.price:
            od = r
        if r.spot is not None and (sp is None or r.spot < sp.spot):
            sp = r
        best[key] = (od, sp)
    return best


def _offer(od: _Row, sp: _Row | None, entries: dict[str, GpuSpec], source: str, read: str | None) -> Offer:
    mem = memory_gb(od.info)
    told = str(_first_gpu(od.info).get("Name") or "") or None
    gpu, note = identify(entries, [od.accelerator, told or "", od.instance], mem)
    return Offer(cloud=od.cloud, instance_type=od.instance, accelerator=od.accelerator, gpus=int(od.count),
                 usd_per_hour=od.price, region=od.region, gpu=gpu, gpu_note=note,
                 spot_usd_per_hour=None if sp is None else sp.spot,
                 spot_region=None if sp is None else (sp.spot_region or sp.region),
                 source=source, read=read, memory_gb=mem, gpu_name=told)


def slower(entries: dict[str, GpuSpec], keys: list[str]) -> str:
    """Of GPU entries the catalogue cannot tell apart, the slower: the lower memory bandwidth, then the lower
    bf16 (else fp32) peak, then the lower board power (a lower power limit sustains lower clocks)."""
    def speed(k: str) -> tuple[float, float, float]:
        g = entries[k]
        peaks = g.peak_tflops or {}
        return (float(g.memory_gbps or 0), float(peaks.get("bf16") or peaks.get("fp16") or peaks.get("fp32") or 0),
                float(g.power_w or 0))
    return min(keys, key=speed)


def identify(entries: dict[str, GpuSpec], names: list[str], mem_gb: float | None) -> tuple[str | None, str | None]:
    """(the conf/hardware entry an offer holds, or None; the note where the catalogue could not tell which)."""
    keys = catalogue_entries({k: g.gpu for k, g in entries.items()}, names, mem_gb)
    if len(keys) <= 1:
        return (keys[0] if keys else None), None
    pick = slower(entries, keys)
    return pick, (f"{names[0]}: the catalogue does not tell {' or '.join(sorted(keys))}; the slower, {pick}, is "
                  "assumed")


def read_catalogue(path: Path, entries: dict[str, GpuSpec], source: str, described: str | None = None,
                   read: str | None = None) -> Catalogue:
    """Every offer of a SkyPilot-format file or folder, screened and reduced (see the module's doc)."""
    files = catalogue_files(path)
    meta = _source_meta(path)
    commits = dict(meta.get("commits") or {})
    read = read or meta.get("read") or _files_date([p for _, p in files])
    screened: Counter[str] = Counter({k: int(v) for k, v in (meta.get("screened") or {}).items() if k in SCREENS})
    extract = "offers" in meta  # an extract written by write_extract: its rows were counted when it was made
    rows_read = int(meta.get("rows") or 0)
    kept: list[_Row] = []
    gpu_only: list[_Row] = []  # GCP's GPU rows: no instance type, priced with their host VM
    hosts: dict[tuple[str, str, str], _Row] = {}  # (cloud, machine type, zone) -> its VM-only row
    for cloud, p in files:
        for r in _read_file(cloud, p):
            if not r.accelerator:
                if r.instance:
                    hosts[(cloud, r.instance, r.zone or r.region)] = r
                continue
            rows_read += 0 if extract else 1
            why = _screen(r)
            if why:
                screened[why] += 1
                continue
            if r.spot is not None and abs(r.spot * 10 - r.price) <= TENTH_TOLERANCE * r.price:
                r.spot = None  # a fill-in, not a market price: the on-demand price stands
                screened["spot_tenth"] += 1
            (kept if r.instance else gpu_only).append(r)
    kept += _join_gcp(gpu_only, hosts, screened)
    described = described or meta.get("described") or f"{path} (SkyPilot format)"
    offers = []
    for (cloud, _), (od, sp) in sorted(_reduce(kept).items()):
        src = f"SkyPilot catalogue {cloud}@{commits[cloud][:7]}" if cloud in commits else described
        offers.append(_offer(od, sp, entries, src, read))
    return Catalogue(source=source, described=described, read=read, offers=offers, rows=rows_read,
                     screened=screened, commits=commits)


def _source_meta(path: Path) -> dict[str, Any]:
    f = (path if path.is_dir() else path.parent) / SOURCE_FILE
    if not f.is_file():
        return {}
    try:
        meta = json.loads(f.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise ConfigError(f"{f}: not readable JSON ({e}); rewrite it with trainbench offers refresh") from None
    return meta if isinstance(meta, dict) else {}


def _files_date(files: list[Path]) -> str:
    newest = max(p.stat().st_mtime for p in files)
    return dt.datetime.fromtimestamp(newest, dt.timezone.utc).date().isoformat()


# --------------------------------------------------------------------------------------------------
# decision.offers: packaged | skypilot | a path
# --------------------------------------------------------------------------------------------------


def packaged_dir() -> Path:
    from trainbench import CONF_DIR

    return CONF_DIR / "offers"


def skypilot_dir(home: Path | None = None) -> Path:
    """The newest ``~/.sky/catalogs/<version>/`` (v8 before v7; by the version's number)."""
    root = (home or Path.home()) / ".sky" / "catalogs"
    versions = [p for p in root.glob("v*") if p.is_dir() and re.fullmatch(r"v\d+", p.name)] if root.is_dir() else []
    if not versions:
        raise ConfigError(f"decision.offers=skypilot: no {root}/<version>/ on this machine (SkyPilot keeps its "
                          "catalogue there once it has been used); use decision.offers=packaged or a folder of "
                          "<cloud>/vms.csv files")
    return max(versions, key=lambda p: int(p.name[1:]))


def load(offers: str, entries: dict[str, GpuSpec], home: Path | None = None) -> Catalogue:
    """The catalogue ``decision.offers`` names."""
    if offers == NONE:
        return Catalogue(source=NONE, described="no offers (decision.offers=none)", read=None, offers=[], rows=0)
    if offers == PACKAGED:
        return read_catalogue(packaged_dir(), entries, PACKAGED)
    if offers == SKYPILOT:
        d = skypilot_dir(home)
        return read_catalogue(d, entries, SKYPILOT, described=f"SkyPilot's local catalogue {d}")
    path = Path(offers).expanduser().resolve()  # named in full in the report
    return read_catalogue(path, entries, str(path))


def decision_offers(cat: Catalogue, gpu_counts: list[int], spot: bool, allowance: float) -> list[Offer]:
    """The offers the decision projects: of each (cloud, GPU entry, GPU count in ``gpu_counts``) the cheapest
    instance type (another with the same GPUs differs in CPUs and memory only); with ``spot``, each of them with
    a spot price also priced at it (:meth:`Offer.as_spot`)."""
    best: dict[tuple[str, str, int], Offer] = {}
    for o in cat.offers:
        if o.gpu is None or o.gpus not in gpu_counts:
            continue
        key = (o.cloud, o.gpu, o.gpus)
        if key not in best or o.usd_per_hour < best[key].usd_per_hour:
            best[key] = o
    out = sorted(best.values(), key=lambda o: (o.gpus, o.usd_per_hour, o.name))
    if spot:
        out += [o.as_spot(allowance) for o in out if o.spot_usd_per_hour is not None]
    return out


def summary(cat: Catalogue, used: list[Offer], gpu_counts: list[int], spot: bool, allowance: float,
            quoted: list[str]) -> OffersSummary:
    """The report's ``offers`` block (docs/report-schema.md)."""
    unprojected = [o for o in cat.offers if o.gpu is None]
    by_acc = Counter(f"{o.accelerator} x{o.gpus}" for o in unprojected)
    other_counts = sum(1 for o in cat.offers if o.gpu is not None and o.gpus not in gpu_counts)
    notes = sorted({f"{o.name}: {o.gpu_note}" for o in used if o.gpu_note})
    return OffersSummary(source=cat.source, described=cat.described, read=cat.read, commits=cat.commits,
                         offers=len(cat.offers), considered=len(used), gpu_counts=list(gpu_counts),
                         other_gpu_counts=other_counts, not_projected=len(unprojected),
                         not_projected_gpus=[f"{k} ({v})" if v > 1 else k for k, v in sorted(by_acc.items())],
                         screened=dict(cat.screened), screened_line=cat.screened_line(), spot=spot,
                         restart_allowance=allowance, identity_notes=notes, quoted=list(quoted))


def for_decision(d: Any, entries: dict[str, GpuSpec]) -> tuple[list[Offer], OffersSummary | None]:
    """The offers the decision config ``d`` asks for (``decision.offers``, ``gpu_counts``, ``spot``,
    ``spot_restart_allowance``) and the report's ``offers`` block (None with ``decision.offers=none``)."""
    cat = load(str(d.offers), entries)
    used = decision_offers(cat, [int(n) for n in d.gpu_counts], bool(d.spot), float(d.spot_restart_allowance))
    if cat.source == NONE:
        return used, None
    return used, summary(cat, used, [int(n) for n in d.gpu_counts], bool(d.spot), float(d.spot_restart_allowance),
                         [f"{c.name} ({c.price_date or 'no date given'})" for c in d.catalogue])


# --------------------------------------------------------------------------------------------------
# the packaged extract (trainbench offers refresh)
# --------------------------------------------------------------------------------------------------

EXTRACT_COLUMNS = ["InstanceType", "AcceleratorName", "AcceleratorCount", "GpuInfo", "Price", "Region",
                   "SpotPrice", "SpotRegion"]


def describe(catalogue: str, commits: dict[str, str]) -> str:
    """A catalogue and its commit per cloud: ``SkyPilot catalogue (...): aws@e385a0d, gcp@8427bbf``."""
    return catalogue + (": " + ", ".join(f"{c}@{s[:7]}" for c, s in sorted(commits.items())) if commits else "")


def write_extract(cat: Catalogue, out: Path, catalogue: str, note: str | None = None) -> list[Path]:
    """One ``<cloud>/vms.csv`` per cloud of ``cat`` (one row per offer: its cheapest on-demand price and region,
    its cheapest spot price and region) and ``source.json`` (the catalogue, its commits, the date read, the
    rows read and left out), under ``out``. Returns the files written."""
    written = []
    by_cloud: dict[str, list[Offer]] = {}
    for o in cat.offers:
        by_cloud.setdefault(o.cloud, []).append(o)
    for cloud, offers in sorted(by_cloud.items()):
        f = out / cloud / "vms.csv"
        f.parent.mkdir(parents=True, exist_ok=True)
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(EXTRACT_COLUMNS)
        for o in offers:
            info = {"Gpus": [{"Name": o.gpu_name or o.accelerator, "Count": o.gpus,
                              **({"MemoryInfo": {"SizeInMiB": round(o.memory_gb * 1024)}} if o.memory_gb else {})}]}
            w.writerow([o.instance_type, o.accelerator, o.gpus, repr(info), repr(o.usd_per_hour), o.region,
                        "" if o.spot_usd_per_hour is None else repr(o.spot_usd_per_hour), o.spot_region or ""])
        f.write_text(buf.getvalue(), encoding="utf-8")
        written.append(f)
    meta = {"catalogue": catalogue, "described": describe(catalogue, cat.commits),
            "read": cat.read, "commits": cat.commits, "rows": cat.rows, "screened": dict(cat.screened),
            "offers": len(cat.offers), "note": note}
    (out / SOURCE_FILE).write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return [*written, out / SOURCE_FILE]


def refresh(source: Path | None, out: Path | None, entries: dict[str, GpuSpec], commits: dict[str, str] | None = None,
            read: str | None = None, home: Path | None = None) -> tuple[Catalogue, list[Path]]:
    """``trainbench offers refresh``: read a SkyPilot catalogue folder (default: the newest
    ``~/.sky/catalogs/<version>/``) and write its extract to ``out`` (default: the packaged one). The commits and
    the date read come from the arguments, else the folder's ``source.json``, else unknown and the files' date.
    ``out`` given and holding anything but an earlier extract is refused (a path you gave is never replaced)."""
    src = source if source is not None else skypilot_dir(home)
    target = out if out is not None else packaged_dir()
    if out is not None and out.exists() and any(out.iterdir()) and not (out / SOURCE_FILE).is_file():
        raise ConfigError(f"--to {out}: a folder with other files in it; give an empty folder or an earlier "
                          "extract (one with source.json)")
    meta = _source_meta(src)
    cat = read_catalogue(src, entries, str(src), read=read or meta.get("read")
                         or dt.datetime.now(dt.timezone.utc).date().isoformat())
    if commits:
        cat.commits.update(commits)
    catalogue = meta.get("catalogue") or (f"SkyPilot's local catalogue {src}" if source is None else
                                          f"SkyPilot-format catalogue {src}")
    cat.described = describe(catalogue, cat.commits)
    if target.is_dir():
        for old in target.glob("*/vms.csv"):
            old.unlink()
    return cat, write_extract(cat, target, catalogue, meta.get("note"))


def listing(cat: Catalogue, used: list[Offer], filters: dict[str, str]) -> str:
    """``trainbench offers list``: the offers the decision considers (filtered: ``gpu=`` an entry or an
    accelerator, prefix, any case; ``cloud=``), then the counting lines."""
    def keep(o: Offer) -> bool:
        g = filters.get("gpu", "").lower()
        c = filters.get("cloud", "").lower()
        return (not g or (o.gpu or "").lower().startswith(g) or o.accelerator.lower().startswith(g)) and \
            (not c or o.cloud.lower() == c)
    rows = [o for o in used if keep(o)]
    head = f"{'instance':34s} {'GPU':16s} {'GPUs':>4s} {'$/h':>9s} {'region':18s} {'spot $/h':>9s} {'spot region':16s}"
    lines = [f"offers: {cat.described}" + (f", read {cat.read}" if cat.read else ""), head]
    for o in rows:
        spot = "–" if o.spot_usd_per_hour is None else f"{o.spot_usd_per_hour:.4g}"
        lines.append(f"{o.name:34s} {o.gpu or '-':16s} {o.gpus:4d} {o.usd_per_hour:9.4g} {o.region:18s} {spot:>9s} "
                     f"{o.spot_region or '–':16s}" + (" *" if o.gpu_note else ""))
    if any(o.gpu_note for o in rows):
        lines.append("* the catalogue does not tell the variant: the slower entry is assumed "
                     "(e.g. " + next(o.gpu_note for o in rows if o.gpu_note) + ")")
    unprojected = [o for o in cat.offers if o.gpu is None and keep(o)]
    spot = sum(o.spot for o in rows)
    lines.append(f"{len(rows) - spot} offers considered" + (f" and their {spot} spot rows" if spot else "")
                 + f" (of {len(cat.offers)} offers read); {len(unprojected)} not projected "
                 "(no conf/hardware entry): " + (", ".join(sorted({f'{o.accelerator} x{o.gpus}' for o in unprojected}))
                                                 or "none"))
    lines.append(cat.screened_line())
    return "\n".join(lines)
