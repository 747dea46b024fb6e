"""``parcat replay``: play back an episode recorded by ``parcat eval --replay-dir``."""

from __future__ import annotations

import contextlib
import shutil
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any

import typer

from parcat.cli import options as opts
from parcat.cli.common import user_errors, wrote
from parcat.core.errors import ConfigError
from parcat.core.output_paths import check_output_file, check_output_suffix

OUTPUT_FORMATS = {".gif": "an animated GIF", ".mp4": "an H.264 video",
                  ".png": "one frame, --frame N"}
"""What ``-o`` writes, by extension."""


def replay_command(
    file: Annotated[Path, typer.Argument(metavar="FILE", help="A replay: DIR/MISSION-NNNNNN.npz "
                                         "from `parcat eval --replay-dir DIR`.")],
    fps: Annotated[float, typer.Option("--fps", min=0.1, max=1000.0, metavar="N",
                                       help="Frames a second, in the terminal and in a GIF or "
                                       "MP4.")] = 10.0,
    frame: Annotated[int | None, typer.Option(
        "--frame", min=0, metavar="N", help="The step a PNG shows (0: after the reset; "
        "default: the last).")] = None,
    output: opts.OutputFile = None,
    trust_code: opts.TrustCode = False,
) -> None:
    """Play back an episode recorded with `parcat eval --replay-dir`: in the terminal, or
    as a GIF, MP4 or PNG.

    -o FILE: an animated GIF (.gif) or a video (.mp4) of the episode, or one frame (.png,
    --frame N), instead of playing it here; needs imageio and imageio-ffmpeg
    (pip install 'parcat\\[plot]').
    --trust-code: the replay may rebuild an environment from outside parcat (by default
    only parcat's own missions play back).
    """
    from parcat.episode import playback, replay
    with user_errors():
        suffix = None
        if output is not None:
            suffix = check_output_suffix(output, "--output", OUTPUT_FORMATS)
            check_output_file(output, "--output")
        if frame is not None and suffix != ".png":
            raise ConfigError(f"--frame {frame} picks the frame of a PNG; give -o FILE.png")
        recorded = replay.read(file)
        meta = recorded.meta
        if frame is not None and frame > meta["steps"]:
            raise ConfigError(f"--frame {frame}: {recorded.source} has frames 0 to "
                              f"{meta['steps']} (one after each of its {meta['steps']} steps)")
        problems: list[str] = []
        # closed at once: a PNG's frame may come before the end, and the env is closed then
        with contextlib.closing(playback.frames(recorded, trust_code)) as drawn:
            if output is None:
                _play(_title(meta, recorded.agents), drawn, meta["steps"], fps, problems)
            else:
                name = f"{meta['mission']} episode {meta['episode_index']} (seed {meta['seed']})"
                count = _write(output, name, drawn, meta["steps"], fps, frame, problems)
                wrote(output, f"{count} frame{'s' if count != 1 else ''}")
    if problems:
        typer.echo(f"parcat: note: the environment did not replay as recorded "
                   f"({len(problems)} step(s); first: {problems[0]}): it is not deterministic, "
                   "or not the version that recorded it", err=True)


def _title(meta: dict[str, Any], agents: list[str]) -> str:
    returns = ", ".join(f"{a}={'n/a' if r is None else format(r, '.3f')}"
                        for a, r in zip(agents, meta["returns"], strict=True))
    return (f"{meta['mission']} episode {meta['episode_index']} (seed {meta['seed']}): "
            f"{meta['steps']} steps, returns per agent {returns}")


def _write(output: Path, name: str, drawn: Iterable[Any], steps: int, fps: float,
           frame: int | None, problems: list[str]) -> int:
    """Write ``output``: every ``stride``-th frame as a GIF or MP4, or one frame as a PNG."""
    from parcat.episode import pictures
    every = pictures.stride(steps)
    wanted = steps if frame is None else frame
    images = []
    for shot in drawn:
        problems.extend(shot.problems[:1])  # one a step: the note counts steps
        if shot.step == 0 and shot.picture is None:
            raise ConfigError("the replay's environment draws nothing (its render() gave "
                              "None): there is no picture to write; play it without -o")
        if output.suffix.lower() == ".png":
            if shot.step == wanted:
                pictures.write_png(output, pictures.picture(shot, name, steps))
                return 1
        elif shot.step % every == 0 or shot.step == steps:
            images.append(pictures.picture(shot, name, steps))
    if not images:
        raise ConfigError(f"the replay ended before frame {wanted}: the environment did not "
                          "replay as recorded")
    return pictures.write_movie(output, images, fps)


def _play(title: str, drawn: Iterable[Any], steps: int, fps: float,
          problems: list[str]) -> None:
    """Draw every frame as it is made (``problems`` gathers what did not replay as
    recorded); in a terminal each replaces the last, otherwise one after another."""
    from parcat.cli.render import terminal_picture
    terminal = sys.stdout.isatty()
    size = shutil.get_terminal_size()
    for shot in drawn:
        problems.extend(shot.problems[:1])  # one a step: the note counts steps
        lines = [title, f"step {shot.step}/{steps}"]
        if isinstance(shot.picture, str):
            lines.append(shot.picture.rstrip("\n"))
        elif shot.picture is not None and terminal:
            lines.append(terminal_picture(shot.picture, size.columns, size.lines - 5))
        elif shot.step == 0:  # said once: what is not shown, and why
            lines.append("(the environment draws nothing)" if shot.picture is None else
                         "(the environment draws pictures: write them with -o FILE.gif)")
        if shot.legend:
            lines.append("legend: " + ", ".join(f"{k} {v}" for k, v in shot.legend.items()))
        if terminal:
            sys.stdout.write("\x1b[H\x1b[J" + "\n".join(lines) + "\n")
            sys.stdout.flush()
            time.sleep(1.0 / fps)
        else:
            sys.stdout.write("\n".join(lines) + "\n\n")
    sys.stdout.flush()
