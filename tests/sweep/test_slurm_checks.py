"""The SLURM launcher's judgement without a cluster: parsing scontrol, requests that can never run, waiting."""

from __future__ import annotations

import pytest

pytest.importorskip("hydra_plugins.hydra_submitit_launcher", reason="the slurm extra (pip install .[slurm])")

from trainbench.sweep.slurm_checks import (  # noqa: E402
    MAYBE_NEVER_REASONS,
    NEVER_REASONS,
    Node,
    Partition,
    Request,
    describe_waiting,
    parse_gres_gpus,
    parse_mem_mb,
    parse_scontrol,
    parse_time_min,
    unmet,
)

# `scontrol show node -o` / `show partition -o` of a small cluster: a 2-CPU CPU node and two 4-GPU nodes
NODES = """\
NodeName=vm Arch=x86_64 CoresPerSocket=2  CPUAlloc=0 CPUEfctv=2 CPUTot=2 CPULoad=0.40 AvailableFeatures=(null) ActiveFeatures=(null) Gres=(null) NodeAddr=127.0.0.1 NodeHostName=vm Version=22.05.8 OS=Linux 6.18.44-fc-v657 #1 SMP PREEMPT_DYNAMIC @0  RealMemory=24105 AllocMem=0 FreeMem=20395 Sockets=1 Boards=1 State=IDLE ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A Partitions=debug  BootTime=2026-11-30T18:57:55 CfgTRES=cpu=2,mem=24105M,billing=2 AllocTRES=
NodeName=g1 CPUEfctv=64 CPUTot=64 AvailableFeatures=h100,ib Gres=gpu:h100:4(S:0-1) RealMemory=515000 MemSpecLimit=15000 State=MIXED Partitions=gpu,long
NodeName=g2 CPUEfctv=64 CPUTot=64 AvailableFeatures=h100,ib Gres=gpu:h100:4(S:0-1) RealMemory=515000 State=IDLE Partitions=gpu,long
"""
PARTITIONS = """\
PartitionName=debug AllowGroups=ALL Default=YES MaxNodes=UNLIMITED MaxTime=00:30:00 MinNodes=0 Nodes=vm State=UP MaxCPUsPerNode=UNLIMITED TRES=cpu=2,mem=24105M,node=1,billing=2
PartitionName=gpu Default=NO MaxNodes=1 MaxTime=1-00:00:00 Nodes=g[1-2] State=UP MaxCPUsPerNode=32 MaxMemPerNode=UNLIMITED
PartitionName=long Default=NO MaxNodes=UNLIMITED MaxTime=UNLIMITED Nodes=g[1-2] State=UP
"""


def _cluster() -> dict[str, Partition]:
    nodes = [(Node.from_scontrol(d), d["Partitions"].split(",")) for d in parse_scontrol(NODES)]
    parts = {}
    for d in parse_scontrol(PARTITIONS):
        name = d["PartitionName"]
        parts[name] = Partition(name, [n for n, p in nodes if name in p], default=d["Default"] == "YES",
                                max_time_min=parse_time_min(d["MaxTime"]),
                                max_nodes=int(d["MaxNodes"]) if d["MaxNodes"].isdigit() else None,
                                max_cpus_per_node=int(d["MaxCPUsPerNode"]) if d.get("MaxCPUsPerNode", "").isdigit()
                                else None)
    return parts


def _request(**params) -> Request:
    base = {"partition": "debug", "nodes": 1, "tasks_per_node": 1, "cpus_per_task": 1, "mem_gb": 1,
            "gpus_per_node": 0, "timeout_min": 10, "additional_parameters": {}}
    return Request.from_params({**base, **params})


def test_scontrol_lines_keep_values_with_spaces_and_equals_signs():
    (vm, *_) = parse_scontrol(NODES)
    assert vm["OS"] == "Linux 6.18.44-fc-v657 #1 SMP PREEMPT_DYNAMIC @0"
    assert vm["CfgTRES"] == "cpu=2,mem=24105M,billing=2" and vm["RealMemory"] == "24105"
    assert vm["AllocTRES"] == ""


@pytest.mark.parametrize(("text", "minutes"), [("00:30:00", 30), ("1-00:00:00", 1440), ("2-12:30:00", 3630),
                                               ("45", 45), ("30:30", 30.5), ("UNLIMITED", None)])
def test_slurm_time_limits(text, minutes):
    assert parse_time_min(text) == minutes


def test_memory_sizes_and_gres():
    assert [parse_mem_mb(v) for v in ("4096", "4G", "4GB", "512M", "1T", "junk")] == [4096, 4096, 4096, 512,
                                                                                      1048576, None]
    assert parse_gres_gpus("gpu:h100:4(S:0-1),gpu:2,shard:8") == {"h100": 4, "": 2}
    assert parse_gres_gpus("(null)") == {} and parse_gres_gpus("gpu") == {"": 1}


