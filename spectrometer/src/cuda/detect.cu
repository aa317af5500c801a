// The spectrometer's kernels: `sp_gather` (FFTs longer than a block), `sp_detect` (fft shift,
// detection, antenna sum, integration of the FFT's output) and `sp_dft_detect` (the same for
// short transforms, each spectrum computed as a direct DFT of the recorder's integers, with no
// FFT node before it). Loaded by `gpu.rs` with `include_str!`.
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

// Adds one spectrum's detected power (mode 0 total power, 1 full polarisation XX YY Re Im, 2
// Stokes IQUV) with weight w to v; y is read only for two polarisations.
__device__ __forceinline__ void sp_accumulate(float v[4], float2 x, float2 y, float w,
        unsigned npol, unsigned mode) {
    float xx = x.x * x.x + x.y * x.y;
    if (npol == 1) { v[0] += w * xx; return; }
    float yy = y.x * y.x + y.y * y.y;
    float re = x.x * y.x + x.y * y.y;   // Re(x conj(y))
    float im = x.y * y.x - x.x * y.y;   // Im(x conj(y))
    if (mode == 0) { v[0] += w * (xx + yy); }
    else if (mode == 1) { v[0] += w * xx; v[1] += w * yy; v[2] += w * re; v[3] += w * im; }
    else { v[0] += w * (xx + yy); v[1] += w * (xx - yy); v[2] += w * 2.f * re; v[3] += w * -2.f * im; }
}

// Where sp_detect's spectra come from: the FFT's output, [c][antenna][pol][q][bin] complex.
struct sp_from_spectra {
    const float2* spec;
    unsigned long long stream_len;   // spb * nfft
    unsigned nant, npol, nfft;
    __device__ void prepare(unsigned j) {}
    // Bin j of spectrum q of coarse channel c, antenna a: x (first polarisation), y (second).
    __device__ void get(unsigned c, unsigned a, unsigned q, unsigned j, float2* x, float2* y) const {
        unsigned long long sx = ((unsigned long long)(c * nant + a) * npol) * stream_len
            + (unsigned long long)q * nfft + j;
        *x = spec[sx];
        if (npol == 2) *y = spec[sx + stream_len];
    }
};

// The longest transform sp_dft_detect computes (`DFT_MAX` in gpu.rs).
#define SP_DFT_MAX 16

// Where sp_dft_detect's spectra come from: a direct DFT (nfft ≤ SP_DFT_MAX points, the sign
// of cuFFT's forward transform) of the recorder's [channel][time][pol] integers, 4, 8 or 16
// bits, decoded as the FFT's load callbacks decode them.
struct sp_from_samples {
    const unsigned char* in;
    unsigned nfft, npol, nbits, ant0, chan_start, nchan_per_ant, ntime;
    float2 tw[SP_DFT_MAX];   // exp(-2 pi i j t / nfft) for the thread's bin j
    __device__ void prepare(unsigned j) {
        #pragma unroll
        for (unsigned t = 0; t < SP_DFT_MAX; t++) {
            float s = 0.f, c = 1.f;
            // (j t) mod nfft keeps the angle in [0, 2 pi): sincospif is exact there.
            if (t < nfft) sincospif(-2.f * (float)((j * t) % nfft) / (float)nfft, &s, &c);
            tw[t] = make_float2(c, s);
        }
    }
    __device__ float2 sample(unsigned long long i) const {
        if (nbits == 8) { char2 v = ((const char2*)in)[i]; return make_float2((float)v.x, (float)v.y); }
        if (nbits == 16) { short2 v = ((const short2*)in)[i]; return make_float2((float)v.x, (float)v.y); }
        // 4 bits: high nibble real, low nibble imaginary, two's complement.
        signed char v = ((const signed char*)in)[i];
        signed char re = (signed char)(v >> 4);
        signed char im = (signed char)((signed char)(v << 4) >> 4);
        return make_float2((float)re, (float)im);
    }
    __device__ void get(unsigned c, unsigned a, unsigned q, unsigned j, float2* x, float2* y) const {
        unsigned long long gch = (unsigned long long)(ant0 + a) * nchan_per_ant + chan_start + c;
        unsigned long long i0 = (gch * ntime + (unsigned long long)q * nfft) * npol;
        float2 sx = make_float2(0.f, 0.f), sy = make_float2(0.f, 0.f);
        #pragma unroll
        for (unsigned t = 0; t < SP_DFT_MAX; t++) {
            if (t < nfft) {
                float2 w = tw[t];
                float2 u = sample(i0 + (unsigned long long)t * npol);
                sx.x += u.x * w.x - u.y * w.y;
                sx.y += u.x * w.y + u.y * w.x;
                if (npol == 2) {
                    float2 v = sample(i0 + (unsigned long long)t * npol + 1);
                    sy.x += v.x * w.x - v.y * w.y;
                    sy.y += v.x * w.y + v.y * w.x;
                }
            }
        }
        *x = sx;
        *y = sy;
    }
};

