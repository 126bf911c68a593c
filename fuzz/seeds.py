"""Writes seed inputs for the fuzz targets (bench/fuzz.sh runs it when a corpus is empty):
valid batches of every codec, alone and inside Produce requests, and one valid request of every
API and version kafka-python's message classes know (those of the suite's fuzz run,
tests/support/fuzz_frames.py), so mutation starts from inputs that reach the record walker and
every request decoder."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from support import fuzz_frames as ff  # noqa: E402
from support import kafka_wire as kw  # noqa: E402
from support import segment_format as sf  # noqa: E402


def batches() -> dict[str, bytes]:
    records = [
        (b"key-%d" % i, b"value-%d" % i * (i + 1), [("h", b"v"), ("none", None)]) for i in range(5)
    ]
    out = {}
    for codec, name in sf.CODEC_NAMES.items():
        out[name] = sf.build_record_batch(
            records, base_timestamp=1_700_000_000_000 - 10, compression=codec
        )
    return out


def frame(api_key: int, version: int, body: bytes) -> bytes:
    return kw.frame(kw.request_header(api_key, version, 7, "fuzz", flexible=False) + body)


def main(corpus: Path) -> None:
    validator = corpus / "batch_validator"
    decoder = corpus / "request_decoder"
    validator.mkdir(parents=True, exist_ok=True)
    decoder.mkdir(parents=True, exist_ok=True)
    for name, batch in batches().items():
        # byte 0 odd: the target fixes CRCs up, so mutations reach the records
        (validator / f"{name}.bin").write_bytes(b"\x01" + batch)
        (decoder / f"produce-{name}.bin").write_bytes(
            frame(kw.PRODUCE, 3, kw.produce_body("t", 0, batch))
        )
    seeds, _ = ff.seeds(ff.known_apis())
    for seed in seeds:
        (decoder / f"api{seed.api_key}-v{seed.version}.bin").write_bytes(seed.frame)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
