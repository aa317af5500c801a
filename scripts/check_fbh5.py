#!/usr/bin/env python3
"""Checks FBH5 files with blimpy: each `X.h5` must load with `blimpy.Waterfall` and give the same
header and data as `X.fil` beside it (blimpy reads both formats).

    python3 scripts/check_fbh5.py OUT_DIR      # every .h5 in OUT_DIR with its .fil
    python3 scripts/check_fbh5.py A.h5 B.h5 …  # named files; each needs its .fil

Needs `pip install blimpy hdf5plugin` (hdf5plugin brings the bitshuffle filter to h5py).
Exit status 0 when every pair matches; it prints one line a file.
"""
import sys
from pathlib import Path

import hdf5plugin  # noqa: F401  (registers the bitshuffle filter with h5py)
import numpy as np
from blimpy import Waterfall

KEYS = ["telescope_id", "machine_id", "data_type", "nchans", "nifs", "nbits", "ibeam",
        "nbeams", "tstart", "tsamp", "fch1", "foff", "source_name", "rawdatafile"]


def check(h5: Path) -> list:
    fil = h5.with_suffix(".fil")
    a, b = Waterfall(str(h5)), Waterfall(str(fil))
    wrong = []
    if a.container.__class__.__name__ != "H5Reader":
        wrong.append(f"read by {a.container.__class__.__name__}, not blimpy's H5Reader")
    for k in KEYS:
        va, vb = a.header.get(k), b.header.get(k)
        if isinstance(vb, float) and isinstance(va, float):
            same = np.isclose(va, vb, rtol=1e-12, atol=0)
        else:
            same = va == vb
        if not same:
            wrong.append(f"header {k}: {va!r} in the .h5, {vb!r} in the .fil")
    # Sky position: blimpy gives astropy angles for both formats.
    for k in ["src_raj", "src_dej"]:
        da = abs(a.header[k].deg - b.header[k].deg)
        if da > 1e-6:
            wrong.append(f"header {k}: {a.header[k]} in the .h5, {b.header[k]} in the .fil")
    if a.data.shape != b.data.shape:
        wrong.append(f"data shape {a.data.shape} in the .h5, {b.data.shape} in the .fil")
    elif not np.array_equal(a.data, b.data):
        wrong.append(f"data differ (max |diff| {np.max(np.abs(a.data - b.data))})")
    return wrong


def main() -> int:
    args = [Path(p) for p in sys.argv[1:]]
    if not args:
        print(__doc__)
        return 2
    files = []
    for p in args:
        files += sorted(p.glob("*.h5")) if p.is_dir() else [p]
    if not files:
        print("check_fbh5: no .h5 files")
        return 1
    bad = 0
    for h5 in files:
        wrong = check(h5)
        shape = Waterfall(str(h5)).data.shape
        if wrong:
            bad += 1
            print(f"{h5}: DIFFERS from {h5.with_suffix('.fil').name}: " + "; ".join(wrong))
        else:
            print(f"{h5}: blimpy reads the same header and data {shape} as from "
                  f"{h5.with_suffix('.fil').name}")
    print(f"check_fbh5: {len(files) - bad} passed, {bad} failed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
