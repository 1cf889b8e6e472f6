"""MNIST for the demos: the real files when they can be had, a learnable stand-in when not.

Order of preference, all from --data-dir:
  1. MNIST's IDX files already there (torchvision's layout `MNIST/raw/` or flat, .gz or not);
  2. a download through torchvision (one process at a time, under a file lock; short timeout);
  3. offline: ONE line saying so, then digits drawn with Pillow, randomly scaled, rotated,
     shifted and noised. Learnable like MNIST (a CNN gets most of them right within a few
     hundred steps), never random noise. Every process builds the same set from a fixed seed,
     so data-parallel ranks agree on it without talking.

`read_idx` / `write_idx` handle MNIST's own file format, so tests can write tiny sets.
Images come back as uint8 tensors [N, 28, 28], labels as int64 [N].
"""
from __future__ import annotations

import contextlib
import gzip
import io
import os
import socket
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

MEAN, STD = 0.1307, 0.3081  # MNIST's pixel statistics, used to normalise both sources
DOWNLOAD_TIMEOUT_S = 5.0  # per connection: offline fails in milliseconds, a dead mirror in seconds

FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}

# IDX type codes (the third byte of the magic number) -> numpy dtype, big-endian.
_IDX_TYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}
_IDX_CODES = {np.dtype(v).newbyteorder("=").str: k for k, v in _IDX_TYPES.items()}


class IdxError(ValueError):
    """A file that is not in IDX format (or is cut short)."""


@dataclass
class Split:
    images: torch.Tensor  # uint8 [N, 28, 28]
    labels: torch.Tensor  # int64 [N]


@dataclass
class Mnist:
    train: Split
    test: Split
    source: str  # "mnist" or "stand-in"
    where: str  # the directory the files came from, or a description

    def normalised(self, split: Split) -> torch.Tensor:
        return normalise(split.images)


def normalise(images: torch.Tensor) -> torch.Tensor:
    """uint8 [N, 28, 28] -> float32 [N, 1, 28, 28], scaled and centred like torchvision's examples."""
    return ((images.float() / 255.0 - MEAN) / STD).unsqueeze(1)


# ------------------------------------------------------------------ IDX files ----
def _open(path: Path):
    with open(path, "rb") as f:
        head = f.read(2)
    return gzip.open(path, "rb") if head == b"\x1f\x8b" else open(path, "rb")


def read_idx(path) -> np.ndarray:
    """An IDX file (optionally gzipped) as a numpy array of its declared type and shape."""
    path = Path(path)
    with _open(path) as f:
        data = f.read()
    if len(data) < 4 or data[0] != 0 or data[1] != 0:
        raise IdxError(f"{path}: not an IDX file (bad magic number)")
    code, ndim = data[2], data[3]
    if code not in _IDX_TYPES:
        raise IdxError(f"{path}: unknown IDX data type 0x{code:02x}")
    if len(data) < 4 + 4 * ndim:
        raise IdxError(f"{path}: IDX header cut short")
    shape = struct.unpack(f">{ndim}I", data[4:4 + 4 * ndim])
    dtype = np.dtype(_IDX_TYPES[code])
    count = int(np.prod(shape)) if shape else 1
    offset = 4 + 4 * ndim
    if len(data) - offset < count * dtype.itemsize:
        raise IdxError(f"{path}: {len(data) - offset} bytes of data, the header promises "
                       f"{count * dtype.itemsize}")
    arr = np.frombuffer(data, dtype=dtype, count=count, offset=offset)
    return arr.reshape(shape).astype(dtype.newbyteorder("="))


def write_idx(path, array) -> None:
    """Write an array in IDX format (gzipped when the name ends in .gz)."""
    arr = np.asarray(array)
    code = _IDX_CODES.get(arr.dtype.newbyteorder("=").str)
    if code is None:
        raise IdxError(f"IDX cannot hold {arr.dtype}")
    blob = bytes([0, 0, code, arr.ndim]) + struct.pack(f">{arr.ndim}I", *arr.shape)
    blob += arr.astype(np.dtype(_IDX_TYPES[code])).tobytes()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "wb") as f:
        f.write(blob)


def _find(folder: Path, stem: str) -> Path | None:
    for name in (stem, stem + ".gz"):
        if (folder / name).is_file():
            return folder / name
    return None


