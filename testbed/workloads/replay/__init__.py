"""What the SimAI and Chakra replays share: :mod:`program` (programs of compute waits and communicator ops,
their simulated timeline) and :mod:`run` (a timeline on the agents and its figures)."""
