from setuptools import find_packages, setup

setup(
    name="aifabric-testbed",
    version="0.1.0",
    description="Packet-level testbed for AI training cluster networks: "
    "Mininet spine-leaf fabric, os-ken controller, RoCEv2-style collectives.",
    python_requires=">=3.9",
    packages=find_packages(include=["testbed*", "controllers*", "dataplane*", "traffic*", "topology*"]),
    # the shipped flow-size CDFs of workload.open_loop (testbed/workloads/open_loop/cdfs/README.md)
    package_data={"testbed.workloads.open_loop": ["cdfs/*.txt", "cdfs/README.md"]},
    # every third-party package topology/, traffic/, controllers/ and testbed/ import (Mininet, Open
    # vSwitch and python3-nftables come from the distribution: scripts/install); pins: requirements.txt
    install_requires=[
        "os-ken>=4.2",
        "ovs>=2.8",
        "scapy>=2.5",
        "numpy>=1.24",
        "pandas>=2.0",
        "pyroute2>=0.9",
        "PyYAML>=6.0",
        "pydantic>=2.0",
        "typing_extensions>=4.6",
        "psutil>=5.9",
        "networkx>=3.0",
        "pyarrow>=14",
        "matplotlib>=3.7",
        "protobuf>=4.22",
    ],
    entry_points={"console_scripts": ["testbed=testbed.cli:main"]},
)
