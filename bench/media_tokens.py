"""What a customer's photo counts in the product's estimate and the Messages double, before
and after issue 27: the base64 block's UTF-8 bytes / 4 (the text rule) against the image rule
of agent/media.py (width × height / 750, capped at 1,600). Photos are generated PNGs of
random pixels, so their files are about as large as a photo's can get at that size (a phone
JPEG is smaller: its bytes / 4 would sit between the two columns). Prints one line per size.

    .venv/bin/python bench/media_tokens.py
"""

import base64
import json
import math
import random
import struct
import zlib

from agent import media
from replay.messages_api import count_tokens


def noise_png(width: int, height: int, seed: int = 27) -> bytes:
    rng = random.Random(seed)
    rows = b"".join(b"\x00" + rng.randbytes(width) for _ in range(height))

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(
            ">I", zlib.crc32(kind + body) & 0xFFFFFFFF)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0,
                                                               0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows, 1)) + chunk(b"IEND", b""))


def main() -> None:
    print(f"{'size (px)':>12} {'file (KB)':>10} {'bytes/4 tokens':>15} {'image rule':>11}")
    for width, height in ((320, 240), (800, 600), (1200, 900), (1600, 1200), (2000, 1500)):
        data = noise_png(width, height)
        block = {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                             "data": base64.b64encode(data).decode()}}
        text_rule = math.ceil(len(json.dumps(block, sort_keys=True, separators=(",", ":"))
                                  .encode()) / 4)
        assert count_tokens(block) == media.block_tokens(block)
        print(f"{width:>5} x {height:<5} {len(data) / 1024:>10.0f} {text_rule:>15,} "
              f"{count_tokens(block):>11,}")


if __name__ == "__main__":
    main()
