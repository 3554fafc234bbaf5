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
import zlib
from collections.abc import Callable
from typing import Any

Block = dict[str, Any]

MAX_IMAGE_BYTES = 5 * 1024 * 1024
MAX_IMAGE_SIDE = 8000
MAX_PDF_BYTES = 32 * 1024 * 1024
MAX_PDF_PAGES = 100
MAX_PDF_INFLATED = 32 * 1024 * 1024  # object streams inflated to count pages, in all
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
_PDF_PAGES_COUNT = re.compile(rb"/Type\s*/Pages(?![a-zA-Z])[^>]*?/Count\s+(\d+)"
                              rb"|/Count\s+(\d+)[^>]*?/Type\s*/Pages(?![a-zA-Z])")
_PDF_OBJECT_STREAM = re.compile(rb"/Type\s*/ObjStm(?![a-zA-Z])")
_PDF_STREAM = re.compile(rb"stream\r?\n")


def pdf_pages(data: bytes) -> int:
    """Pages of a PDF: the most of (a) its `/Type /Page` objects (not `/Pages`) and (b) the
    `/Count` of its page tree's `/Type /Pages` nodes (the root's is the total), both read in
    the file and in its compressed object streams (PDF 1.5 `/ObjStm`, FlateDecode: where
    pdfTeX and most modern writers put the page objects), which are inflated up to
    MAX_PDF_INFLATED bytes in all. Raises MediaRejected("corrupt") without the `%PDF-`
    header, ("unsupported_type") when no page can be counted or the streams inflate past the
    bound (PDF 32000-1:2008 §7.5.7 object streams, §7.7.3 the page tree)."""
    if not data.startswith(b"%PDF-"):
        raise MediaRejected("corrupt", "not a PDF file")
    texts = [data, *_object_streams(data)]
    objects = sum(len(_PDF_PAGE.findall(text)) for text in texts)
    counted = max((int(a or b) for text in texts
                   for a, b in _PDF_PAGES_COUNT.findall(text)), default=0)
    pages = max(objects, counted)
    if pages == 0:
        raise MediaRejected("unsupported_type", "the PDF's pages could not be counted")
    return pages


def _object_streams(data: bytes) -> list[bytes]:
    """The inflated contents of the FlateDecode object streams of `data`, at most
    MAX_PDF_INFLATED bytes in all (a zip bomb is refused, not inflated)."""
    out: list[bytes] = []
    budget = MAX_PDF_INFLATED
    for found in _PDF_OBJECT_STREAM.finditer(data):
        start = _PDF_STREAM.search(data, found.end())
        if start is None:
            break
        if b"/FlateDecode" not in data[found.end():start.start()]:
            continue
        text = _inflate(memoryview(data)[start.end():], budget)
        if text is None:
            continue  # a damaged stream: the other ways of counting still apply
        budget -= len(text)
        out.append(text)
    return out


def _inflate(view: memoryview, budget: int) -> bytes | None:
    """One zlib stream from the start of `view`, fed 64 KB at a time (no copy of the rest of
    the file per stream); None when it is not zlib, MediaRejected past `budget` bytes."""
    inflater, parts, size, index = zlib.decompressobj(), [], 0, 0
    try:
        while not inflater.eof and index < len(view):
            parts.append(inflater.decompress(view[index:index + 65536], budget - size + 1))
            size += len(parts[-1])
            index += 65536
            if size > budget or inflater.unconsumed_tail:
                raise MediaRejected("unsupported_type", "the PDF's object streams inflate "
                                    f"past {MAX_PDF_INFLATED} bytes")
    except zlib.error:
        return None
    return b"".join(parts)


def check_structure(kind: str, data: bytes) -> None:
    """Beyond the header, that the file is whole, as far as it is cheap to tell without a
    decoder: a PNG's chunks walk from IHDR to IEND with good CRCs and at least one IDAT; a
    JPEG's segments walk from SOI to a frame header (SOFn) and a scan (SOS), and an EOI
    follows; a GIF's blocks walk to its trailer with at least one image; a WebP's RIFF size
    matches and its chunks hold a VP8/VP8L bitstream with its signature (PNG spec §5,
    ITU T.81 Annex B, GIF89a §§17-27, the WebP container spec). Raises
    MediaRejected("corrupt")."""
    try:
        problem = {"image/png": _png_problem, "image/jpeg": _jpeg_problem,
                   "image/gif": _gif_problem, "image/webp": _webp_problem}[kind](data)
    except (struct.error, IndexError):
        problem = "truncated"
    if problem:
        raise MediaRejected("corrupt", f"{kind}: {problem}")


