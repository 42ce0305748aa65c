"""One fabric over several servers on Mininet's cluster engine (docs/cluster.md): placement, engine,
per-server cleanup, and a lab of servers on one machine (servers.LocalServers)."""
