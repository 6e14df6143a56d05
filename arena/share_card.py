"""The image card of a shared outcome: a 1200x630 PNG (the size link previews expect).

Drawn with Pillow's bundled font (``ImageFont.load_default``), so nothing is fetched and no font
file is shipped; the text is what the share's page says, in the same words.
"""

import io

from PIL import Image, ImageDraw, ImageFont

WIDTH, HEIGHT = 1200, 630
MARGIN = 72
BACKGROUND = (17, 24, 39)
INK = (243, 244, 246)
MUTED = (156, 163, 175)
ACCENT = (96, 165, 250)


def _font(size: int) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    return ImageFont.load_default(size=size)


def _wrap(text: str, font: ImageFont.FreeTypeFont | ImageFont.ImageFont, width: int) -> list[str]:
    """``text`` in lines no wider than ``width`` pixels; a word wider than a line is cut."""
    lines: list[str] = []
    line = ""
    for word in text.split():
        candidate = f"{line} {word}".strip()
        if font.getlength(candidate) <= width:
            line = candidate
            continue
        if line:
            lines.append(line)
        while font.getlength(word) > width:  # a single long word: cut it where it overflows
            cut = len(word)
            while cut > 1 and font.getlength(word[:cut]) > width:
                cut -= 1
            lines.append(word[:cut])
            word = word[cut:]
        line = word
    if line:
        lines.append(line)
    return lines


def card_png(*, headline: str, prompt: str | None, footer: str) -> bytes:
    """The card: a headline (the verdict), the prompt's start when shared, and a footer."""
    image = Image.new("RGB", (WIDTH, HEIGHT), BACKGROUND)
    draw = ImageDraw.Draw(image)
    text_width = WIDTH - 2 * MARGIN
    draw.text((MARGIN, MARGIN - 8), "Arena", font=_font(34), fill=ACCENT)

    y = MARGIN + 70
    big = _font(58)
    for line in _wrap(headline, big, text_width)[:3]:
        draw.text((MARGIN, y), line, font=big, fill=INK)
        y += 72
    if prompt:
        y += 24
        small = _font(32)
        lines = _wrap(f"“{prompt}”", small, text_width)
        for line in lines[:4]:
            draw.text((MARGIN, y), line, font=small, fill=MUTED)
            y += 42
    draw.text((MARGIN, HEIGHT - MARGIN - 30), footer, font=_font(30), fill=ACCENT)
    out = io.BytesIO()
    image.save(out, format="PNG", optimize=True)
    return out.getvalue()
