"""The independent segment parser used by the integration tests accepts well-formed files and
rejects each kind of damage, so a pass of the on-disk checks means something."""

from __future__ import annotations

import struct

import pytest
from support import segment_format as sf


def batch(base: int, n: int, codec: int = sf.COMPRESSION_NONE, epoch: int = 0) -> bytes:
    records = [(f"k{base + i}".encode(), f"v{base + i}".encode() * 3, []) for i in range(n)]
    if n > 1:
        records[1] = (None, None, [("h", b"x"), ("n", None)])
    return sf.build_record_batch(
        records, base_offset=base, partition_leader_epoch=epoch, compression=codec
    )


def segment_with(sizes: list[int], base: int = 0, codec: int = sf.COMPRESSION_NONE):
    batches = []
    for n in sizes:
        batches.append(batch(base, n, codec))
        base += n
    seg = sf.build_segment(batches)
    parsed = sf.parse_segment(seg)
    index = sf.build_index(sf.expected_index_entries(parsed, 100))
    return seg, index


def test_varints_roundtrip():
    for v in [0, 1, -1, 63, -64, 64, 300, -300, 2**31, -(2**31), 2**62]:
        assert sf.decode_varint(sf.encode_varint(v), 0) == (v, len(sf.encode_varint(v)))


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
def test_batch_roundtrip_every_codec(codec):
    raw = batch(10, 5, codec)
    b = sf.parse_batch(raw, 0)
    assert b.crc_ok and b.compression == codec and b.size == len(raw)
    recs = b.records()
    assert [r.offset for r in recs] == list(range(10, 15))
    assert recs[0].key == b"k10" and recs[0].value == b"v10v10v10"
    assert recs[1].key is None and recs[1].value is None
    assert recs[1].headers == [("h", b"x"), ("n", None)]


def test_good_segment_and_index_pass():
    seg, index = segment_with([60, 30, 20, 5, 100, 1, 1])
    parsed = sf.parse_segment(seg)
    assert parsed.base_offset == 0 and parsed.last_offset == 216
    assert parsed.message_count == 217
    # entries: first batch; 60+30+20 = 110 >= 100 before the 4th batch; then 5+100 >= 100
    entries = sf.parse_index(index).entries
    starts = [b.position for b in parsed.batches]
    assert entries == [(0, starts[0]), (110, starts[3]), (215, starts[5])]
    assert starts[0] == 32
    log = sf.check_partition(
        {"segment-00000000000000000000.kfs": seg, "segment-00000000000000000000.index": index}
    )
    assert log.next_offset == 217
    assert [r.offset for r in log.records()] == list(range(217))


def flip(data: bytes, pos: int) -> bytes:
    return data[:pos] + bytes([data[pos] ^ 0x01]) + data[pos + 1 :]


@pytest.mark.parametrize(
    "damage",
    [
        "magic",
        "version",
        "flags",
        "header_base",
        "header_count",
        "footer_crc",
        "footer_last",
        "footer_magic",
        "batch_payload",
        "batch_crc",
        "truncated",
        "leader_epoch",
    ],
)
def test_segment_damage_is_caught(damage):
    seg, _ = segment_with([3, 4])
    body_start, footer_start = 32, len(seg) - 16
    if damage == "magic":
        bad = b"KAFZ" + seg[4:]
    elif damage == "version":
        bad = seg[:4] + struct.pack(">H", 2) + seg[6:]
    elif damage == "flags":
        bad = seg[:6] + struct.pack(">H", 1) + seg[8:]
    elif damage == "header_base":
        bad = seg[:8] + struct.pack(">q", 1) + seg[16:]
    elif damage == "header_count":
        bad = seg[:16] + struct.pack(">i", 6) + seg[20:]
    elif damage == "footer_crc":
        bad = flip(seg, footer_start)
    elif damage == "footer_last":
        bad = seg[:footer_start] + struct.pack(">I", struct.unpack_from(">I", seg, footer_start)[0])
        bad += struct.pack(">q", 7) + b"END!"
    elif damage == "footer_magic":
        bad = seg[:-4] + b"END?"
    elif damage == "truncated":
        bad = seg[:-20] + seg[-16:]
    else:
        # damage inside the batches, then fix the footer CRC so only the batch check can notice
        body = bytearray(seg[body_start:footer_start])
        if damage == "batch_payload":
            body[70] ^= 0x01
        elif damage == "batch_crc":
            body[17] ^= 0x01
        elif damage == "leader_epoch":
            body[8:12] = struct.pack(">i", -1)
        body = bytes(body)
        bad = seg[:body_start] + body + struct.pack(">I", sf.crc32c(body)) + seg[footer_start + 4 :]
    with pytest.raises(sf.FormatError):
        sf.parse_segment(bad)


def test_non_contiguous_batches_are_caught():
    batches = [batch(0, 3), batch(4, 2)]  # offset 3 missing
    with pytest.raises(sf.FormatError, match="does not follow"):
        sf.parse_segment(sf.build_segment(batches))


def test_index_damage_is_caught():
    seg, index = segment_with([60, 50, 10])
    parsed = sf.parse_segment(seg)
    good = sf.parse_index(index)
    sf.check_index(good, parsed)
    first, second = good.entries
    for entries in (
        [first],  # missing entry
        [first, second, (110, parsed.batches[2].position)],  # extra entry
        [first, (second[0], second[1] + 1)],  # not a batch start
        [first, (second[0] + 1, second[1])],  # wrong offset for that batch
    ):
        with pytest.raises(sf.FormatError):
            sf.check_index(sf.parse_index(sf.build_index(entries)), parsed)
    with pytest.raises(sf.FormatError):
        sf.check_index(sf.parse_index(sf.build_index(good.entries, interval=50)), parsed)
    with pytest.raises(sf.FormatError):
        sf.parse_index(index[:-1])
    with pytest.raises(sf.FormatError):
        sf.parse_index(b"IDY\x00" + index[4:])


def test_partition_gaps_and_pairing_are_caught():
    seg0, idx0 = segment_with([5])
    seg1, idx1 = segment_with([5], base=5)
    seg2, idx2 = segment_with([5], base=11)
    objs = {
        "segment-00000000000000000000.kfs": seg0,
        "segment-00000000000000000000.index": idx0,
        "segment-00000000000000000005.kfs": seg1,
        "segment-00000000000000000005.index": idx1,
    }
    assert sf.check_partition(objs).next_offset == 10
    with pytest.raises(sf.FormatError, match="previous segment"):
        sf.check_partition(
            {
                **objs,
                "segment-00000000000000000011.kfs": seg2,
                "segment-00000000000000000011.index": idx2,
            }
        )
    with pytest.raises(sf.FormatError, match="pair up"):
        sf.check_partition({k: v for k, v in objs.items() if k.endswith("5.kfs") or "0.k" in k})
    with pytest.raises(sf.FormatError, match="holds base offset"):
        sf.check_partition(
            {
                "segment-00000000000000000001.kfs": seg0,
                "segment-00000000000000000001.index": idx0,
            }
        )
    with pytest.raises(sf.FormatError, match="starts at"):
        sf.check_partition(
            {
                "segment-00000000000000000005.kfs": seg1,
                "segment-00000000000000000005.index": idx1,
            }
        )