def find_idx_dir(data_dir) -> Path | None:
    """The folder under data_dir holding all four MNIST files, if any."""
    root = Path(data_dir)
    for folder in (root / "MNIST" / "raw", root / "raw", root):
        if all(_find(folder, stem) for pair in FILES.values() for stem in pair):
            return folder
    return None


def load_idx_dir(folder) -> Mnist:
    """MNIST from a folder of its four IDX files."""
    folder = Path(folder)
    splits = {}
    for name, (img_stem, lab_stem) in FILES.items():
        images = read_idx(_find(folder, img_stem))
        labels = read_idx(_find(folder, lab_stem))
        if images.ndim != 3 or labels.ndim != 1 or len(images) != len(labels):
            raise IdxError(f"{folder}: {name} images {images.shape} do not match labels {labels.shape}")
        splits[name] = Split(torch.from_numpy(images.astype(np.uint8)),
                             torch.from_numpy(labels.astype(np.int64)))
    return Mnist(splits["train"], splits["test"], "mnist", str(folder))


# ------------------------------------------------------------------ download ----
@contextlib.contextmanager
def _locked(data_dir: Path):
    """One process downloads; the others wait here and then find the files."""
    import fcntl

    data_dir.mkdir(parents=True, exist_ok=True)
    with open(data_dir / ".mnist.lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def download(data_dir) -> str | None:
    """Fetch MNIST with torchvision into data_dir; None on success, else why it failed (short)."""
    old = socket.getdefaulttimeout()
    socket.setdefaulttimeout(DOWNLOAD_TIMEOUT_S)
    noise = io.StringIO()  # torchvision prints a line per mirror and file: keep them quiet
    try:
        with contextlib.redirect_stdout(noise), contextlib.redirect_stderr(noise):
            from torchvision.datasets import MNIST

            MNIST(str(data_dir), train=True, download=True)
            MNIST(str(data_dir), train=False, download=True)
        return None
    except ImportError:
        return "torchvision is not installed"
    except Exception as exc:  # noqa: BLE001 - any failure means: use the stand-in
        text = str(exc).strip().splitlines()
        return text[0][:120] if text else type(exc).__name__
    finally:
        socket.setdefaulttimeout(old)


# ------------------------------------------------------------------ stand-in ----
_FONTS = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/dejavu/DejaVuSans-Bold.ttf",
    "/usr/share/fonts/truetype/dejavu/DejaVuSerif.ttf",
    "/usr/share/fonts/truetype/dejavu/DejaVuSansMono.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/System/Library/Fonts/Supplemental/Arial.ttf",
    "C:/Windows/Fonts/arial.ttf",
]


def _fonts(size: int) -> list:
    from PIL import ImageFont

    fonts = []
    for path in _FONTS:
        try:
            fonts.append(ImageFont.truetype(path, size))
        except OSError:
            continue
    if not fonts:
        try:
            fonts.append(ImageFont.load_default(size=size))  # Pillow >= 10.1 ships a scalable one
        except TypeError:
            fonts.append(ImageFont.load_default())
    return fonts


def glyphs() -> torch.Tensor:
    """[10, G, 28, 28] float templates: each digit in every font and stroke, centred like MNIST."""
    from PIL import Image, ImageDraw

    out = [[] for _ in range(10)]
    for font in _fonts(22):
        for stroke in (0, 1):
            for digit in range(10):
                img = Image.new("L", (28, 28), 0)
                draw = ImageDraw.Draw(img)
                # Centre the glyph's ink box in the 28x28 field, as MNIST centres by mass.
                left, top, right, bottom = draw.textbbox((0, 0), str(digit), font=font, stroke_width=stroke)
                x = (28 - (right - left)) / 2 - left
                y = (28 - (bottom - top)) / 2 - top
                draw.text((x, y), str(digit), fill=255, font=font, stroke_width=stroke, stroke_fill=255)
                out[digit].append(torch.from_numpy(np.asarray(img, dtype=np.float32) / 255.0))
    return torch.stack([torch.stack(d) for d in out])


