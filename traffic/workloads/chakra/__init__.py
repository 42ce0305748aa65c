"""MLCommons Chakra execution traces: the schema (:mod:`.schema`), the length-delimited file stream
(:mod:`.stream`), a reader that checks a rank's trace (:mod:`.trace`) and the testbed's own trace
generator (:mod:`.generate`; ``python -m traffic.workloads.chakra generate --ranks 4 --out DIR``).
The replay on the fabric is testbed.workloads.chakra.plan / testbed.workloads.chakra.run (docs/chakra.md)."""
