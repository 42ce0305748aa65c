"""The Chakra execution-trace schema as protobuf message classes, built at import time (no protoc).

Chakra (MLCommons, https://github.com/mlcommons/chakra, MIT licence) publishes its
execution-trace format as ``schema/protobuf/et_def.proto`` (package ``ChakraProtoMsg``,
proto3). This module declares the part of it a replay reads, field for field with the
published names, numbers and types, as a ``FileDescriptorProto`` and lets the ``protobuf``
package make the classes (``google.protobuf.message_factory``): no generated ``*_pb2.py``,
so any protobuf runtime >= 4.21 reads the traces. ``et_def.proto`` next to this file is the
same declaration as ``.proto`` text (a unit test keeps the two equal).

What is declared: ``AttributeProto`` (every value of its ``oneof value``: the 15 scalar
types and their ``*List`` messages), ``GlobalMetadata``, ``NodeType``,
``CollectiveCommType``, ``Node`` (fields 1..10) and ``IOInfo``. Left out: ``Tensor`` (no
field refers to it) and ``Node.storage`` (field 11, the storage-operation messages): a
trace carrying it still parses (protobuf keeps the field as unknown bytes) and its
STORAGE_NODEs are refused by the replay like every node type it does not run.

Public names: :data:`Node`, :data:`GlobalMetadata`, :data:`AttributeProto`, :data:`IOInfo`,
:data:`NODE_TYPES` / :data:`COMM_TYPES` (enum name -> number) and their inverses
:data:`NODE_TYPE_NAMES` / :data:`COMM_TYPE_NAMES`.
"""
from __future__ import annotations

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

PACKAGE = "ChakraProtoMsg"
FILE_NAME = "et_def.proto"

#: the scalar types of AttributeProto's ``oneof value``, in field order: ``<t>_val`` = 3 + 2i,
#: ``<t>_list`` (message ``<T>List``, ``repeated <t> values = 1``) = 4 + 2i
ATTR_TYPES = ("double", "float", "int32", "int64", "uint32", "uint64", "sint32", "sint64", "fixed32",
              "fixed64", "sfixed32", "sfixed64", "bool", "string", "bytes")

#: enum NodeType (et_def.proto)
NODE_TYPES = {"INVALID_NODE": 0, "METADATA_NODE": 1, "MEM_LOAD_NODE": 2, "MEM_STORE_NODE": 3, "COMP_NODE": 4,
              "COMM_SEND_NODE": 5, "COMM_RECV_NODE": 6, "COMM_COLL_NODE": 7, "STORAGE_NODE": 8,
              "BATCH_NODE": 9, "CHECKPOINT_NODE": 10}
#: enum CollectiveCommType (et_def.proto)
COMM_TYPES = {"ALL_REDUCE": 0, "REDUCE": 1, "ALL_GATHER": 2, "GATHER": 3, "SCATTER": 4, "BROADCAST": 5,
              "ALL_TO_ALL": 6, "REDUCE_SCATTER": 7, "REDUCE_SCATTER_BLOCK": 8, "BARRIER": 9}
NODE_TYPE_NAMES = {v: k for k, v in NODE_TYPES.items()}
COMM_TYPE_NAMES = {v: k for k, v in COMM_TYPES.items()}

_F = descriptor_pb2.FieldDescriptorProto
_SCALAR = {"double": _F.TYPE_DOUBLE, "float": _F.TYPE_FLOAT, "int32": _F.TYPE_INT32, "int64": _F.TYPE_INT64,
           "uint32": _F.TYPE_UINT32, "uint64": _F.TYPE_UINT64, "sint32": _F.TYPE_SINT32, "sint64": _F.TYPE_SINT64,
           "fixed32": _F.TYPE_FIXED32, "fixed64": _F.TYPE_FIXED64, "sfixed32": _F.TYPE_SFIXED32,
           "sfixed64": _F.TYPE_SFIXED64, "bool": _F.TYPE_BOOL, "string": _F.TYPE_STRING, "bytes": _F.TYPE_BYTES}


def list_message(scalar: str) -> str:
    """The ``*List`` message of a scalar type: ``uint64`` -> ``Uint64List``."""
    return scalar[0].upper() + scalar[1:] + "List"


#: message -> its fields (name, number, type: a scalar name, a message or an enum of this file,
#: repeated, oneof name or ""), in the order et_def.proto declares them
MESSAGES: dict[str, tuple[tuple[str, int, str, bool, str], ...]] = {
    "AttributeProto": (("name", 1, "string", False, ""), ("doc_string", 2, "string", False, ""))
    + tuple(f for i, t in enumerate(ATTR_TYPES)
            for f in ((f"{t}_val", 3 + 2 * i, t, False, "value"),
                      (f"{t}_list", 4 + 2 * i, list_message(t), False, "value"))),
    **{list_message(t): (("values", 1, t, True, ""),) for t in ATTR_TYPES},
    "GlobalMetadata": (("version", 1, "string", False, ""), ("attr", 2, "AttributeProto", True, "")),
    "Node": (("id", 1, "uint64", False, ""), ("name", 2, "string", False, ""), ("type", 3, "NodeType", False, ""),
             ("ctrl_deps", 4, "uint64", True, ""), ("data_deps", 5, "uint64", True, ""),
             ("start_time_micros", 6, "uint64", False, ""), ("duration_micros", 7, "uint64", False, ""),
             ("inputs", 8, "IOInfo", False, ""), ("outputs", 9, "IOInfo", False, ""),
             ("attr", 10, "AttributeProto", True, "")),
    "IOInfo": (("values", 1, "string", False, ""), ("shapes", 2, "string", False, ""),
               ("types", 3, "string", False, "")),
}
ENUMS = {"NodeType": NODE_TYPES, "CollectiveCommType": COMM_TYPES}


def file_descriptor() -> descriptor_pb2.FileDescriptorProto:
    """The FileDescriptorProto of the declared schema (module docstring)."""
    fd = descriptor_pb2.FileDescriptorProto(name=FILE_NAME, package=PACKAGE, syntax="proto3")
    for name, values in ENUMS.items():
        e = fd.enum_type.add(name=name)
        for v_name, number in values.items():
            e.value.add(name=v_name, number=number)
    for name, fields in MESSAGES.items():
        m = fd.message_type.add(name=name)
        oneofs: list[str] = []
        for f_name, number, typ, repeated, oneof in fields:
            f = m.field.add(name=f_name, number=number,
                            label=_F.LABEL_REPEATED if repeated else _F.LABEL_OPTIONAL)
            if typ in _SCALAR:
                f.type = _SCALAR[typ]
            else:
                f.type = _F.TYPE_ENUM if typ in ENUMS else _F.TYPE_MESSAGE
                f.type_name = f".{PACKAGE}.{typ}"
            if oneof:
                if oneof not in oneofs:
                    oneofs.append(oneof)
                    m.oneof_decl.add(name=oneof)
                f.oneof_index = oneofs.index(oneof)
    return fd


def _classes() -> dict[str, type]:
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file_descriptor())
    return {name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{PACKAGE}.{name}"))
            for name in MESSAGES}


_CLASSES = _classes()
Node = _CLASSES["Node"]
GlobalMetadata = _CLASSES["GlobalMetadata"]
AttributeProto = _CLASSES["AttributeProto"]
IOInfo = _CLASSES["IOInfo"]


def attr_value(attr):
    """The Python value an AttributeProto holds (a list for ``*_list`` values), or None when it holds none."""
    which = attr.WhichOneof("value")
    if which is None:
        return None
    v = getattr(attr, which)
    return list(v.values) if which.endswith("_list") else v
