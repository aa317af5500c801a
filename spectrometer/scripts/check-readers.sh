#!/usr/bin/env bash
# Generates a scan, runs the spectrometer on it, and loads the filterbank files with blimpy (and
# `your` and sigpyproc when installed) through check_fil.py. CI can run this where blimpy can be
# pip-installed:
#
#   spectrometer/scripts/check-readers.sh            # uses $PYTHON, or makes a venv in $VENV
#
# Environment: PYTHON (a python with blimpy; default: $VENV/bin/python, created and filled with
# `pip install blimpy` if missing), VENV (default: target/spectrometer-readers-venv),
# CARGO_TARGET_DIR (as usual), EXTRA_READERS=1 (also pip-install your and sigpyproc).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cd "$root"

venv="${VENV:-$root/target/spectrometer-readers-venv}"
if [ -z "${PYTHON:-}" ]; then
  if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q blimpy
    if [ "${EXTRA_READERS:-0}" = 1 ]; then "$venv/bin/pip" install -q your sigpyproc || true; fi
  fi
  PYTHON="$venv/bin/python"
fi

cargo build -q -p cudagraph-spectrometer
bin="${CARGO_TARGET_DIR:-$root/target}/debug/cudagraph-spectrometer"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# 4 channels of -3.125 MHz below 1426.25 MHz (OBSBW negative), 2 pols, 8 bits, DIRECTIO, overlap,
# two files, one dropped block; a tone at 1421.5 MHz + 10 fine channels of 1024.
"$bin" generate -o "$work/raw" --stem scan --nchan 4 --obsfreq 1420 --obsbw -12.5 --ntime 2048 \
  --overlap 64 --directio --blocks-per-file 4 --files 2 --drop-block 5 \
  --tone 1421.59301757812500:20 --stt-imjd 60000 --stt-smjd 43200 --stt-offs 0.25 >/dev/null
"$bin" run -q "$work/raw/scan" -o "$work/out" -p 1024x4 -p 64x8:iquv

# Expected axes, from the formulas (not from the Rust code): chan_bw = OBSBW / 4,
# fch1 = OBSFREQ - OBSBW/2 + chan_bw/2 - (Nfft/2) * foff, foff = chan_bw / Nfft,
# tsamp = TBIN * Nfft * Nint with TBIN = 1 / |chan_bw|, tstart = 60000 + (43200 + 0.25) / 86400.
# Time axis: 8 blocks of 2048 - 64 = 1984 new samples = 15872 samples.
read -r fch1_0 foff_0 tsamp_0 fch1_1 foff_1 tsamp_1 tstart n0 n1 <<<"$("$PYTHON" - <<'PY'
cbw = -12.5 / 4
tbin = 1e-6 / abs(cbw)
c0 = 1420 + 6.25 + cbw / 2
out = []
for nfft, nint in [(1024, 4), (64, 8)]:
    foff = cbw / nfft
    out += [repr(c0 - (nfft // 2) * foff), repr(foff), repr(tbin * nfft * nint)]
samples = 8 * (2048 - 64)
print(*out, repr(60000 + (43200 + 0.25) / 86400), samples // 4096, samples // 512)
PY
)"

readers="blimpy,your,sigpyproc"
"$PYTHON" "$here/check_fil.py" "$work/out/scan.0.fil" --readers "$readers" \
  --nchans 4096 --nifs 1 --nsamples "$n0" --fch1 "$fch1_0" --foff "$foff_0" \
  --tsamp "$tsamp_0" --tstart "$tstart" --peak-freq 1421.59301757812500
"$PYTHON" "$here/check_fil.py" "$work/out/scan.1.fil" --readers "$readers" \
  --nchans 256 --nifs 4 --nsamples "$n1" --fch1 "$fch1_1" --foff "$foff_1" \
  --tsamp "$tsamp_1" --tstart "$tstart"
