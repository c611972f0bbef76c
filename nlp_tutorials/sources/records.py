"""TFRecord files and ``tf.train.Example`` records, read in plain Python.

``train --data`` checks the first record of every shard before anything else happens (before
TensorFlow even starts), so a shard from elsewhere is refused in one line naming it rather than
by a page of TensorFlow error mid-run. Both formats are small enough to read by hand:

A TFRecord file is records one after another, each framed as::

    length      8 bytes, unsigned little-endian
    check       4 bytes: the masked CRC-32C of the 8 length bytes
    data        length bytes
    check       4 bytes: the masked CRC-32C of the data

(masked: the CRC rotated right by 15 bits plus 0xa282ead8, so that a CRC of data holding CRCs
does not look like one). Random bytes fail the first check.

A ``tf.train.Example`` is protocol-buffer bytes: a sequence of fields, each a varint tag
(field number * 8 + wire type) then its value: a varint (wire type 0), 8 bytes (1), a
varint length and that many bytes (2: text, bytes, a nested message, or packed numbers), or
4 bytes (5). ``Example`` is ``{1: Features}``; ``Features`` is ``{1: entry}`` repeated, each
entry ``{1: name, 2: Feature}``; ``Feature`` is one of ``{1: BytesList, 2: FloatList,
3: Int64List}``; an ``Int64List`` is ``{1: value}``, the values packed into one field or one
field each. Fields this reader does not know are skipped, as protocol buffers require.
"""
import os
import struct

from nlp_tutorials.system.files import open_regular

LENGTH_BYTES, CHECK_BYTES = 8, 4
CRC32C_POLYNOMIAL = 0x82F63B78  # Castagnoli's, bit-reversed
FEATURE_KINDS = {1: "bytes_list", 2: "float_list", 3: "int64_list"}


class RecordError(ValueError):
    """A record that cannot be read; the message says why, for the caller to name the file."""


def _crc32c_table() -> list[int]:
    """The CRC of each byte value, so a CRC costs one lookup a byte."""
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ (CRC32C_POLYNOMIAL if crc & 1 else 0)
        table.append(crc)
    return table


CRC32C_TABLE = _crc32c_table()


def masked_crc32c(data: bytes) -> int:
    """The check a TFRecord file stores beside ``data``: its CRC-32C, masked."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc = CRC32C_TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    crc ^= 0xFFFFFFFF
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def read_first_record(path) -> bytes | None:
    """The data of the first record of the TFRecord file ``path``, both checks verified; None
    for an empty file. Raises :class:`RecordError` when the bytes are not a whole record."""
    with open_regular(path) as handle:
        header = handle.read(LENGTH_BYTES + CHECK_BYTES)
        if not header:
            return None
        if len(header) < LENGTH_BYTES + CHECK_BYTES:
            raise RecordError("not a whole TFRecord file (it ends inside the first record's "
                              "length)")
        length, check = struct.unpack("<QI", header)
        if check != masked_crc32c(header[:LENGTH_BYTES]):
            raise RecordError("not a TFRecord file (the first record's length fails its CRC "
                              "check)")
        # The length is checked against the file before it is read: reading asks for the
        # memory first, and a damaged length may claim terabytes.
        if length + CHECK_BYTES > os.fstat(handle.fileno()).st_size - len(header):
            raise RecordError(f"not a whole TFRecord file (it ends inside the first record, "
                              f"{length} bytes long)")
        data = handle.read(length)
        stored = handle.read(CHECK_BYTES)
    if struct.unpack("<I", stored)[0] != masked_crc32c(data):
        raise RecordError("damaged (the first record's data fail their CRC check)")
    return data


def _varint(data: bytes, at: int) -> tuple[int, int]:
    """(the unsigned varint starting at ``at``, where the next field starts): 7 bits a byte,
    least significant first, the top bit set on every byte but the last."""
    value = shift = 0
    while True:
        if at >= len(data) or shift > 63:
            raise RecordError("not a tf.train.Example (a number is cut short)")
        byte = data[at]
        value, at, shift = value | (byte & 0x7F) << shift, at + 1, shift + 7
        if byte < 0x80:
            return value, at


def fields(data: bytes):
    """Yield (field number, wire type, value) for each field of protocol-buffer ``data``: the
    value is an int (wire type 0) or bytes (the others)."""
    at = 0
    while at < len(data):
        tag, at = _varint(data, at)
        number, wire = tag >> 3, tag & 7
        if number == 0:
            raise RecordError("not a tf.train.Example (field number 0)")
        if wire == 0:
            value, at = _varint(data, at)
        else:
            if wire == 2:
                size, at = _varint(data, at)
            elif wire in (1, 5):
                size = 8 if wire == 1 else 4
            else:
                raise RecordError(f"not a tf.train.Example (wire type {wire})")
            if at + size > len(data):
                raise RecordError("not a tf.train.Example (a field runs past the end)")
            value, at = data[at:at + size], at + size
        yield number, wire, value


def _int64_values(int64_list: bytes) -> list[int]:
    """The values of an ``Int64List``, packed or one field each, as signed integers."""
    values = []
    for number, wire, value in fields(int64_list):
        if number != 1:
            continue
        if wire == 0:
            values.append(value)
        elif wire == 2:  # packed: varints back to back
            at = 0
            while at < len(value):
                item, at = _varint(value, at)
                values.append(item)
    return [value - (1 << 64) if value >= 1 << 63 else value for value in values]


def example_features(serialized: bytes) -> dict[str, tuple[str | None, list[int]]]:
    """``{name: (kind, values)}`` of a serialized ``tf.train.Example``: kind is "bytes_list",
    "float_list", "int64_list" (or None for an empty feature); values are read for int64 lists
    only. Raises :class:`RecordError` for bytes that are not one."""
    features = {}
    for number, wire, features_message in fields(serialized):
        if (number, wire) != (1, 2):
            continue
        for entry_number, entry_wire, entry in fields(features_message):
            if (entry_number, entry_wire) != (1, 2):
                continue
            parts = {n: value for n, w, value in fields(entry) if w == 2}
            try:
                name = parts.get(1, b"").decode("utf-8")
            except UnicodeDecodeError:
                raise RecordError("not a tf.train.Example (a feature name is not UTF-8)") from None
            kind, values = None, []
            for kind_number, kind_wire, value in fields(parts.get(2, b"")):
                if kind_wire == 2 and kind_number in FEATURE_KINDS:
                    kind = FEATURE_KINDS[kind_number]
                    values = _int64_values(value) if kind == "int64_list" else []
            features[name] = (kind, values)
    return features
