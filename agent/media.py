"""Media that reaches the model: the bounds, how a file is recognised, how its blocks are stored,
counted, pruned and inlined into a request. The one home of these rules (ARCHITECTURE.md,
"Where each rule lives"); the Messages double (replay/messages_api.py) enforces the same
bounds and counts by the same token rules. Pure: no I/O.

Bounds (Anthropic's published limits for the Messages API, Sources: Anthropic §7): an image at
most 5 MB (decoded) and 8,000 px a side, of JPEG, PNG, GIF or WebP; a PDF at most 32 MB and 100
pages. A voice note at most 25 MB (the upload limit OpenAI
documents for `POST /v1/audio/transcriptions`, Sources: OpenAI §1).

Token rules (the product's estimate and the double's model; not Anthropic's bill):
- an image: ceil(width × height / 750), capped at 1,600 (Anthropic's published approximation;
  a larger image is resized by the API to about 1.15 megapixels, hence the cap);
- a PDF page: 2,000 (the page as an image at the cap, 1,600, plus 400 for its extracted text;
  Anthropic quotes 1,500 to 3,000 text tokens per page plus the image, this is a stated
  middle, not a measurement).
A photo of 1,600 × 1,200 px therefore counts 1,600 tokens; one of 800 × 600 counts 640.

Stored form: the message row holds `{"type": "image" | "document", "source": {"type":
"stored_media", "media_file_id": N, "media_type": ..., "width"/"height" or "pages", "bytes"}}`
and the bytes live in `media_file` (storage/media.py) until the prune boundary passes the
message; `inline` turns that into the API's base64 block, or into a short note when the bytes
are gone.
"""

import base64
import math
import re
import struct
from collections.abc import Callable
from typing import Any

Block = dict[str, Any]

MAX_IMAGE_BYTES = 5 * 1024 * 1024
MAX_IMAGE_SIDE = 8000
MAX_PDF_BYTES = 32 * 1024 * 1024
MAX_PDF_PAGES = 100
MAX_AUDIO_BYTES = 25 * 1024 * 1024
IMAGE_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp")
DOCUMENT_TYPES = ("application/pdf",)
MEDIA_BLOCK_TYPES = ("image", "document")
IMAGE_TOKEN_DIVISOR = 750
IMAGE_TOKEN_CAP = 1600
PDF_PAGE_TOKENS = 2000
STORED_SOURCE = "stored_media"
OMITTED_PREFIX = "[media omitted:"


