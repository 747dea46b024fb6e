"""``parcat replay``: play back an episode recorded by ``parcat eval --replay-dir``."""

from __future__ import annotations

import html
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated

import typer

from parcat.cli import options as opts
from parcat.cli.common import user_errors
from parcat.core.output_paths import check_output_file, check_output_suffix

OUTPUT_FORMATS = {".svg": "an animated SVG"}
"""What ``-o`` writes, by extension."""


def replay_command(
    file: Annotated[Path, typer.Argument(metavar="FILE", help="A replay: DIR/MISSION-NNNNNN.npz "
                                         "from `parcat eval --replay-dir DIR`.")],
    fps: Annotated[float, typer.Option("--fps", min=0.1, max=1000.0, metavar="N",
                                       help="Frames a second in the terminal.")] = 10.0,
    output: opts.OutputFile = None,
    trust_code: opts.TrustCode = False,
) -> None:
    """Play back an episode recorded with `parcat eval --replay-dir`: in the terminal, or
    as an animated SVG.

    -o FILE: an animated SVG of the episode (.svg), instead of playing it here.
    --trust-code: the replay may rebuild an environment from outside parcat (by default
    only parcat's own missions play back).
    """
    from parcat.episode import replay
    with user_errors():
        if output is not None:
            check_output_suffix(output, "--output", OUTPUT_FORMATS)
            check_output_file(output, "--output")
        recorded = replay.read(file)
        meta = recorded.meta
        returns = ", ".join(f"{a}={'n/a' if r is None else format(r, '.3f')}"
                            for a, r in zip(recorded.agents, meta["returns"], strict=True))
        title = (f"{meta['mission']} episode {meta['episode_index']} (seed {meta['seed']}): "
                 f"{meta['steps']} steps, returns {returns}")
        drawn = replay.frames(recorded, trust_code)
        problems: list[str] = []
        if output is not None:
            frames = []
            for _, frame, found in drawn:
                frames.append(frame)
                problems.extend(found)
            write_svg(output, title, frames, fps)
            typer.echo(f"wrote {output} ({len(frames)} frames)", err=True)
        else:
            _play(title, drawn, meta["steps"], fps, problems)
    if problems:
        typer.echo(f"parcat: warning: the environment did not replay as recorded "
                   f"({len(problems)} step(s); first: {problems[0]}): it is not deterministic",
                   err=True)


def _play(title: str, drawn: Iterable[tuple[int, str, list[str]]], steps: int, fps: float,
          problems: list[str]) -> None:
    """Draw every frame as it is made (``problems`` gathers what did not replay as
    recorded); in a terminal each replaces the last, otherwise one after another."""
    terminal = sys.stdout.isatty()
    for step, frame, found in drawn:
        problems.extend(found)
        header = f"{title}\nstep {step}/{steps}\n"
        if terminal:
            sys.stdout.write("\x1b[H\x1b[J" + header + frame + "\n")
            sys.stdout.flush()
            time.sleep(1.0 / fps)
        else:
            sys.stdout.write(header + frame + "\n\n")
    sys.stdout.flush()


def write_svg(path: Path, title: str, frames: list[str], fps: float) -> None:
    """An animated SVG: one text block per frame, each shown for ``1 / fps`` seconds, looping."""
    from parcat.core.atomic import write_text_atomically
    rows = max(len(f.splitlines()) for f in frames) + 2
    cols = max(max((len(line) for line in f.splitlines()), default=0) for f in frames)
    cols = max(cols, min(len(title), 120))
    width, height, line = cols * 8.4 + 20, rows * 16 + 20, 16
    period = len(frames) / fps
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" '
             f'height="{height:.0f}" font-family="monospace" font-size="14">',
             '<rect width="100%" height="100%" fill="#111"/>',
             f'<text x="10" y="20" fill="#ccc">{html.escape(title[:120])}</text>']
    for index, frame in enumerate(frames):
        begin, end = index / len(frames), (index + 1) / len(frames)
        keys = "0;" + (f"{begin:.6f};" if index else "") + f"{end:.6f};1"
        values = ("hidden;" if index else "") + "visible;hidden;hidden"
        parts.append(f'<g visibility="hidden"><animate attributeName="visibility" '
                     f'dur="{period:.3f}s" repeatCount="indefinite" calcMode="discrete" '
                     f'keyTimes="{keys}" values="{values}"/>')
        for row, text in enumerate(frame.splitlines()):
            parts.append(f'<text x="10" y="{40 + row * line}" fill="#eee" '
                         f'xml:space="preserve">{html.escape(text)}</text>')
        parts.append("</g>")
    parts.append("</svg>\n")
    write_text_atomically(path, "\n".join(parts))
