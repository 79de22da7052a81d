"""Build and check the GPU run kit (``make gpu-kit``): wheels for the lent GPU machine, which reaches no registry.

The GPU machine has Python 3.12, torch and a scientific stack (``scripts/gpukit/present.txt``) but not
Hydra, MLflow or the Databento readers. This script downloads, into the git-ignored ``.whl/`` folder, binary
wheels for CPython 3.12 on manylinux x86-64 of the packages in ``scripts/gpukit/requirements.txt`` and of
every requirement of theirs (markers evaluated for Python 3.12 on Linux) that the machine lacks, each pinned
to the version installed in the running interpreter where that version satisfies the requirement.

Then, offline, it checks the kit:

1. **installable**: ``pip install --dry-run --no-index --no-deps --find-links .whl --python-version 3.12
   --only-binary=:all: --target <tmp>`` accepts every wheel (one version of each distribution);
2. **closed**: the closure of the wheels' ``Requires-Dist`` from the top-level requirements, minus what the
   GPU machine already has, is covered by the kit, at versions that satisfy every specifier;
3. **small enough**: the kit plus the tracked tree stays under the 64 MiB that travels with a device call.

``python scripts/gpu_kit.py --check`` runs the checks on an existing kit without downloading. Exit 0 when the
kit is complete and passes, 1 when a check fails, 2 when a download fails (with the pip error).
"""

from __future__ import annotations

import argparse
import email.parser
import importlib.metadata as md
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

from trainbench.core.errors import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK

ROOT = Path(__file__).resolve().parents[1]
KIT_DIR = ROOT / ".whl"
PRESENT = ROOT / "scripts" / "gpukit" / "present.txt"
REQUIREMENTS = ROOT / "scripts" / "gpukit" / "requirements.txt"
LIMIT_MIB = 64.0  # what travels with one device call: tracked tree + untracked-not-ignored + carried paths
PYTHON_VERSION = "3.12"
# The environment the GPU machine's markers evaluate in (CPython 3.12 on Linux x86-64).
MARKER_ENV = {
    "python_version": "3.12", "python_full_version": "3.12.3", "sys_platform": "linux",
    "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix",
    "implementation_name": "cpython", "platform_python_implementation": "CPython", "extra": "",
}
PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_24_x86_64",
             "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux1_x86_64", "linux_x86_64"]
TARGET_FLAGS = ["--only-binary=:all:", "--python-version", PYTHON_VERSION, "--implementation", "cp",
                *[x for p in PLATFORMS for x in ("--platform", p)]]


def read_list(path: Path) -> list[str]:
    """Non-empty lines of a list file, without comments."""
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return [line for line in lines if line]


def present_names(path: Path = PRESENT) -> set[str]:
    return {canonicalize_name(n) for n in read_list(path)}


def top_requirements(path: Path = REQUIREMENTS) -> list[Requirement]:
    return [Requirement(line) for line in read_list(path)]


def applies(req: Requirement) -> bool:
    """Whether a requirement applies on the GPU machine (no extras requested)."""
    return req.marker is None or Marker(str(req.marker)).evaluate(MARKER_ENV)


@dataclass(frozen=True)
class Wheel:
    path: Path
    name: str  # canonical
    version: Version

    @property
    def requires(self) -> list[Requirement]:
        with zipfile.ZipFile(self.path) as z:
            meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
            msg = email.parser.Parser().parsestr(z.read(meta).decode("utf-8"))
        return [Requirement(r) for r in msg.get_all("Requires-Dist") or []]


def kit_wheels(kit: Path = KIT_DIR) -> dict[str, list[Wheel]]:
    out: dict[str, list[Wheel]] = {}
    for p in sorted(kit.glob("*.whl")):
        name, version, _, _ = parse_wheel_filename(p.name)
        out.setdefault(canonicalize_name(name), []).append(Wheel(p, canonicalize_name(name), version))
    return out


def local_version(name: str) -> str | None:
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return None


