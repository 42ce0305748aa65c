"""``python -m traffic.workloads.chakra generate|show``: traffic.workloads.chakra.generate.main."""
import sys

from traffic.workloads.chakra.generate import main

sys.exit(main())