def stand_in(n_train: int = 60000, n_test: int = 10000, seed: int = 0) -> Mnist:
    """Generated digits: a glyph, a random affine (scale, rotation, shear, shift), blur-ish
    resampling and pixel noise. Deterministic for a seed, so every rank builds the same set."""
    import torch.nn.functional as F

    templates = glyphs()
    g = torch.Generator().manual_seed(seed)

    def make(n: int) -> Split:
        labels = torch.randint(0, 10, (n,), generator=g)
        which = torch.randint(0, templates.shape[1], (n,), generator=g)
        base = templates[labels, which].unsqueeze(1)
        angle = (torch.rand(n, generator=g) - 0.5) * 0.6  # about +-17 degrees
        scale = 0.85 + torch.rand(n, generator=g) * 0.35
        shear = (torch.rand(n, generator=g) - 0.5) * 0.4
        shift = (torch.rand(n, 2, generator=g) - 0.5) * 0.35  # up to ~2.5 px each way
        cos, sin = torch.cos(angle) / scale, torch.sin(angle) / scale
        theta = torch.stack([torch.stack([cos, -sin + shear, shift[:, 0]], 1),
                             torch.stack([sin, cos, shift[:, 1]], 1)], 1)
        images = torch.empty(n, 28, 28, dtype=torch.uint8)
        for i in range(0, n, 4096):  # in chunks: bounded memory for the float intermediates
            sl = slice(i, i + 4096)
            grid = F.affine_grid(theta[sl], list(base[sl].shape), align_corners=False)
            warped = F.grid_sample(base[sl], grid, align_corners=False, padding_mode="zeros")
            noisy = warped.squeeze(1) + torch.randn(warped.shape[0], 28, 28, generator=g) * 0.12
            images[sl] = (noisy.clamp(0, 1) * 255).round().to(torch.uint8)
        return Split(images, labels)

    return Mnist(make(n_train), make(n_test), "stand-in", "generated with Pillow (offline stand-in)")


# ------------------------------------------------------------------ entry ----
MIRROR_HOST = "ossci-datasets.s3.amazonaws.com"  # torchvision's first MNIST mirror
STAND_IN_DIR = "MNIST-stand-in"  # cached generated set, in IDX format like the real one


def _reachable(host: str) -> bool:
    """A name lookup first: offline it fails in milliseconds, before torchvision is imported."""
    if any(os.environ.get(v) for v in ("https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY")):
        return True  # the lookup may only work through the proxy: let the download try
    try:
        socket.getaddrinfo(host, 443)
        return True
    except OSError:
        return False


def _stand_in_cached(data_dir: Path) -> Mnist:
    """The stand-in, generated once into data_dir and read back by later runs and ranks.
    Called under the lock, so one process generates while the others wait."""
    folder = data_dir / STAND_IN_DIR
    if find_idx_dir(folder) is None:
        data = stand_in()
        try:
            for split, (img, lab) in FILES.items():
                part = getattr(data, split)
                write_idx(folder / (img + ".tmp"), part.images.numpy())
                write_idx(folder / (lab + ".tmp"), part.labels.numpy().astype(np.uint8))
            for stem in (s for pair in FILES.values() for s in pair):
                os.replace(folder / (stem + ".tmp"), folder / stem)
        except OSError:
            pass  # a read-only data dir: use what was generated, uncached
        return data
    data = load_idx_dir(folder)
    return Mnist(data.train, data.test, "stand-in", str(folder))


def load(data_dir, download_ok: bool = True, say=print) -> Mnist:
    """MNIST from data_dir, downloading if allowed; else the stand-in, announced in one line."""
    data_dir = Path(data_dir)
    found = find_idx_dir(data_dir)
    if found is not None:
        return load_idx_dir(found)
    with _locked(data_dir):
        found = find_idx_dir(data_dir)  # another process may have fetched it meanwhile
        why = "downloads are off"
        if found is None and download_ok:
            why = download(data_dir) if _reachable(MIRROR_HOST) else "offline"
            found = find_idx_dir(data_dir) if why is None else None
            why = why or "the download left no IDX files"
        if found is not None:
            return load_idx_dir(found)
        say(f"mnist: no MNIST in {data_dir} and no download ({why}): "
            f"training on generated digits (a learnable stand-in)")
        return _stand_in_cached(data_dir)
