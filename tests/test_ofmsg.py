"""OpenFlow messages from the plan (controllers/ofmsg.py): the OVS NTR selection-method group
property byte for byte, OXM headers, group-mods, flow-mods and the proxy-ARP reply frame."""
from __future__ import annotations

import struct

import pytest

from controllers import ofmsg as W
from controllers import ofplan as T
from controllers.lb import ecmp
from controllers.ofmsg import RawGroupProperty, build_arp_reply, build_flow_mod, build_group_mod
from controllers.ryu_api import arp, ethernet, ofproto_v1_5, packet
from test_controller_plan import by_purpose, doc, dp, plan_of, topo  # noqa: F401 (fixtures)
from topology import model as M

#: The NTR selection-method property for the default hash fields, written out
#: by hand from struct ntr_group_prop_selection_method and OVS's
#: oxm_put_field_array (each field: OXM header + all-ones value = mask).
EXPECTED_NTR_PROPERTY = bytes.fromhex(
    "ffff" "0055"                      # OFPGPT_EXPERIMENTER, length 85 = 40 + 45 OXM bytes (unpadded)
    "0000154d" "00000001"              # NTR_VENDOR_ID, NTRT_SELECTION_METHOD
    "00000000"                         # pad
    "68617368" "000000000000000000000000"  # "hash", NUL-padded to 16 bytes
    "0000000000000000"                 # selection_method_param
    "80001604" "ffffffff"              # ipv4_src  (class 0x8000, field 11, len 4)
    "80001804" "ffffffff"              # ipv4_dst  (field 12, len 4)
    "80001401" "ff"                    # ip_proto  (field 10, len 1)
    "80001e02" "ffff"                  # udp_src   (field 15, len 2)
    "80002002" "ffff"                  # udp_dst   (field 16, len 2)
    "80001a02" "ffff"                  # tcp_src   (field 13, len 2)
    "80001c02" "ffff"                  # tcp_dst   (field 14, len 2)
    "000000"                           # pad 85 -> 88
)



def test_ntr_property_bytes_match_ovs_layout():
    prop = W.ntr_selection_method_property(M.DEFAULT_HASH_FIELDS)
    assert len(EXPECTED_NTR_PROPERTY) == 88
    assert prop == EXPECTED_NTR_PROPERTY


def test_ntr_property_rejects_what_ovs_rejects():
    with pytest.raises(ValueError):
        W.ntr_selection_method_property(["ipv4_src"], method="random")
    with pytest.raises(ValueError):
        W.ntr_selection_method_property(["ipv4_src"], method="dp_hash")
    assert W.ntr_selection_method_property([], method="dp_hash")[2:4] == struct.pack("!H", 40)
    with pytest.raises(KeyError):
        W.oxm_hash_field_tlv("vlan_pcp")


@pytest.mark.parametrize("name", sorted(W.OXM_HASHABLE_FIELDS))
def test_oxm_headers_agree_with_os_ken(name):
    buf = bytearray()
    ofproto_v1_5.oxm_serialize_header(ofproto_v1_5.oxm_from_user_header(name), buf, 0)
    tlv = W.oxm_hash_field_tlv(name)
    assert tlv[:4] == bytes(buf)
    assert tlv[4:] == b"\xff" * W.OXM_HASHABLE_FIELDS[name][1]


def test_group_mod_serializes_with_exact_property(topo, dp):
    (group,) = plan_of(topo, "tb9c01l1").groups
    msg = build_group_mod(dp, group)
    msg.serialize()
    wire = bytes(msg.buf)
    version, msg_type, length = struct.unpack_from("!BBH", wire, 0)
    assert (version, msg_type, length) == (ofproto_v1_5.OFP_VERSION, ofproto_v1_5.OFPT_GROUP_MOD, len(wire))
    command, gtype, group_id, bucket_array_len, command_bucket_id = struct.unpack_from("!HBxIH2xI", wire, 8)
    assert (command, gtype, group_id) == (ofproto_v1_5.OFPGC_ADD, ofproto_v1_5.OFPGT_SELECT, 1)
    assert command_bucket_id == ofproto_v1_5.OFPG_BUCKET_ALL  # OVS rejects anything else for ADD
    # Buckets: len, action_array_len, bucket_id, output action, weight property.
    off = 24
    seen = []
    while off < 24 + bucket_array_len:
        blen, alen, bucket_id = struct.unpack_from("!HHI", wire, off)
        atype, _alen, port = struct.unpack_from("!HHI", wire, off + 8)
        ptype, plen, weight = struct.unpack_from("!HHH", wire, off + 8 + alen)
        assert atype == ofproto_v1_5.OFPAT_OUTPUT and ptype == ofproto_v1_5.OFPGBPT_WEIGHT and plen == 8
        seen.append((bucket_id, port, weight))
        off += blen
    assert seen == [(0, 3, ecmp.BUCKET_WEIGHT), (1, 4, ecmp.BUCKET_WEIGHT)]
    assert wire[24 + bucket_array_len:] == EXPECTED_NTR_PROPERTY


def test_raw_group_property_refuses_unpadded_bytes():
    with pytest.raises(ValueError):
        RawGroupProperty(EXPECTED_NTR_PROPERTY[:85])


def test_flow_mods_serialize(topo, dp):
    plan = plan_of(topo, "tb9c01l1")
    for flow in plan.flows:
        msg = build_flow_mod(dp, flow)
        msg.serialize()
        assert msg.priority == flow.priority and msg.cookie == T.FLOW_COOKIE
        assert (msg.instructions == []) == flow.is_drop
    arp_mod = build_flow_mod(dp, by_purpose(plan)["arp-from-tb9c01h1"])
    (action,) = arp_mod.instructions[0].actions
    assert (action.port, action.max_len) == (ofproto_v1_5.OFPP_CONTROLLER, ofproto_v1_5.OFPCML_NO_BUFFER)
    assert arp_mod.match["in_port"] == 1 and arp_mod.match["eth_type"] == 0x0806
    ecmp_mod = build_flow_mod(dp, by_purpose(plan)["route-tb9c01l2"])
    assert ecmp_mod.match["ipv4_dst"] == ("10.0.2.0", "255.255.255.0")


def test_arp_reply_frame():
    frame = build_arp_reply("02:00:00:00:01:01", "10.0.1.1", "02:00:00:00:02:02", "10.0.2.2")
    pkt = packet.Packet(frame)
    eth = pkt.get_protocol(ethernet.ethernet)
    reply = pkt.get_protocol(arp.arp)
    assert (eth.src, eth.dst, eth.ethertype) == ("02:00:00:00:02:02", "02:00:00:00:01:01", 0x0806)
    assert reply.opcode == arp.ARP_REPLY
    assert (reply.src_mac, reply.src_ip) == ("02:00:00:00:02:02", "10.0.2.2")
    assert (reply.dst_mac, reply.dst_ip) == ("02:00:00:00:01:01", "10.0.1.1")