class MediaRejected(ValueError):
    """A file the model cannot take. `reason`: too_large, unsupported_type, corrupt,
    too_many_pages, too_wide. The message is English for logs; `customer_note` for the agent."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


def image_tokens(width: int, height: int) -> int:
    """Tokens of one image under the stated rule (module docstring)."""
    return min(IMAGE_TOKEN_CAP, math.ceil(max(width, 1) * max(height, 1) / IMAGE_TOKEN_DIVISOR))


def pdf_tokens(pages: int) -> int:
    """Tokens of one PDF under the stated rule: PDF_PAGE_TOKENS per page."""
    return max(pages, 1) * PDF_PAGE_TOKENS


def image_size(data: bytes) -> tuple[str, int, int]:
    """(media_type, width, height) read from the file's own header (JPEG SOFn, PNG IHDR, GIF
    logical screen, WebP VP8/VP8L/VP8X); the declared mime type is not trusted. Raises
    MediaRejected("corrupt" or "unsupported_type")."""
    try:
        if data.startswith(b"\x89PNG\r\n\x1a\n") and data[12:16] == b"IHDR":
            width, height = struct.unpack(">II", data[16:24])
            return _sized("image/png", width, height)
        if data[:6] in (b"GIF87a", b"GIF89a"):
            width, height = struct.unpack("<HH", data[6:10])
            return _sized("image/gif", width, height)
        if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
            return _sized("image/webp", *_webp_size(data))
        if data[:2] == b"\xff\xd8":
            return _sized("image/jpeg", *_jpeg_size(data))
    except (struct.error, IndexError) as exc:
        raise MediaRejected("corrupt", "the image header is truncated") from exc
    raise MediaRejected("unsupported_type", "not a JPEG, PNG, GIF or WebP image")


def _sized(kind: str, width: int, height: int) -> tuple[str, int, int]:
    if width <= 0 or height <= 0:
        raise MediaRejected("corrupt", "the image has no size")
    return kind, width, height


def _jpeg_size(data: bytes) -> tuple[int, int]:
    index = 2
    while index + 9 < len(data):
        if data[index] != 0xFF:
            raise MediaRejected("corrupt", "bad JPEG marker")
        marker = data[index + 1]
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:
            index += 2
            continue
        length = struct.unpack(">H", data[index + 2:index + 4])[0]
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            height, width = struct.unpack(">HH", data[index + 5:index + 9])
            return width, height
        index += 2 + length
    raise MediaRejected("corrupt", "no JPEG frame header")


def _webp_size(data: bytes) -> tuple[int, int]:
    chunk = data[12:16]
    if chunk == b"VP8X":
        width = 1 + int.from_bytes(data[24:27], "little")
        height = 1 + int.from_bytes(data[27:30], "little")
        return width, height
    if chunk == b"VP8L":
        bits = int.from_bytes(data[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8 ":
        width, height = struct.unpack("<HH", data[26:30])
        return width & 0x3FFF, height & 0x3FFF
    raise MediaRejected("corrupt", "unknown WebP chunk")


_PDF_PAGE = re.compile(rb"/Type\s*/Page(?![a-zA-Z])")


def pdf_pages(data: bytes) -> int:
    """Pages of a PDF: its `/Type /Page` objects (not `/Pages`). Raises MediaRejected("corrupt")
    for a file without the `%PDF-` header or without a page."""
    if not data.startswith(b"%PDF-"):
        raise MediaRejected("corrupt", "not a PDF file")
    pages = len(_PDF_PAGE.findall(data))
    if pages == 0:
        raise MediaRejected("corrupt", "a PDF without pages")
    return pages


def check_file(data: bytes, declared_type: str) -> Block:
    """The stored source fields of a file the model may take (media_type, width/height or
    pages, bytes), or MediaRejected. Images are recognised by their header; a PDF by its own."""
    declared = declared_type.split(";")[0].strip().lower()
    if declared in DOCUMENT_TYPES:
        if len(data) > MAX_PDF_BYTES:
            raise MediaRejected("too_large", f"{len(data)} bytes; at most {MAX_PDF_BYTES}")
        pages = pdf_pages(data)
        if pages > MAX_PDF_PAGES:
            raise MediaRejected("too_many_pages", f"{pages} pages; at most {MAX_PDF_PAGES}")
        return {"media_type": "application/pdf", "pages": pages, "bytes": len(data)}
    if not declared.startswith("image/"):
        raise MediaRejected("unsupported_type", f"{declared or 'no type'}")
    if len(data) > MAX_IMAGE_BYTES:
        raise MediaRejected("too_large", f"{len(data)} bytes; at most {MAX_IMAGE_BYTES}")
    kind, width, height = image_size(data)
    if max(width, height) > MAX_IMAGE_SIDE:
        raise MediaRejected("too_wide", f"{width}x{height} px; at most {MAX_IMAGE_SIDE} a side")
    return {"media_type": kind, "width": width, "height": height, "bytes": len(data)}


def stored_block(media_file_id: int, fields: Block) -> Block:
    """The block stored in the message row for a checked file (`check_file`'s fields)."""
    kind = "document" if fields["media_type"] in DOCUMENT_TYPES else "image"
    return {"type": kind, "source": {"type": STORED_SOURCE, "media_file_id": media_file_id,
                                     **fields}}


def is_media(block: Block) -> bool:
    return block.get("type") in MEDIA_BLOCK_TYPES


def block_tokens(block: Block) -> int | None:
    """Tokens of a media block (stored or base64) under the stated rules; None for any other
    block. A base64 block is measured from its bytes; an unreadable one counts the cap."""
    if not is_media(block):
        return None
    source = block.get("source") or {}
    if source.get("type") == STORED_SOURCE:
        if block["type"] == "document":
            return pdf_tokens(int(source.get("pages", 1)))
        return image_tokens(int(source.get("width", 1)), int(source.get("height", 1)))
    try:
        data = base64.b64decode(str(source.get("data", "")), validate=True)
        if block["type"] == "document":
            return pdf_tokens(pdf_pages(data))
        _, width, height = image_size(data)
        return image_tokens(width, height)
    except (ValueError, MediaRejected):
        return IMAGE_TOKEN_CAP


def describe(block: Block) -> str:
    """What a media block held, for the note that replaces it: "a photo (image/jpeg, 800x600)"."""
    source = block.get("source") or {}
    if block.get("type") == "document":
        return f"a PDF document ({source.get('pages', '?')} page(s))"
    return f"a photo ({source.get('media_type', 'image')}, " \
           f"{source.get('width', '?')}x{source.get('height', '?')})"


def omitted_note(block: Block) -> Block:
    """The text block that replaces a media block once the prune boundary passed it (or its
    bytes are gone): deterministic, so a pruned prefix stays cacheable."""
    return {"type": "text", "text": f"{OMITTED_PREFIX} the customer sent {describe(block)}; "
                                    "it is no longer shown]"}


def inline(messages: list[dict[str, Any]],
           load: Callable[[int], bytes | None]) -> list[dict[str, Any]]:
    """API messages with every stored media block made a base64 block (`load(media_file_id)`
    gives the bytes, None when deleted: then the omitted note). Returns new messages; the input
    is not changed."""
    out = []
    for message in messages:
        content = message["content"]
        if isinstance(content, list) and any(_is_stored(b) for b in content):
            content = [_inline_block(b, load) if _is_stored(b) else b for b in content]
        out.append({**message, "content": content})
    return out


def _is_stored(block: Any) -> bool:
    return isinstance(block, dict) and is_media(block) \
        and (block.get("source") or {}).get("type") == STORED_SOURCE


def _inline_block(block: Block, load: Callable[[int], bytes | None]) -> Block:
    source = block["source"]
    data = load(int(source["media_file_id"]))
    if data is None:
        return omitted_note(block)
    inlined: Block = {"type": block["type"], "source": {
        "type": "base64", "media_type": source["media_type"],
        "data": base64.b64encode(data).decode("ascii")}}
    if "cache_control" in block:
        inlined["cache_control"] = block["cache_control"]
    return inlined


def stored_media_ids(content: list[Block]) -> list[int]:
    """The media_file ids a stored message's blocks refer to."""
    return [int(b["source"]["media_file_id"]) for b in content if _is_stored(b)]
