"""A throw-away single-node SLURM cluster on this machine, for the tests marked `slurm`.

munged, slurmctld and slurmd run as root with everything in a temporary folder (munge key and socket,
slurm.conf, state, spool, logs, PID files) and the controller and node daemon on free loopback ports,
so that nothing of the host's own SLURM or munge set-up is used or touched. The node is this host as
``slurmd -C`` sees it (its real CPUs and memory), in one partition ``debug`` (the default, 30 min limit).
Clients find the cluster through ``SLURM_CONF`` (:meth:`SlurmCluster.env`). :meth:`stop` cancels the
jobs, waits for them, and stops the daemons by PID.

    python tests/helpers/slurm_cluster.py      # start one, print how to use it, stop it on Enter
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if __name__ == "__main__":  # run as a script: tests/ (the folder pytest puts on sys.path) is not on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from helpers.servers import free_port  # noqa: E402

DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "scancel", "sinfo", "srun")
PARTITION = "debug"
MAX_TIME_MIN = 30


def _which(tool: str) -> str | None:
    return shutil.which(tool) or next((str(p) for d in ("/usr/sbin", "/sbin") if (p := Path(d) / tool).exists()),
                                      None)


def slurm_available() -> str | None:
    """None when a throw-away cluster can be started here, else the reason (for pytest.skip)."""
    missing = [t for t in DAEMONS if not _which(t)]
    if missing:
        return f"{', '.join(missing)} not found (Debian: apt-get install slurm-wlm munge)"
    if os.geteuid() != 0:
        return "slurmd must run as root to start jobs; run the slurm tests as root"
    try:
        import hydra_plugins.hydra_submitit_launcher  # noqa: F401
    except ImportError:
        return "hydra-submitit-launcher is not installed (pip install .[slurm])"
    return None


def _stop(proc: subprocess.Popen, timeout: float = 20.0) -> None:
    """SIGTERM the daemon by its PID, SIGKILL it if it is still there after ``timeout``."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if proc.poll() is not None:
            return
        proc.send_signal(sig)
        try:
            proc.wait(timeout=timeout)
            return
        except subprocess.TimeoutExpired:
            continue


