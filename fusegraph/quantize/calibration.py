"""Calibration data for the quantizers: an iterable of input dicts, or a folder (or .npz file) of arrays.

Folder layouts, as `fusegraph run --save-inputs DIR` writes one sample:
  DIR/<input>.npy ...           one sample (each array may hold several batches: see below)
  DIR/0/<input>.npy, DIR/1/...  one sample per numbered subfolder
  DIR/*.npz                     one sample per .npz file (keys are input names)
An array whose leading dim is a multiple k > 1 of the program's static batch is split into k
samples, so `images.npy` of 64 images calibrates a batch-1 model. Files are read without unpickling.
Every sample is checked against the program's inputs (names, dtypes, static dims) before it runs.
"""

from __future__ import annotations

import zipfile
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import CalibrationError
from ..ir.program import Program
from ..ir.shape import Shape


def _read_npy(path: Path) -> np.ndarray:
    try:
        with open(path, "rb") as f:
            if f.read(6) != b"\x93NUMPY":  # np.load would try to unpickle anything else
                raise CalibrationError(f"calibration file {path} is not a .npy array (save arrays with numpy.save)")
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as e:
        raise CalibrationError(f"calibration file {path}: cannot read it as a .npy array: {e}") from None


def _read_npz(path: Path) -> dict[str, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
        raise CalibrationError(f"calibration file {path}: cannot read it as a .npz archive: {e}") from None


def _npy_folder(folder: Path) -> dict[str, np.ndarray]:
    return {p.stem: _read_npy(p) for p in sorted(folder.glob("*.npy"))}


def read_folder(path: Path) -> list[dict[str, np.ndarray]]:
    """The samples a calibration folder (or one .npz file) holds, in a stable order."""
    path = Path(path)
    if path.is_file():
        if path.suffix != ".npz":
            raise CalibrationError(f"calibration {path}: a file must be a .npz archive (or give a folder)")
        return [_read_npz(path)]
    if not path.is_dir():
        raise CalibrationError(f"calibration folder {path} does not exist")
    npz = sorted(path.glob("*.npz"))
    npy = sorted(path.glob("*.npy"))
    subs = sorted((p for p in path.iterdir() if p.is_dir()), key=lambda p: p.name)
    kinds = [k for k, have in (("*.npz files", npz), ("*.npy files", npy), ("subfolders", subs)) if have]
    if not kinds:
        raise CalibrationError(f"calibration folder {path} holds no .npy or .npz files and no numbered subfolders")
    if len(kinds) > 1:
        raise CalibrationError(f"calibration folder {path} mixes {' and '.join(kinds)}; use one layout")
    if npz:
        return [_read_npz(p) for p in npz]
    if npy:
        return [_npy_folder(path)]
    bad = [p.name for p in subs if not p.name.isdigit()]
    if bad:
        raise CalibrationError(f"calibration folder {path}: subfolder {bad[0]!r} is not numbered (0, 1, ...)")
    samples = []
    for p in sorted(subs, key=lambda p: int(p.name)):
        sample = _npy_folder(p)
        if not sample:
            raise CalibrationError(f"calibration subfolder {p} holds no .npy files")
        samples.append(sample)
    return samples


def _split_batches(sample: dict[str, np.ndarray], static_batch: dict[str, int]) -> list[dict[str, np.ndarray]]:
    """A sample whose arrays all hold k > 1 batches of the program's static batch, as k samples."""
    ks = {n: a.shape[0] // static_batch[n] for n, a in sample.items()
          if n in static_batch and a.ndim and a.shape[0] % static_batch[n] == 0}
    if len(ks) != len(sample) or len(set(ks.values())) != 1 or next(iter(ks.values())) <= 1:
        return [sample]
    k = next(iter(ks.values()))
    return [{n: a[i * static_batch[n]:(i + 1) * static_batch[n]] for n, a in sample.items()} for i in range(k)]


def _check(sample: Mapping[str, Any], shapes: dict[str, Shape], where: str) -> dict[str, np.ndarray]:
    if not isinstance(sample, Mapping):
        raise CalibrationError(f"calibration {where}: a sample must be a dict of input name -> array, "
                               f"not {type(sample).__name__}")
    unknown = sorted(set(sample) - set(shapes))
    if unknown:
        raise CalibrationError(f"calibration {where}: {unknown[0]!r} is no input of the model "
                               f"(its inputs: {', '.join(shapes)})")
    missing = [n for n in shapes if n not in sample]
    if missing:
        raise CalibrationError(f"calibration {where}: input {missing[0]!r} is missing")
    out = {}
    for name, shape in shapes.items():
        a = np.asarray(sample[name])
        if a.dtype != shape.dtype.np:
            raise CalibrationError(f"calibration {where}: input {name!r} is {a.dtype}, the model takes {shape.dtype}")
        ok = a.ndim == shape.ndim and all(d.contains(n) for n, d in zip(a.shape, shape.dims, strict=True))
        if not ok:
            raise CalibrationError(f"calibration {where}: input {name!r} has shape {list(a.shape)}, "
                                   f"the model takes {shape}")
        out[name] = a
    return out


def iter_calibration(program: Program, calibration: Any, limit: int | None = None) -> Iterator[dict[str, np.ndarray]]:
    """The checked samples of `calibration` (a folder, a .npz file, or an iterable of input dicts);
    at most `limit` of them. A CalibrationError if there are none."""
    shapes = {n: s for n, s in program.get_parameter_shapes().items() if isinstance(s, Shape)}
    static_batch = {n: s.dims[0].min for n, s in shapes.items() if s.ndim and s.dims[0].is_fixed and s.dims[0].min}
    if isinstance(calibration, (str, Path)):
        where = str(calibration)
        samples: Iterable[Any] = (s for raw in read_folder(Path(calibration)) for s in _split_batches(raw, static_batch))
    elif isinstance(calibration, Mapping):
        where = "data"
        samples = _split_batches(dict(calibration), static_batch)
    elif isinstance(calibration, Iterable):
        where = "data"
        samples = calibration
    else:
        raise CalibrationError(f"calibration must be a folder, a .npz file or an iterable of input dicts, "
                               f"not {type(calibration).__name__}")
    n = 0
    for k, sample in enumerate(samples):
        if limit is not None and n >= limit:
            return
        yield _check(sample, shapes, f"{where} sample {k}")
        n += 1
    if n == 0:
        raise CalibrationError(f"calibration {where} holds no samples")
