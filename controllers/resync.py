"""Bring one switch to its plan without disturbing what is already right.

A (re)connecting switch may already hold the plan: the bridges are
fail-secure, so they keep every flow and group while the controller is away
and a restarted controller finds them in place. Wiping and reinstalling
would drop packets on installed paths; this module instead compares what the
switch reports (an OpenFlow 1.5 flow-description dump and the group ids of a group-stats dump)
with the plan and returns only the differences:

* a planned flow already present with the same match, priority, cookie and
  actions is left alone; a missing one is added; one whose actions or cookie
  differ is replaced by an ``OFPFC_ADD`` of the same match and priority (the
  switch swaps it atomically: OpenFlow 1.5.1, 6.4 "Flow Table Modification
  Messages", an add overlapping an identical match and priority replaces it);
* a planned group that exists is sent as ``OFPGC_MODIFY`` (atomic, never an
  ``OFPGC_ADD``, which would fail with ``OFPGMFC_GROUP_EXISTS``), a missing
  one as ``OFPGC_ADD``;
* flows and groups the plan does not have are deleted (``OFPFC_DELETE_STRICT``
  by table, priority and match; groups by id), after the planned entries are
  in place.

Pure data in, pure data out: no os-ken objects beyond reading parsed replies.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Optional, Sequence, Set, Tuple

from controllers.ofplan import FLOW_COOKIE, Action, FlowPlan, GroupPlan, SwitchPlan

#: The only table the plan uses.
PLAN_TABLE_ID = 0
#: OpenFlow reserved port "controller" (OFPP_CONTROLLER, OpenFlow 1.5.1 table 7.2.1).
OFPP_CONTROLLER = 0xFFFFFFFD
_ALL_ONES_MASKS = {"255.255.255.255", "ff:ff:ff:ff:ff:ff"}

#: A flow's identity on a switch: (table_id, priority, match as sorted (field, value) pairs).
FlowKey = Tuple[int, int, Tuple[Tuple[str, Any], ...]]


def normalize_match(items: Iterable[Tuple[str, Any]]) -> Tuple[Tuple[str, Any], ...]:
    """Match fields as a sorted tuple; an address masked with all ones becomes the plain address.

    ``items`` are os-ken ``OFPMatch.items()`` pairs or a plan's ``FlowPlan.match``;
    masked values are ``(value, mask)`` tuples.
    """
    out = []
    for name, value in items:
        if isinstance(value, (tuple, list)) and len(value) == 2:
            v, mask = value
            value = v if mask in _ALL_ONES_MASKS else (v, mask)
        out.append((name, value))
    return tuple(sorted(out, key=lambda kv: kv[0]))


def flow_key(table_id: int, priority: int, match_items: Iterable[Tuple[str, Any]]) -> FlowKey:
    """Identity of a flow entry (OpenFlow: table, priority and match; the cookie is not part of it)."""
    return (int(table_id), int(priority), normalize_match(match_items))


def planned_key(flow: FlowPlan) -> FlowKey:
    return flow_key(PLAN_TABLE_ID, flow.priority, flow.match)


def observed_actions(instructions: Sequence[Any]) -> Optional[Tuple[Action, ...]]:
    """A switch-reported instruction list in plan form (``("output", port)`` etc.), or None when it
    holds anything the plan never installs (then the flow is replaced, which is always safe)."""
    actions: List[Action] = []
    for inst in instructions or ():
        if type(inst).__name__ != "OFPInstructionActions" or getattr(inst, "type", None) != 4:  # OFPIT_APPLY_ACTIONS
            return None
        for act in inst.actions:
            kind = type(act).__name__
            if kind == "OFPActionOutput":
                actions.append(("controller", act.max_len) if act.port == OFPP_CONTROLLER else ("output", act.port))
            elif kind == "OFPActionGroup":
                actions.append(("group", act.group_id))
            else:
                return None
    return tuple(actions)


@dataclass(frozen=True)
class SeenFlow:
    """One entry of a switch's flow-description dump."""

    table_id: int
    priority: int
    cookie: int
    match: Any  # the parsed os-ken OFPMatch, reused verbatim to delete the entry
    actions: Optional[Tuple[Action, ...]]

    @property
    def key(self) -> FlowKey:
        return flow_key(self.table_id, self.priority, self.match.items())


@dataclass
class SyncPlan:
    """What to send to one switch, in this order: group adds and modifies, flow adds,
    flow deletes, group deletes, then a barrier."""

    groups_add: List[GroupPlan] = field(default_factory=list)
    groups_modify: List[GroupPlan] = field(default_factory=list)
    flows_add: List[FlowPlan] = field(default_factory=list)
    flows_delete: List[SeenFlow] = field(default_factory=list)
    groups_delete: List[int] = field(default_factory=list)
    counts: Dict[str, int] = field(default_factory=dict)

    @property
    def changes(self) -> int:
        return len(self.groups_add) + len(self.flows_add) + len(self.flows_delete) + len(self.groups_delete)


def plan_sync(plan: SwitchPlan, seen_flows: Sequence[SeenFlow], seen_group_ids: Set[int]) -> SyncPlan:
    """Differences between the switch's state and ``plan`` (see module docstring).

    Returns a :class:`SyncPlan` whose ``counts`` has ``flows_unchanged``,
    ``flows_added``, ``flows_replaced``, ``flows_removed``, ``groups_added``,
    ``groups_modified``, ``groups_removed``. Two seen flows with one key (a
    switch never reports that) count the later one.
    """
    seen: Dict[FlowKey, SeenFlow] = {f.key: f for f in seen_flows}
    sync = SyncPlan()
    planned_groups = {g.group_id for g in plan.groups}
    for group in plan.groups:
        (sync.groups_modify if group.group_id in seen_group_ids else sync.groups_add).append(group)
    unchanged = replaced = 0
    planned_keys = set()
    for flow in plan.flows:
        key = planned_key(flow)
        planned_keys.add(key)
        have = seen.get(key)
        if have is not None and have.actions == tuple(flow.actions) and have.cookie == FLOW_COOKIE:
            unchanged += 1
            continue
        replaced += have is not None
        sync.flows_add.append(flow)
    sync.flows_delete = [f for k, f in seen.items() if k not in planned_keys]
    sync.groups_delete = sorted(g for g in seen_group_ids if g not in planned_groups)
    sync.counts = {
        "flows_unchanged": unchanged, "flows_added": len(sync.flows_add) - replaced, "flows_replaced": replaced,
        "flows_removed": len(sync.flows_delete), "groups_added": len(sync.groups_add),
        "groups_modified": len(sync.groups_modify), "groups_removed": len(sync.groups_delete),
    }
    return sync
