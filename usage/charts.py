"""Small charts drawn as standalone SVG text, with no plotting dependency and no external
request (the console's pages and the conversation report): escaping and a bar chart.

Every chart carries its text alternative (`<title>` and `<desc>`, referenced by
`aria-labelledby`), so a screen reader reads the figures the bars show.
"""

from collections.abc import Sequence


def escape(text: str) -> str:
    """`text` safe inside SVG/XML text and attribute values."""
    return (text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            .replace('"', "&quot;"))


def render_bars(values: Sequence[float], labels: Sequence[str], *, title: str, desc: str,
                key: str, value_text: Sequence[str] | None = None, width: int = 340,
                height: int = 160, color: str = "#0f7b5f") -> str:
    """A bar chart of `values` (one bar per label, oldest first; 0 when a value is absent) as
    an inline `<svg>` that scales to its container's width (viewBox). `title` and `desc` are
    its text alternative; `key` makes their ids unique in a page; `value_text` the caption
    printed above each bar (default: the value). ValueError when the lengths differ."""
    if len(values) != len(labels) or (value_text is not None and len(value_text) != len(values)):
        raise ValueError("values, labels and value_text must have the same length")
    captions = list(value_text) if value_text is not None else [f"{v:g}" for v in values]
    pad, top, bottom = 6, 18, 22
    peak = max(values, default=0) or 1
    slot = (width - 2 * pad) / max(len(values), 1)
    bars = []
    for i, (value, label, caption) in enumerate(zip(values, labels, captions, strict=True)):
        h = value / peak * (height - top - bottom)
        x = pad + i * slot
        bars.append(
            f'<rect x="{x + slot * 0.15:.1f}" y="{height - bottom - h:.1f}" '
            f'width="{slot * 0.7:.1f}" height="{h:.1f}" fill="{color}"/>'
            f'<text x="{x + slot / 2:.1f}" y="{height - bottom - h - 4:.1f}" '
            f'text-anchor="middle">{escape(caption)}</text>'
            f'<text x="{x + slot / 2:.1f}" y="{height - 6}" text-anchor="middle" '
            f'fill="#5b6475">{escape(label)}</text>')
    return (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
            f'width="{width}" height="{height}" role="img" font-family="sans-serif" '
            f'font-size="11" aria-labelledby="{key}-title {key}-desc">'
            f'<title id="{key}-title">{escape(title)}</title>'
            f'<desc id="{key}-desc">{escape(desc)}</desc>'
            f'<line x1="{pad}" y1="{height - bottom}" x2="{width - pad}" y2="{height - bottom}" '
            f'stroke="#d9dee7"/>{"".join(bars)}</svg>')
