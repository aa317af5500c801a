// The spectrometer's kernels: `sp_gather` (FFTs longer than a block) and `sp_detect` (fft
// shift, detection, antenna sum, integration). Loaded by `gpu.rs` with `include_str!`.
// Copies the new samples of every channel of a block (rows of `row_bytes`, `in_pitch` apart)
// into column `col` (bytes) of the long buffer (rows `out_pitch` apart), for FFTs longer than
// a block. 16 bytes per thread where every offset allows (the buffers themselves are
// cudaMalloc'd, 256-byte aligned), else byte by byte.
extern "C" __global__ void sp_gather(const unsigned char* in, unsigned char* out,
        unsigned long long row_bytes, unsigned long long in_pitch, unsigned long long out_pitch,
        unsigned long long col) {
    unsigned long long row = blockIdx.y;
    const unsigned char* src = in + row * in_pitch;
    unsigned char* dst = out + row * out_pitch + col;
    unsigned long long i0 = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    if (((row_bytes | in_pitch | out_pitch | col) & 15) == 0) {
        const uint4* s = (const uint4*)src;
        uint4* d = (uint4*)dst;
        for (unsigned long long i = i0; i < row_bytes / 16; i += stride) d[i] = s[i];
    } else {
        for (unsigned long long i = i0; i < row_bytes; i += stride) dst[i] = src[i];
    }
}

// One thread per (fine channel k, coarse channel c, run of spectra): a run is the part of one
// integration that falls in this block, so runs never share an output slot and no atomics are
// needed. Loops over outputs and the run's spectra.
// spec: [c][antenna][pol][q][bin] complex; acc: [slot][output][if][c * nfft + k].
// Blocks: blockDim.x ≥ nfft means blockDim.x / nfft runs per block (thread t: k = t % nfft,
// run blockIdx.z * per + t / nfft); otherwise one run's channels blockIdx.x * blockDim.x + t.
// Where the block starts, computed on the host (no 64-bit division here: it cost more than the
// detection itself for long FFTs): `phase` = g0 mod nint and `slot0` = (g0 div nint) mod
// nslots, g0 the global index of the block's first spectrum. Run 0 continues (or, at phase 0,
// starts) integration g0 div nint; run r starts integration g0 div nint + r.
extern "C" __global__ void sp_detect(const float2* spec, float* acc, const float* weights,
        unsigned nfft, unsigned spb, unsigned npol, unsigned nchan, unsigned nant,
        unsigned sum, unsigned mode, unsigned nint, unsigned nslots, unsigned phase,
        unsigned slot0) {
    unsigned per = blockDim.x >= nfft ? blockDim.x / nfft : 1;
    unsigned k = per > 1 ? threadIdx.x % nfft : blockIdx.x * blockDim.x + threadIdx.x;
    unsigned sub = per > 1 ? threadIdx.x / nfft : 0;
    unsigned c = blockIdx.y;
    if (k >= nfft || sub >= per) return;
    unsigned h = (nfft + 1) / 2;
    unsigned j = k + h; if (j >= nfft) j -= nfft;
    unsigned nifs = mode == 0 ? 1 : 4;
    unsigned nout = sum ? 1 : nant;
    unsigned long long nchans = (unsigned long long)nchan * nfft;
    unsigned long long stream_len = (unsigned long long)spb * nfft;
    // Runs: the first ends at the first integration boundary of the block, then one per nint.
    unsigned first = nint - phase;
    if (first > spb) first = spb;
    unsigned nruns = 1 + (spb - first + nint - 1) / nint;
    for (unsigned r = blockIdx.z * per + sub; r < nruns; r += gridDim.z * per) {
        unsigned q0 = r == 0 ? 0 : first + (r - 1) * nint;
        unsigned q1 = r == 0 ? first : q0 + nint;
        if (q1 > spb) q1 = spb;
        // nruns ≤ nslots, so slot0 + r < 2 nslots.
        unsigned slot = slot0 + r; if (slot >= nslots) slot -= nslots;
        bool fresh = r > 0 || phase == 0;
        for (unsigned o = 0; o < nout; o++) {
            float v[4] = {0.f, 0.f, 0.f, 0.f};
            for (unsigned q = q0; q < q1; q++) {
                for (unsigned a = (sum ? 0 : o); a < (sum ? nant : o + 1); a++) {
                    float w = weights[a];
                    unsigned long long sx = ((unsigned long long)(c * nant + a) * npol) * stream_len
                        + (unsigned long long)q * nfft + j;
                    float2 x = spec[sx];
                    float xx = x.x * x.x + x.y * x.y;
                    if (npol == 1) { v[0] += w * xx; continue; }
                    float2 y = spec[sx + stream_len];
                    float yy = y.x * y.x + y.y * y.y;
                    float re = x.x * y.x + x.y * y.y;   // Re(x conj(y))
                    float im = x.y * y.x - x.x * y.y;   // Im(x conj(y))
                    if (mode == 0) { v[0] += w * (xx + yy); }
                    else if (mode == 1) { v[0] += w * xx; v[1] += w * yy; v[2] += w * re; v[3] += w * im; }
                    else { v[0] += w * (xx + yy); v[1] += w * (xx - yy); v[2] += w * 2.f * re; v[3] += w * -2.f * im; }
                }
            }
            for (unsigned f = 0; f < nifs; f++) {
                unsigned long long at = (((unsigned long long)slot * nout + o) * nifs + f) * nchans
                    + (unsigned long long)c * nfft + k;
                acc[at] = fresh ? v[f] : acc[at] + v[f];
            }
        }
    }
}