// One thread per (fine channel k, coarse channel c, run of spectra): a run is the part of one
// integration that falls in this block, so runs never share an output slot and no atomics are
// needed. Loops over outputs and the run's spectra, reading each spectrum's bin from `src`.
// acc: [slot][output][if][c * nfft + k].
// Blocks: blockDim.x ≥ nfft means blockDim.x / nfft runs per block (thread t: k = t % nfft,
// run blockIdx.z * per + t / nfft); otherwise one run's channels blockIdx.x * blockDim.x + t.
// Where the block starts, computed on the host (no 64-bit division here: it cost more than the
// detection itself for long FFTs): `phase` = g0 mod nint and `slot0` = (g0 div nint) mod
// nslots, g0 the global index of the block's first spectrum. Run 0 continues (or, at phase 0,
// starts) integration g0 div nint; run r starts integration g0 div nint + r.
template <class Src>
__device__ void sp_detect_runs(Src& src, float* acc, const float* weights,
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
    src.prepare(j);
    unsigned nifs = mode == 0 ? 1 : 4;
    unsigned nout = sum ? 1 : nant;
    unsigned long long nchans = (unsigned long long)nchan * nfft;
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
                    float2 x, y = make_float2(0.f, 0.f);
                    src.get(c, a, q, j, &x, &y);
                    sp_accumulate(v, x, y, weights[a], npol, mode);
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

// The two detection kernels share one signature: the FFT's output (`sp_detect`) or the raw
// block (`sp_dft_detect`) first; the last five arguments (where the selected channels lie in
// the block, and its sample width) are read by `sp_dft_detect` only.
extern "C" __global__ void sp_detect(const float2* spec, float* acc, const float* weights,
        unsigned nfft, unsigned spb, unsigned npol, unsigned nchan, unsigned nant,
        unsigned sum, unsigned mode, unsigned nint, unsigned nslots, unsigned phase,
        unsigned slot0, unsigned nbits, unsigned ant0, unsigned chan_start,
        unsigned nchan_per_ant, unsigned ntime) {
    sp_from_spectra src;
    src.spec = spec;
    src.stream_len = (unsigned long long)spb * nfft;
    src.nant = nant;
    src.npol = npol;
    src.nfft = nfft;
    sp_detect_runs(src, acc, weights, nfft, spb, npol, nchan, nant, sum, mode, nint, nslots,
        phase, slot0);
}

extern "C" __global__ void sp_dft_detect(const unsigned char* in, float* acc,
        const float* weights, unsigned nfft, unsigned spb, unsigned npol, unsigned nchan,
        unsigned nant, unsigned sum, unsigned mode, unsigned nint, unsigned nslots,
        unsigned phase, unsigned slot0, unsigned nbits, unsigned ant0, unsigned chan_start,
        unsigned nchan_per_ant, unsigned ntime) {
    if (nfft > SP_DFT_MAX) return;
    sp_from_samples src;
    src.in = in;
    src.nfft = nfft;
    src.npol = npol;
    src.nbits = nbits;
    src.ant0 = ant0;
    src.chan_start = chan_start;
    src.nchan_per_ant = nchan_per_ant;
    src.ntime = ntime;
    sp_detect_runs(src, acc, weights, nfft, spb, npol, nchan, nant, sum, mode, nint, nslots,
        phase, slot0);
}
