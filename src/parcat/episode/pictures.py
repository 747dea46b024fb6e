"""Pictures of a replay for people: every frame an RGB image under a title and a step
counter (a static viewer shows it as it is), a text frame drawn as coloured character cells
above its legend; written as an animated GIF, an MP4 or one frame's PNG with imageio.

imageio (and Pillow, which it brings) and imageio-ffmpeg (an ffmpeg binary, for MP4) are in
the ``plot`` extra: they are imported only here.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from parcat.core.atomic import write_atomically
from parcat.core.errors import ConfigError
from parcat.episode.playback import Frame

BACKGROUND = (22, 24, 29)
INK = (232, 232, 232)
EMPTY = (44, 47, 56)
"""The cell of a ``.`` (nothing there)."""
AGENT_COLOURS = [(31, 119, 180), (255, 127, 14), (214, 39, 40), (148, 103, 189), (140, 86, 75),
                 (227, 119, 194), (23, 190, 207), (188, 189, 34), (255, 187, 120),
                 (174, 199, 232)]
"""Agent ``i`` (drawn as the digit ``i % 10``): matplotlib's tab20 colours without its
greens and greys, which the legend's symbols use."""
WALL = (120, 120, 120)
SYMBOL_COLOURS = [(222, 170, 40), (90, 200, 90), (230, 70, 70), (90, 170, 240),
                  (200, 120, 220)]
"""The legend's other symbols, in its order."""
CELL = (18, 20)
"""Width and height of a character cell, in pixels."""
MAX_SIDE = 480
"""An RGB frame larger than this is scaled down to fit: a GIF of hundreds of frames stays a
few megabytes, and memory a few hundred."""
MAX_GIF_FRAMES = 300
"""A longer episode is drawn every k-th step (and its last), so that a GIF or MP4 stays small
and its frames fit in memory."""
MARGIN = 10
FONT_SIZE = 13
LINE = 18


def _imaging() -> tuple[Any, Any, Any]:
    try:
        import imageio.v3 as iio
        from PIL import Image, ImageDraw
    except ImportError:
        raise ConfigError("writing a replay's pictures needs imageio: pip install "
                          "'parcat[plot]' (or pip install imageio)") from None
    return iio, Image, ImageDraw


def stride(steps: int) -> int:
    """Every how many steps a GIF of an episode of ``steps`` steps shows a frame."""
    return max(1, math.ceil((steps + 1) / MAX_GIF_FRAMES))


def picture(frame: Frame, title: str, steps: int) -> np.ndarray:
    """``frame`` as an RGB image (height × width × 3, uint8): ``title`` and ``step k/N``
    above what the environment drew, and the legend of a text frame below it."""
    _, image_cls, draw_module = _imaging()
    font = _font()
    body = _body(frame, image_cls, draw_module, font)
    items = [(colour, text, 22 + font.getlength(text)) for colour, text in
             _legend_items(frame.legend or {})]
    width = int(max(body.width, font.getlength(title), 240)) + 2 * MARGIN
    rows = _rows(items, width - 2 * MARGIN)
    height = 2 * LINE + 3 * MARGIN + body.height + len(rows) * LINE
    canvas = image_cls.new("RGB", (width, height), BACKGROUND)
    draw = draw_module.Draw(canvas)
    draw.text((MARGIN, MARGIN), title, fill=INK, font=font)
    draw.text((MARGIN, MARGIN + LINE), f"step {frame.step}/{steps}", fill=INK, font=font)
    top = 2 * MARGIN + 2 * LINE
    canvas.paste(body, (MARGIN, top))
    y = top + body.height + MARGIN
    for row in rows:
        x = MARGIN
        for colour, text, used in row:
            draw.rectangle((x, y + 3, x + 11, y + 14), fill=colour)
            draw.text((x + 16, y), text, fill=INK, font=font)
            x += int(used) + 8
        y += LINE
    return np.asarray(canvas)


def _font() -> Any:
    from PIL import ImageFont
    try:
        return ImageFont.load_default(size=FONT_SIZE)
    except TypeError:  # Pillow before 10.1: only its small bitmap font
        return ImageFont.load_default()


def _rows(items: list[Any], width: float) -> list[list[Any]]:
    """The legend's items in rows that fit ``width``."""
    rows: list[list[Any]] = [[]]
    used = 0.0
    for item in items:
        if rows[-1] and used + item[2] > width:
            rows.append([])
            used = 0.0
        rows[-1].append(item)
        used += item[2] + 8
    return rows if rows[0] else []


