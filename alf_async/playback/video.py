"""Writing rendered frames to a GIF or MP4 file, headless (imageio).

GIF always works (imageio's pillow plugin). MP4 needs the ``imageio-ffmpeg``
package (installed with alf_async; it bundles an ffmpeg binary). GIF frame times
are whole centiseconds and viewers slow down frames shorter than 20 ms, so GIFs
play at most ``MAX_GIF_FPS`` frames per second.

Identical consecutive frames are merged by the GIF encoder; ``overlay`` (a text
line drawn in the top-left corner, e.g. episode, step and return) keeps every
frame distinct.
"""

from __future__ import annotations

import os
from typing import Optional

import numpy as np

FORMATS = (".gif", ".mp4")
MAX_GIF_FPS = 50.0


class VideoError(ValueError):
    """The video file cannot be written (unknown format, missing encoder)."""


def video_format(path: str) -> str:
    """'.gif' or '.mp4' from the file name; raises VideoError for others or when the
    MP4 encoder is missing."""
    ext = os.path.splitext(path)[1].lower()
    if ext not in FORMATS:
        raise VideoError(f"cannot record to {path!r}: the file name must end in "
                         f"{' or '.join(FORMATS)}")
    if ext == ".mp4":
        try:
            import imageio_ffmpeg  # noqa: F401
        except ImportError:
            raise VideoError("recording MP4 needs the imageio-ffmpeg package "
                             "(pip install imageio-ffmpeg); or record a .gif") from None
    return ext


def overlay(frame: np.ndarray, text: str) -> np.ndarray:
    """``frame`` [H, W, 3] uint8 with ``text`` drawn on a dark band at the top-left."""
    from PIL import Image, ImageDraw

    image = Image.fromarray(np.ascontiguousarray(frame[..., :3]).astype(np.uint8))
    draw = ImageDraw.Draw(image)
    left, top, right, bottom = draw.textbbox((4, 3), text)
    draw.rectangle((0, 0, right + 4, bottom + 3), fill=(0, 0, 0))
    draw.text((4, 3), text, fill=(255, 255, 255))
    return np.asarray(image)


class VideoWriter:
    """Appends frames to ``path`` (.gif or .mp4); use as a context manager.

    Args:
        path: the output file (its directory is created).
        fps: frames per second (GIF: at most ``MAX_GIF_FPS``).
    """

    def __init__(self, path: str, fps: float = 30.0):
        import imageio

        self.format = video_format(path)
        self.path = path
        self.frames = 0
        directory = os.path.dirname(os.path.abspath(path))
        os.makedirs(directory, exist_ok=True)
        if self.format == ".gif":
            self.fps = min(float(fps), MAX_GIF_FPS)
            self._writer = imageio.v2.get_writer(path, mode="I", duration=1000.0 / self.fps,
                                                 loop=0)
        else:
            self.fps = float(fps)
            self._writer = imageio.v2.get_writer(path, fps=self.fps, macro_block_size=2)

    def add(self, frame: np.ndarray, text: Optional[str] = None) -> None:
        """Append one frame [H, W, 3] uint8, with ``text`` drawn on it if given."""
        frame = np.asarray(frame)
        if frame.ndim != 3 or frame.shape[2] < 3:
            raise VideoError(f"frames must be [H, W, 3] images, got shape {frame.shape}")
        if text:
            frame = overlay(frame, text)
        self._writer.append_data(np.ascontiguousarray(frame[..., :3]).astype(np.uint8))
        self.frames += 1

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def __enter__(self) -> "VideoWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