def _png_problem(data: bytes) -> str | None:
    index, seen = 8, []
    while index + 12 <= len(data):
        length = struct.unpack(">I", data[index:index + 4])[0]
        kind = data[index + 4:index + 8]
        end = index + 12 + length
        if end > len(data):
            return f"chunk {kind!r} runs past the end"
        crc = struct.unpack(">I", data[end - 4:end])[0]
        if zlib.crc32(data[index + 4:end - 4]) & 0xFFFFFFFF != crc:
            return f"bad CRC in chunk {kind!r}"
        seen.append(kind)
        index = end
        if kind == b"IEND":
            break
    if not seen or seen[0] != b"IHDR":
        return "no IHDR first"
    if b"IDAT" not in seen:
        return "no IDAT"
    if seen[-1] != b"IEND":
        return "no IEND"
    return None


def _jpeg_problem(data: bytes) -> str | None:
    index, framed = 2, False
    while index + 4 <= len(data):
        if data[index] != 0xFF:
            return "bad marker"
        marker = data[index + 1]
        if marker == 0xFF:  # fill byte
            index += 1
            continue
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:
            index += 2
            continue
        if marker == 0xD9:
            return "EOI before any scan"
        length = struct.unpack(">H", data[index + 2:index + 4])[0]
        if length < 2 or index + 2 + length > len(data):
            return "segment runs past the end"
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            framed = True
        if marker == 0xDA:
            if not framed:
                return "scan before a frame header"
            return None if b"\xff\xd9" in data[index + 2 + length:] else "no EOI"
        index += 2 + length
    return "no scan (SOS)"


def _gif_problem(data: bytes) -> str | None:
    flags = data[10]
    index = 13 + (3 * 2 ** ((flags & 7) + 1) if flags & 0x80 else 0)
    images = 0
    while index < len(data):
        introducer = data[index]
        if introducer == 0x3B:
            return None if images else "no image"
        if introducer == 0x2C:
            local = data[index + 9]
            index += 10 + (3 * 2 ** ((local & 7) + 1) if local & 0x80 else 0)
            index += 1  # LZW minimum code size
            images += 1
        elif introducer == 0x21:
            index += 2
        else:
            return "bad block"
        while True:  # sub-blocks, up to the zero-length terminator
            size = data[index]
            index += 1 + size
            if size == 0:
                break
        if index > len(data):
            return "truncated"
    return "no trailer"


def _webp_problem(data: bytes) -> str | None:
    if struct.unpack("<I", data[4:8])[0] + 8 > len(data):
        return "RIFF size past the end"
    index, kinds = 12, []
    while index + 8 <= len(data):
        kind = data[index:index + 4]
        size = struct.unpack("<I", data[index + 4:index + 8])[0]
        payload = data[index + 8:index + 8 + size]
        if len(payload) < size:
            return f"chunk {kind!r} runs past the end"
        if kind == b"VP8 " and payload[3:6] != b"\x9d\x01\x2a":
            return "no VP8 start code"
        if kind == b"VP8L" and payload[:1] != b"\x2f":
            return "no VP8L signature"
        kinds.append(kind)
        index += 8 + size + (size & 1)
    if not {b"VP8 ", b"VP8L", b"ANMF"} & set(kinds):
        return "no bitstream"
    return None


def check_file(data: bytes, declared_type: str) -> Block:
    """The stored source fields of a file the model may take (media_type, width/height or
    pages, bytes), or MediaRejected. Images are recognised by their header and their structure
    checked (`check_structure`); a PDF by its own header, its pages by `pdf_pages`."""
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
    check_structure(kind, data)
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


_REFUSED_AT = re.compile(r"messages\.(\d+)\.content\.(\d+)")
_REFUSED_KIND = (("image", re.compile(r"\bimage\b", re.I)),
                 ("document", re.compile(r"\b(pdf|document)\b", re.I)))


def refused_media(message: str) -> tuple[str, tuple[int, int] | None] | None:
    """What a Messages API 400 (`invalid_request_error`) refused, when it names an image or a
    document: (kind, (message index, block index) or None when the text names no position).
    The real API says "Could not process image" (no position) and
    "messages.N.content.M.pdf.source.base64.data: The PDF specified was not valid."
    (anthropics/claude-code issues #1747, #5174). None for any other 400."""
    for kind, pattern in _REFUSED_KIND:
        if pattern.search(message):
            at = _REFUSED_AT.search(message)
            return kind, (int(at.group(1)), int(at.group(2))) if at else None
    return None


def stored_media_ids(content: list[Block]) -> list[int]:
    """The media_file ids a stored message's blocks refer to."""
    return [int(b["source"]["media_file_id"]) for b in content if _is_stored(b)]