def download(spec: str, dest: Path) -> Path:
    """One wheel for the GPU machine (no dependencies); returns its path."""
    before = set(dest.glob("*.whl"))
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--disable-pip-version-check",
           *TARGET_FLAGS, "-d", str(dest), spec]
    p = subprocess.run(cmd, capture_output=True, text=True)
    new = set(dest.glob("*.whl")) - before
    if p.returncode != 0 and not new:
        # Some pure-Python packages publish only a source distribution (antlr4-python3-runtime 4.9.3, which
        # omegaconf pins): build its wheel here and accept it only if it is pure Python (py3-none-any).
        built = _build_pure_wheel(spec, dest)
        if built is None:
            err = "\n".join(line for line in p.stderr.splitlines() if not line.startswith("WARNING: Location"))
            raise RuntimeError(f"pip could not download a CPython {PYTHON_VERSION} manylinux x86-64 wheel of "
                               f"{spec!r}, nor build a pure-Python one:\n{err.strip()}")
        return built
    if new:
        return sorted(new)[0]
    # already there: find it by name
    name = canonicalize_name(Requirement(spec).name)
    hits = kit_wheels(dest).get(name)
    if not hits:
        raise RuntimeError(f"pip reported success for {spec!r} but no wheel of it is in {dest}")
    return hits[0].path


def _build_pure_wheel(spec: str, dest: Path) -> Path | None:
    with tempfile.TemporaryDirectory(prefix="tb-kit-build-") as tmp:
        cmd = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--disable-pip-version-check",
               "--no-binary", ":all:", "-w", tmp, spec]
        if subprocess.run(cmd, capture_output=True, text=True).returncode != 0:
            return None
        for w in Path(tmp).glob("*.whl"):
            _, _, _, tags = parse_wheel_filename(w.name)
            if all(t.abi == "none" and t.platform == "any" and t.interpreter.startswith("py3") for t in tags):
                return Path(shutil.move(str(w), dest / w.name))
    return None


def build(kit: Path, present: set[str], reqs: Iterable[Requirement]) -> list[str]:
    """Download the closure into ``kit``; returns a log of what was chosen and why."""
    kit.mkdir(exist_ok=True)
    log: list[str] = []
    have = {n: ws[0] for n, ws in kit_wheels(kit).items()}
    queue = list(reqs)
    seen: set[str] = set()
    while queue:
        req = queue.pop(0)
        name = canonicalize_name(req.name)
        if name in present or not applies(req):
            continue
        if name in seen:
            continue
        seen.add(name)
        local = local_version(req.name)
        if name in have and (have[name].version in req.specifier or not req.specifier):
            wheel = have[name]
        else:
            pinned = bool(local) and Version(local) in req.specifier
            wheel_path = download(f"{req.name}=={local}" if pinned else f"{req.name}{req.specifier}", kit)
            wheel = next(w for w in kit_wheels(kit)[name] if w.path == wheel_path)
            have[name] = wheel
            why = "the version in this venv" if pinned else f"the newest that satisfies {req}"
            log.append(f"+ {wheel.path.name}  ({why})")
        queue.extend(wheel.requires)
    for name, ws in kit_wheels(kit).items():  # left from an earlier requirements list, or an older version
        for w in ws:
            if name not in have or w.path != have[name].path:
                w.path.unlink()
                log.append(f"- {w.path.name}  (no longer needed)")
    return log


def check_closed(kit: Path, present: set[str], reqs: Iterable[Requirement]) -> list[str]:
    """Problems with the kit's closure: a missing requirement, an unsatisfied version, duplicates, extras."""
    problems: list[str] = []
    wheels = kit_wheels(kit)
    for name, ws in wheels.items():
        if len(ws) > 1:
            problems.append(f"{name}: {len(ws)} versions in the kit ({', '.join(w.path.name for w in ws)}); "
                            "keep one (two stop the whole install)")
    one = {n: ws[0] for n, ws in wheels.items()}
    queue = [(r, "requirements.txt") for r in reqs]
    reached: set[str] = set()
    while queue:
        req, by = queue.pop(0)
        name = canonicalize_name(req.name)
        if not applies(req) or name in present:
            continue
        w = one.get(name)
        if w is None:
            problems.append(f"{req} (required by {by}) is neither in the kit nor on the GPU machine")
            continue
        if req.specifier and not req.specifier.contains(w.version, prereleases=True):
            problems.append(f"{by} requires {req}, the kit has {w.name} {w.version}")
        if name not in reached:
            reached.add(name)
            queue.extend((r, f"{w.name} {w.version}") for r in w.requires)
    for name in sorted(set(one) - reached):
        problems.append(f"{one[name].path.name} is in the kit but nothing requires it (remove it)")
    return problems