class SlurmCluster:
    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="trainbench-slurm-"))
        self.root.chmod(0o755)  # munged insists on a socket folder everyone can traverse
        self.procs: dict[str, subprocess.Popen] = {}
        self.conf = self.root / "slurm.conf"
        self.node = ""
        self.cpus = 0
        self.mem_mb = 0

    # ---- set-up ---------------------------------------------------------------------------------

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        env["SLURM_CONF"] = str(self.conf)
        return env

    def run(self, *cmd: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run(list(cmd), env=self.env(), capture_output=True, text=True, check=check,
                              timeout=timeout)

    def _munge(self) -> Path:
        etc, run = self.root / "munge-etc", self.root / "munge-run"
        etc.mkdir(mode=0o700)
        run.mkdir(mode=0o755)
        key = etc / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        sock = run / "munge.socket"
        self._spawn("munged", [_which("munged"), "--foreground", f"--socket={sock}", f"--key-file={key}",
                               f"--log-file={etc / 'munged.log'}", f"--pid-file={run / 'munged.pid'}",
                               f"--seed-file={etc / 'munged.seed'}"])
        self._wait(lambda: sock.exists(), "munged", 30)
        return sock

    def _node_line(self) -> str:
        """``NodeName=<host> CPUs=.. Boards=.. SocketsPerBoard=.. CoresPerSocket=.. ThreadsPerCore=.. RealMemory=..``"""
        out = subprocess.run([_which("slurmd"), "-C"], capture_output=True, text=True, check=True,
                             timeout=60).stdout
        line = next(ln for ln in out.splitlines() if ln.startswith("NodeName="))
        fields = dict(kv.split("=", 1) for kv in line.split())
        self.node, self.cpus, self.mem_mb = fields["NodeName"], int(fields["CPUs"]), int(fields["RealMemory"])
        return line

    def _write_conf(self, munge_socket: Path) -> None:
        for d in ("state", "spool", "log", "run"):
            (self.root / d).mkdir()
        node = self._node_line()
        r = self.root
        self.conf.write_text("\n".join([
            "ClusterName=trainbench-test",
            f"SlurmctldHost={self.node}(127.0.0.1)",
            f"SlurmctldPort={free_port()}",
            f"SlurmdPort={free_port()}",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={munge_socket}",
            "SlurmUser=root",
            "SlurmdUser=root",
            f"StateSaveLocation={r / 'state'}",
            f"SlurmdSpoolDir={r / 'spool'}",
            f"SlurmctldPidFile={r / 'run' / 'slurmctld.pid'}",
            f"SlurmdPidFile={r / 'run' / 'slurmd.pid'}",
            f"SlurmctldLogFile={r / 'log' / 'slurmctld.log'}",
            f"SlurmdLogFile={r / 'log' / 'slurmd.log'}",
            # no cgroups, no accounting database: what a bare container can run
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "JobCompType=jobcomp/none",
            "SwitchType=switch/none",
            "MpiDefault=none",
            "SchedulerType=sched/backfill",
            "SchedulerParameters=sched_interval=2",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core_Memory",  # memory is a consumable resource, as on GPU clusters
            "ReturnToService=2",
            "SlurmctldTimeout=30",
            "SlurmdTimeout=60",
            "InactiveLimit=0",
            "MinJobAge=600",  # finished jobs stay visible to squeue while a test looks at them
            "KillWait=30",  # SIGTERM -> SIGKILL at a time limit or scancel: time to flush the run
            "Waittime=0",
            f"{node} NodeAddr=127.0.0.1 State=UNKNOWN",
            f"PartitionName={PARTITION} Nodes={self.node} Default=YES MaxTime={MAX_TIME_MIN} State=UP",
            "",
        ]))

    def _spawn(self, name: str, cmd: list[str | None]) -> None:
        log = open(self.root / f"{name}.out", "wb")  # noqa: SIM115 - the daemon writes to it until stop()
        self.procs[name] = subprocess.Popen([str(c) for c in cmd], stdout=log, stderr=subprocess.STDOUT,
                                            env=self.env(), start_new_session=True)
        log.close()

    def _wait(self, ready, what: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, p in self.procs.items():
                if p.poll() is not None:
                    raise RuntimeError(f"{name} exited ({p.returncode}):\n{self.log_tail(name)}")
            if ready():
                return
            time.sleep(0.3)
        raise RuntimeError(f"{what} was not ready within {timeout:.0f} s:\n{self.log_tail()}")

    def _node_idle(self) -> bool:
        p = self.run("sinfo", "--noheader", "--format=%T", check=False, timeout=20)
        return p.returncode == 0 and p.stdout.strip().rstrip("*") in ("idle", "mixed", "allocated")

    def start(self, timeout: float = 90.0) -> SlurmCluster:
        try:
            sock = self._munge()
            self._write_conf(sock)
            self._spawn("slurmctld", [_which("slurmctld"), "-D", "-i", "-f", self.conf])
            self._wait(lambda: self.run("scontrol", "ping", check=False, timeout=20).stdout.count("UP") > 0,
                       "slurmctld", timeout)
            self._spawn("slurmd", [_which("slurmd"), "-D", "-f", self.conf, "-N", self.node])
            self._wait(self._node_idle, "slurmd", timeout)
        except BaseException:
            self.stop()
            raise
        return self

    # ---- while running --------------------------------------------------------------------------

    def jobs(self) -> list[tuple[str, str, str]]:
        """(job id, state, reason) of every job the controller knows, array elements one by one."""
        out = self.run("squeue", "--noheader", "--array", "--states=all", "--format=%i|%T|%r").stdout
        return [tuple(line.split("|")) for line in out.splitlines() if line.count("|") == 2]  # type: ignore[misc]

    def live_jobs(self) -> list[tuple[str, str, str]]:
        final = {"COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "BOOT_FAIL", "DEADLINE",
                 "OUT_OF_MEMORY"}
        return [j for j in self.jobs() if j[1] not in final]

    def log_tail(self, name: str | None = None, n: int = 3000) -> str:
        names = [name] if name else list(self.procs)
        text = []
        for nm in names:
            for f in (self.root / f"{nm}.out", self.root / "log" / f"{nm}.log"):
                if f.exists():
                    text.append(f"--- {f}\n{f.read_text(errors='replace')[-n:]}")
        return "\n".join(text)

    # ---- tear-down ------------------------------------------------------------------------------

    def stop(self) -> None:
        """Cancel every job and wait for it to end (slurmstepd outlives slurmd), then stop the daemons by PID."""
        if "slurmd" in self.procs and self.procs["slurmd"].poll() is None:
            try:
                live = [j[0].split("_")[0] for j in self.live_jobs()]
                if live:
                    self.run("scancel", *sorted(set(live)), check=False)
                    deadline = time.monotonic() + 90
                    while self.live_jobs() and time.monotonic() < deadline:
                        time.sleep(1)
            except (OSError, subprocess.SubprocessError):
                pass
        for name in ("slurmd", "slurmctld", "munged"):
            p = self.procs.pop(name, None)
            if p is not None:
                _stop(p)
        if os.environ.get("TRAINBENCH_KEEP_SLURM_DIR"):
            print(f"SLURM cluster folder kept: {self.root}")
        else:
            shutil.rmtree(self.root, ignore_errors=True)


if __name__ == "__main__":
    reason = slurm_available()
    if reason:
        raise SystemExit(f"cannot start a cluster: {reason}")
    c = SlurmCluster().start()
    try:
        print(f"node {c.node}: {c.cpus} CPUs, {c.mem_mb} MB; partition {PARTITION!r}\n"
              f"export SLURM_CONF={c.conf}\nPress Enter to stop it.")
        input()
    finally:
        c.stop()
