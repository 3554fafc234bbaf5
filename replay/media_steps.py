"""Scenario steps and expectations for media (docs/REPLAY.md):

- `{"media": {"id": "1029384756102938", "file": "media/corte.png", "mime_type": "image/jpeg",
  "fault": "stall"}}` puts a file in the Graph double under a media id (`file` relative to the
  scenario; or `"png": [width, height]` for a generated PNG); `fault` one of
  replay.graph_api.MEDIA_FAULTS. The webhook that names the id carries the file's sha256.
- `{"transcripts": ["quero marcar corte amanhã", {"status": 500}, {"garbage": true}]}` queues
  the transcription double's next answers.
- the request expectation's `block_types` (`{"requests": {"block_types": ["image"]}}`): block
  types that must all appear in the messages of at least one call (replay/seen.py).
"""

import struct
import zlib
from pathlib import Path
from typing import Any

from replay.graph_api import MEDIA_FAULTS, GraphDouble

MEDIA_KEYS = {"id", "file", "png", "mime_type", "fault"}


def png_bytes(width: int, height: int) -> bytes:
    """A valid grey PNG of `width` × `height` px (8-bit greyscale, one IDAT)."""
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(
            ">I", zlib.crc32(kind + body) & 0xFFFFFFFF)
    raw = b"".join(b"\x00" + b"\x80" * width for _ in range(height))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0,
                                                               0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def media_bytes(spec: dict[str, Any], base: Path) -> bytes:
    if "png" in spec:
        width, height = spec["png"]
        return png_bytes(int(width), int(height))
    return (base / str(spec["file"])).read_bytes()


def media_step_problems(spec: Any, base: Path) -> list[str]:
    if not isinstance(spec, dict):
        return ["media takes an object"]
    problems = [f"unknown media key {k!r}" for k in spec if k not in MEDIA_KEYS]
    if not str(spec.get("id", "")).isdigit():
        problems.append("media id must be digits")
    if ("file" in spec) == ("png" in spec):
        problems.append("media needs exactly one of file, png")
    elif "file" in spec and not (base / str(spec["file"])).is_file():
        problems.append(f"media file {spec['file']!r} not found next to the scenario")
    if spec.get("fault") is not None and spec["fault"] not in MEDIA_FAULTS:
        problems.append(f"fault must be one of {', '.join(MEDIA_FAULTS)}")
    return problems


def transcripts_step_problems(value: Any) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str | dict) for v in value):
        return ["transcripts takes a list of strings (or {\"status\": N} / {\"garbage\": true})"]
    return []


def add_media(graph: GraphDouble, spec: dict[str, Any], base: Path) -> str:
    """Serve the step's file; returns its sha256 (base64)."""
    return graph.add_media(str(spec["id"]), media_bytes(spec, base),
                           str(spec.get("mime_type", "image/jpeg")), spec.get("fault"))


