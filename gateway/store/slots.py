"""Redis Cluster key slots: CRC16 (XMODEM) of the key, or of its hash tag, modulo 16384.

Why here and not in cluster.py: resp.py's PreparedCommand names its slot too (computed once per cached command),
and cluster.py imports resp.py.
"""

from __future__ import annotations

from typing import Final

SLOTS: Final = 16384


def _table() -> tuple[int, ...]:
    table = []
    for byte in range(256):
        crc = byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
        table.append(crc & 0xFFFF)
    return tuple(table)


_CRC16: Final = _table()


def crc16(data: bytes) -> int:
    crc = 0
    for byte in data:
        crc = ((crc << 8) & 0xFFFF) ^ _CRC16[((crc >> 8) ^ byte) & 0xFF]
    return crc


def hash_tag(key: bytes) -> bytes:
    """The part of the key that is hashed: what lies between the first `{` and the next `}`, when that is not
    empty; the whole key otherwise (Redis' rule, so `{t:acme}:b:requests` and `{t:acme}:owners` share a slot)."""
    start = key.find(b"{")
    if start >= 0:
        end = key.find(b"}", start + 1)
        if end > start + 1:
            return key[start + 1 : end]
    return key


def key_slot(key: str | bytes) -> int:
    data = key.encode() if isinstance(key, str) else key
    return crc16(hash_tag(data)) % SLOTS