def _body(frame: Frame, image_cls: Any, draw_module: Any, font: Any) -> Any:
    """What the environment drew, as a Pillow image: a text picture with a legend is a
    grid of character cells, other text is lines."""
    if isinstance(frame.picture, np.ndarray):
        image = image_cls.fromarray(frame.picture)
        image.thumbnail((MAX_SIDE, MAX_SIDE))
        return image
    text = frame.picture if isinstance(frame.picture, str) else "(the environment drew nothing)"
    lines = text.rstrip("\n").splitlines() or [""]
    if not frame.legend:
        width = max(font.getlength(line) for line in lines)
        image = image_cls.new("RGB", (max(1, int(width)), len(lines) * LINE), BACKGROUND)
        draw = draw_module.Draw(image)
        for row, line in enumerate(lines):
            draw.text((0, row * LINE), line, fill=INK, font=font)
        return image
    colours = _colours(frame.legend)
    cols = max(max(len(line) for line in lines), 1)
    image = image_cls.new("RGB", (cols * CELL[0], len(lines) * CELL[1]), BACKGROUND)
    draw = draw_module.Draw(image)
    for row, line in enumerate(lines):
        for col, char in enumerate(line):
            x, y = col * CELL[0], row * CELL[1]
            cell = colours.get(char)
            if cell is not None:
                draw.rectangle((x, y, x + CELL[0] - 2, y + CELL[1] - 2), fill=cell)
            if char != ".":
                draw.text((x + 4, y + 1), char, fill=INK if cell is None else BACKGROUND,
                          font=font)
    return image


def _colours(legend: dict[str, str]) -> dict[str, tuple[int, int, int]]:
    """The cell colour of each legend character (``0-9``: the agents, ``#``: a wall), ``.``
    empty."""
    found: dict[str, tuple[int, int, int]] = {".": EMPTY, "#": WALL}
    symbols = iter(SYMBOL_COLOURS)
    for key in legend:
        if key == "0-9":
            found.update({str(i): colour for i, colour in enumerate(AGENT_COLOURS)})
        elif len(key) == 1 and key not in found:
            found[key] = next(symbols, SYMBOL_COLOURS[-1])
    return found


def _legend_items(legend: dict[str, str]) -> list[tuple[tuple[int, int, int], str]]:
    colours = _colours(legend)
    return [(colours.get(key[0], INK), f"{key} {meaning}") for key, meaning in legend.items()]


MOVIE_BLOCK = 16
"""An MP4's sides are padded to a multiple of this: H.264 codes 16×16 blocks (imageio would
otherwise scale the picture, with a warning)."""


def write_movie(path: Path, pictures: Iterable[np.ndarray], fps: float) -> int:
    """An animated GIF (looping) or an MP4 (H.264, by ``imageio-ffmpeg``'s ffmpeg) of
    ``pictures``, by ``path``'s suffix, each shown ``1 / fps`` seconds; written atomically.
    Returns the number of frames."""
    iio, _, _ = _imaging()
    images = list(pictures)
    height = max(p.shape[0] for p in images)
    width = max(p.shape[1] for p in images)
    if path.suffix.lower() == ".mp4":
        height, width = (-(-side // MOVIE_BLOCK) * MOVIE_BLOCK for side in (height, width))
        _check_ffmpeg()
        how: dict[str, Any] = {"extension": ".mp4", "fps": fps}
    else:
        how = {"extension": ".gif", "duration": round(1000 / fps), "loop": 0}
    stack = np.empty((len(images), height, width, 3), np.uint8)
    stack[:] = BACKGROUND
    for k, image in enumerate(images):
        stack[k, : image.shape[0], : image.shape[1]] = image
    data = iio.imwrite("<bytes>", stack, **how)
    write_atomically(path, lambda handle: handle.write(data))
    return len(images)


def _check_ffmpeg() -> None:
    try:
        import imageio_ffmpeg  # noqa: F401  (imageio finds its ffmpeg binary through it)
    except ImportError:
        raise ConfigError("writing an MP4 needs imageio-ffmpeg: pip install 'parcat[plot]' "
                          "(or pip install imageio-ffmpeg), or write a .gif") from None


def write_png(path: Path, image: np.ndarray) -> None:
    """One picture as a PNG, written atomically."""
    iio, _, _ = _imaging()
    data = iio.imwrite("<bytes>", image, extension=".png")
    write_atomically(path, lambda handle: handle.write(data))