def test_nodes_are_read_with_their_usable_memory_gpus_and_features():
    parts = _cluster()
    g1 = parts["gpu"].nodes[0]
    assert (g1.cpus, g1.mem_mb, g1.gpus, g1.features) == (64, 500000, {"h100": 4}, {"h100", "ib"})
    assert [n.name for n in parts["debug"].nodes] == ["vm"] and parts["debug"].default
    assert parts["gpu"].cpus(g1) == 32  # MaxCPUsPerNode


def test_a_request_that_fits_is_not_stopped():
    parts = _cluster()
    assert unmet(_request(), parts) is None
    assert unmet(_request(partition=None), parts) is None  # the default partition
    assert unmet(_request(partition="gpu", cpus_per_task=32, mem_gb=400, gpus_per_node=4), parts) is None
    assert unmet(_request(partition="gpu", gres="gpu:h100:2", cpus_per_task=8), parts) is None
    assert unmet(_request(partition="long", nodes=2, timeout_min=10_000), parts) is None
    assert unmet(_request(partition="debug,gpu", gpus_per_node=1), parts) is None  # the second one can


def test_the_launcher_defaults_on_a_small_node_name_the_request_and_the_offer():
    msg = unmet(_request(cpus_per_task=8, mem_gb=64, gpus_per_node=1, timeout_min=240), _cluster())
    assert msg is not None
    for part in ("8 CPUs, 64 GB of memory and 1 GPU on one node for 4 h 00 min", "partition 'debug'",
                 "hydra.launcher.cpus_per_task=8", "hydra.launcher.mem_gb=64", "hydra.launcher.gpus_per_node=1",
                 "hydra.launcher.timeout_min=240", "its time limit is 30 min",
                 "1 node with at most 2 CPUs, 23.5 GB of memory and no GPU",
                 "It would fit partitions 'gpu' and 'long'"):
        assert part in msg, (part, msg)


@pytest.mark.parametrize(("params", "expected", "absent"), [
    ({"cpus_per_task": 3}, ["3 CPUs", "hydra.launcher.cpus_per_task=3", "at most 2 CPUs"], ["mem_gb"]),
    ({"mem_gb": 24}, ["24 GB of memory", "hydra.launcher.mem_gb=24", "23.5 GB"], ["cpus_per_task"]),
    ({"mem_gb": None, "mem_per_cpu": "16G", "cpus_per_task": 2}, ["32 GB of memory", "hydra.launcher.mem_per_cpu=16G"], []),
    ({"timeout_min": 31}, ["for 31 min", "its time limit is 30 min"], ["CPUs,"]),
    ({"partition": "gpu", "cpus_per_task": 33}, ["at most 32 CPUs"], []),  # the partition's MaxCPUsPerNode
    ({"partition": "gpu", "gpus_per_node": 8}, ["8 GPUs", "4 GPUs (h100)"], []),
    ({"partition": "gpu", "gres": "gpu:a100:1"}, ["1 a100 GPU", "hydra.launcher.gres=gpu:a100:1"], []),
    ({"partition": "gpu", "nodes": 2}, ["at most 1 of its nodes", "hydra.launcher.nodes=2"], []),
    ({"partition": "long", "nodes": 3}, ["only 2 of its nodes can hold one"], []),
    ({"partition": "gpu", "constraint": "a100"}, ["features a100", "hydra.launcher.constraint=a100"], []),
    ({"additional_parameters": {"cpus-per-task": 4}}, ["4 CPUs"], []),
])
def test_requests_no_node_can_meet(params, expected, absent):
    msg = unmet(_request(**params), _cluster())
    assert msg is not None, params
    for part in expected:
        assert part in msg, (part, msg)
    for part in absent:
        assert part not in msg, (part, msg)


def test_an_unknown_partition_lists_the_partitions():
    msg = unmet(_request(partition="h100"), _cluster())
    assert msg is not None and "'h100'" in msg and "does not exist" in msg
    assert "'debug', 'gpu' and 'long'" in msg


def test_pending_reasons_split_into_never_and_waiting():
    assert {"PartitionConfig", "PartitionTimeLimit", "BadConstraints"} <= set(NEVER_REASONS)
    assert "Priority" not in NEVER_REASONS and "Resources" not in NEVER_REASONS
    assert {"ReqNodeNotAvail", "PartitionNodeLimit"} == MAYBE_NEVER_REASONS
    text = describe_waiting({"1_0": ("RUNNING", "None"), "1_1": ("PENDING", "Resources"),
                             "1_2": ("PENDING", "Resources"), "1_3": ("PENDING", "Priority")})
    assert text == ("4 job(s): 1 running, 3 pending (2 Resources: waiting for free CPUs, memory or GPUs, "
                    "1 Priority: other jobs come first)")
