"""Controller records the unit tests share (import as ``from controller_fixtures import ...``; pytest puts
``tests/`` on sys.path for the unit tests, as for shared_files)."""
from controllers import contract

#: controller.settings.json of a run with per-flow ECMP, no gray-link detection and no congestion loop
ECMP_SETTINGS = contract.ControllerSettings(
    run_id="tb0000", topology_file="/x/topology.json", ready_file="/x/controller.ready",
    events_file="/x/controller.events.jsonl", stats_file="/x/controller.stats.jsonl", stats_period_ms=0,
    load_balance=contract.LoadBalanceSettings("ecmp", {}, None),
    failover=contract.FailoverSettings(gray_detect=False, gray_loss_threshold=0.005, gray_window_ms=10_000,
                                       gray_min_lost_pkts=25),
    loop_settings_file=None)