def check_installable(kit: Path) -> tuple[bool, str]:
    """pip's own dry run of installing every wheel for CPython 3.12 on manylinux x86-64, offline."""
    wheels = sorted(str(p) for p in kit.glob("*.whl"))
    if not wheels:
        return False, "the kit is empty"
    with tempfile.TemporaryDirectory(prefix="tb-kit-") as tmp:
        cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--no-index", "--no-deps",
               "--disable-pip-version-check", "--find-links", str(kit), *TARGET_FLAGS, "--target", tmp, *wheels]
        p = subprocess.run(cmd, capture_output=True, text=True)
    out = "\n".join(line for line in (p.stdout + p.stderr).splitlines() if not line.startswith("WARNING: Location"))
    return p.returncode == 0, out.strip().splitlines()[-1] if out.strip() else ""


def tracked_mib(root: Path = ROOT) -> float:
    """The tracked files plus untracked files git does not ignore: what a device call sends besides carry."""
    p = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=root,
                       capture_output=True)
    if p.returncode != 0:
        return float("nan")
    total = 0
    for rel in p.stdout.decode().split("\0"):
        f = root / rel
        if rel and f.is_file() and not f.is_symlink():
            total += f.stat().st_size
    return total / 2**20


def kit_mib(kit: Path = KIT_DIR) -> float:
    return sum(p.stat().st_size for p in kit.glob("*.whl")) / 2**20


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="only check the existing kit (offline)")
    ap.add_argument("--clean", action="store_true", help="empty .whl/ first (a fresh download)")
    ap.add_argument("--kit", type=Path, default=KIT_DIR)
    args = ap.parse_args(argv)
    present, reqs = present_names(), top_requirements()
    if args.clean and args.kit.exists():
        shutil.rmtree(args.kit)
    if not args.check:
        print(f"gpu-kit: downloading CPython {PYTHON_VERSION} manylinux x86-64 wheels into {args.kit} "
              f"({len(reqs)} requirements; {len(present)} distributions already on the GPU machine)")
        try:
            for line in build(args.kit, present, reqs):
                print("  " + line)
        except RuntimeError as e:
            print(f"error: {e}", file=sys.stderr)
            return EXIT_BAD_INPUT
    if not args.kit.is_dir() or not any(args.kit.glob("*.whl")):
        print(f"error: no kit in {args.kit}: run `make gpu-kit` (it needs PyPI) first", file=sys.stderr)
        return EXIT_FAILED
    ok = True
    installable, last = check_installable(args.kit)
    print(f"[{'ok' if installable else 'FAIL'}] installable offline for CPython {PYTHON_VERSION} "
          f"manylinux x86-64 (pip --dry-run --no-index --no-deps): {last}")
    ok &= installable
    problems = check_closed(args.kit, present, reqs)
    print(f"[{'ok' if not problems else 'FAIL'}] closure of Requires-Dist (Python {PYTHON_VERSION}, Linux) minus "
          f"present.txt is covered: {len(kit_wheels(args.kit))} wheels")
    for prob in problems:
        print("    " + prob)
    ok &= not problems
    size, tree = kit_mib(args.kit), tracked_mib()
    fits = size + tree < LIMIT_MIB
    print(f"[{'ok' if fits else 'FAIL'}] size: kit {size:.1f} MiB + working tree {tree:.1f} MiB = "
          f"{size + tree:.1f} MiB (limit {LIMIT_MIB:.0f} MiB)")
    ok &= fits
    if ok:
        print("gpu-kit ready: device run with carry [\".whl\"] and the command `bash scripts/gpu_run.sh \"$OUT\"` "
              "(docs/performance.md)")
    return EXIT_OK if ok else EXIT_FAILED


if __name__ == "__main__":
    if os.environ.get("PIP_REQUIRE_VIRTUALENV"):
        os.environ.pop("PIP_REQUIRE_VIRTUALENV")
    sys.exit(main())
