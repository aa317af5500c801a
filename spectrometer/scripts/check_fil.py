#!/usr/bin/env python3
"""Load a filterbank file written by cudagraph-spectrometer with the field's Python readers and
check it against the expected axes.

    check_fil.py FILE.fil --nchans N --nifs N --nsamples N --fch1 MHZ --foff MHZ \
        --tsamp S --tstart MJD [--peak-freq MHZ] [--readers blimpy,your,sigpyproc]

Every reader that is importable is used (blimpy is required unless --readers says otherwise);
a reader that logs a warning or emits a Python warning while loading fails the check. Exits 0
when every check passes and prints 'N passed, M failed'.
"""
import argparse
import importlib
import logging
import sys
import warnings

import numpy as np


class Collect(logging.Handler):
    def __init__(self):
        super().__init__(level=logging.WARNING)
        self.records = []

    def emit(self, record):
        self.records.append(self.format(record))


def raw_data(path, nifs, nchans):
    """The float32 data, read independently of any library: after b'HEADER_END'."""
    blob = open(path, "rb").read()
    end = blob.index(b"HEADER_END") + len(b"HEADER_END")
    return np.frombuffer(blob[end:], dtype="<f4").reshape(-1, nifs, nchans)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("--nchans", type=int, required=True)
    ap.add_argument("--nifs", type=int, required=True)
    ap.add_argument("--nsamples", type=int, required=True)
    ap.add_argument("--fch1", type=float, required=True)
    ap.add_argument("--foff", type=float, required=True)
    ap.add_argument("--tsamp", type=float, required=True)
    ap.add_argument("--tstart", type=float, required=True)
    ap.add_argument("--peak-freq", type=float, default=None,
                    help="a tone's frequency: the brightest channel (IF 0) must be there")
    ap.add_argument("--readers", default="blimpy,your,sigpyproc")
    ap.add_argument("--require", default="blimpy",
                    help="comma-separated readers that must be importable")
    a = ap.parse_args()

    passed, failed = 0, 0

    def check(name, ok, detail=""):
        nonlocal passed, failed
        if ok:
            passed += 1
            print(f"ok   {name}")
        else:
            failed += 1
            print(f"FAIL {name} {detail}")

    ref = raw_data(a.file, a.nifs, a.nchans)
    check("raw data shape", ref.shape == (a.nsamples, a.nifs, a.nchans), str(ref.shape))
    required = [r for r in a.require.split(",") if r]

    for reader in [r for r in a.readers.split(",") if r]:
        try:
            importlib.import_module(reader)
        except Exception as e:  # noqa: BLE001
            check(f"{reader}: importable", reader not in required, repr(e))
            if reader not in required:
                print(f"skip {reader}: not installed")
            continue
        handler = Collect()
        root = logging.getLogger()
        root.addHandler(handler)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                if reader == "blimpy":
                    from blimpy import Waterfall
                    wf = Waterfall(a.file)
                    h = wf.header
                    hdr = dict(nchans=h["nchans"], nifs=h["nifs"], fch1=h["fch1"],
                               foff=h["foff"], tsamp=h["tsamp"], tstart=h["tstart"])
                    data = np.asarray(wf.data)
                    freqs = np.asarray(wf.get_freqs())
                elif reader == "your":
                    from your import Your
                    y = Your(a.file)
                    h = y.your_header
                    hdr = dict(nchans=h.nchans, nifs=h.npol, fch1=h.fch1, foff=h.foff,
                               tsamp=h.tsamp, tstart=h.tstart)
                    # `your` reads one IF per call; for pol > 0 of a filterbank file it warns that
                    # this is untested and converts assuming IQUV, so only IF 0 (its default) is
                    # compared.
                    data = np.asarray(y.get_data(0, h.nspectra)).reshape(h.nspectra, 1, h.nchans)
                    freqs = h.fch1 + np.arange(h.nchans) * h.foff
                else:
                    from sigpyproc.readers import FilReader
                    f = FilReader(a.file)
                    h = f.header
                    hdr = dict(nchans=h.nchans, nifs=h.nifs, fch1=h.fch1, foff=h.foff,
                               tsamp=h.tsamp, tstart=h.tstart)
                    data = None  # sigpyproc reads one IF at most
                    if a.nifs == 1:
                        data = np.asarray(f.read_block(0, h.nsamples)).T[:, None, :]
                    freqs = h.fch1 + np.arange(h.nchans) * h.foff
            except Exception as e:  # noqa: BLE001
                root.removeHandler(handler)
                check(f"{reader}: loads", False, repr(e))
                continue
        root.removeHandler(handler)
        noise = handler.records + [str(w.message) for w in caught]
        check(f"{reader}: loads without warnings", not noise, "; ".join(noise))
        check(f"{reader}: nchans", hdr["nchans"] == a.nchans, str(hdr["nchans"]))
        check(f"{reader}: nifs", hdr["nifs"] == a.nifs, str(hdr["nifs"]))
        check(f"{reader}: fch1", abs(hdr["fch1"] - a.fch1) < 1e-9, repr(hdr["fch1"]))
        check(f"{reader}: foff", abs(hdr["foff"] - a.foff) < 1e-15, repr(hdr["foff"]))
        check(f"{reader}: tsamp", abs(hdr["tsamp"] - a.tsamp) < 1e-15, repr(hdr["tsamp"]))
        check(f"{reader}: tstart", abs(hdr["tstart"] - a.tstart) * 86400 < 1e-6, repr(hdr["tstart"]))
        if data is not None:
            want = ref[:, : data.shape[1], :] if reader == "your" else ref
            check(f"{reader}: data shape", data.shape == want.shape, str(data.shape))
            if data.shape == want.shape:
                check(f"{reader}: data values", np.array_equal(data, want))
        want_freqs = a.fch1 + np.arange(a.nchans) * a.foff
        check(f"{reader}: frequency axis", np.allclose(np.sort(freqs), np.sort(want_freqs), rtol=0, atol=1e-9))
        if a.peak_freq is not None:
            peak = int(np.argmax(ref[:, 0, :].sum(axis=0)))
            check(f"{reader}: tone at {a.peak_freq} MHz in the brightest channel",
                  abs(want_freqs[peak] - a.peak_freq) <= abs(a.foff) / 2 + 1e-9,
                  f"brightest channel {peak} at {want_freqs[peak]} MHz")

    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
