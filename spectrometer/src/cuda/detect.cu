// The spectrometer's kernels: `sp_gather` (FFTs longer than a block), `sp_unpack` (the
// recorder's integers as the FFTs' complex input), `sp_detect` (fft shift, detection, antenna
// sum, integration of the FFT's output) and `sp_dft_detect` (the same for short transforms,
// each spectrum computed as a direct DFT of the recorder's integers, with no FFT node before
// it). Loaded by `gpu.rs` with `include_str!`.
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

// Adds weight w times the detected products of x (and y, the second polarisation, if npol is
// 2) to v: Stokes I (mode 0), XX YY Re(XY*) Im(XY*) (mode 1) or IQUV (mode 2).
__device__ __forceinline__ void sp_accumulate(float (&v)[4], float w, float2 x, float2 y,
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
// A thread loads U spectra of its run at once (`sp_detect`, U = SP_RUN_UNROLL = 8): one
// spectrum at a time, each load waited for before the next, a thread walking a run of 128
// spectra (1024x3072) left the kernel bound by latency (90 µs a block on an H100, 58 µs with
// U = 8). The loads in flight cost registers (80 against 48) and so occupancy, which a kernel
// whose runs are one spectrum long (a long FFT's, 2^20 points: 0.83 ms with U = 1, 1.20 ms
// with U = 8) needs for its parallelism: it gets `sp_detect_single` (U = 1; `gpu.rs` chooses
// by run length).
#define SP_RUN_UNROLL 8
template <unsigned U>
__device__ __forceinline__ void sp_detect_body(const float2* spec, float* acc,
        const float* weights, unsigned nfft, unsigned spb, unsigned npol, unsigned nchan,
        unsigned nant, unsigned sum, unsigned mode, unsigned nint, unsigned nslots,
        unsigned phase, unsigned slot0) {
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
            for (unsigned a = (sum ? 0 : o); a < (sum ? nant : o + 1); a++) {
                float w = weights[a];
                const float2* px =
                    spec + ((unsigned long long)(c * nant + a) * npol) * stream_len + j;
                unsigned q = q0;
                if (U > 1) {
                    // U spectra at a time, their loads issued together.
                    for (; q + U <= q1; q += U) {
                        float2 x[U], y[U];
                        #pragma unroll
                        for (unsigned u = 0; u < U; u++)
                            x[u] = px[(unsigned long long)(q + u) * nfft];
                        #pragma unroll
                        for (unsigned u = 0; u < U; u++)
                            y[u] = npol == 2 ? px[(unsigned long long)(q + u) * nfft + stream_len]
                                             : make_float2(0.f, 0.f);
                        #pragma unroll
                        for (unsigned u = 0; u < U; u++)
                            sp_accumulate(v, w, x[u], y[u], npol, mode);
                    }
                }
                for (; q < q1; q++) {
                    float2 x = px[(unsigned long long)q * nfft];
                    float2 y = npol == 2 ? px[(unsigned long long)q * nfft + stream_len]
                                         : make_float2(0.f, 0.f);
                    sp_accumulate(v, w, x, y, npol, mode);
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

// The two entries of sp_detect_body (see above). The last five arguments are
// `sp_dft_detect`'s (the three detection kernels share one signature).
extern "C" __global__ void sp_detect(const float2* spec, float* acc, const float* weights,
        unsigned nfft, unsigned spb, unsigned npol, unsigned nchan, unsigned nant,
        unsigned sum, unsigned mode, unsigned nint, unsigned nslots, unsigned phase,
        unsigned slot0, unsigned nbits, unsigned ant0, unsigned chan_start,
        unsigned nchan_per_ant, unsigned ntime) {
    sp_detect_body<SP_RUN_UNROLL>(spec, acc, weights, nfft, spb, npol, nchan, nant, sum, mode,
        nint, nslots, phase, slot0);
}
// Five blocks of 256 threads per SM (at most 48 registers, as the body before U had): the
// occupancy its parallelism needs.
extern "C" __global__ void __launch_bounds__(256, 5) sp_detect_single(const float2* spec,
        float* acc, const float* weights, unsigned nfft, unsigned spb, unsigned npol,
        unsigned nchan, unsigned nant, unsigned sum, unsigned mode, unsigned nint, unsigned nslots,
        unsigned phase, unsigned slot0, unsigned nbits, unsigned ant0, unsigned chan_start,
        unsigned nchan_per_ant, unsigned ntime) {
    sp_detect_body<1>(spec, acc, weights, nfft, spb, npol, nchan, nant, sum, mode, nint,
        nslots, phase, slot0);
}

// The longest transform sp_dft_detect computes (`DFT_MAX` in gpu.rs).
#define SP_DFT_MAX 16

// Sample i of the recorder's block: 4, 8 or 16-bit complex integers, decoded as the FFT's load
// callbacks decode them.
__device__ __forceinline__ float2 sp_sample(const unsigned char* in, unsigned long long i,
        unsigned nbits) {
    if (nbits == 8) { char2 v = ((const char2*)in)[i]; return make_float2((float)v.x, (float)v.y); }
    if (nbits == 16) { short2 v = ((const short2*)in)[i]; return make_float2((float)v.x, (float)v.y); }
    // 4 bits: high nibble real, low nibble imaginary, two's complement.
    signed char v = ((const signed char*)in)[i];
    signed char re = (signed char)(v >> 4);
    signed char im = (signed char)((signed char)(v << 4) >> 4);
    return make_float2((float)re, (float)im);
}

// sp_detect for transforms of at most SP_DFT_MAX points, with no FFT before it: each bin is a
// direct DFT (the sign of cuFFT's forward transform) of the block's [channel][time][pol]
// integers `in`, computed while detecting. Same outputs, runs and slots as sp_detect (its
// comment above), but one warp per run: lane = s * nfft + k, for S = 32 / nfft sub-lanes s
// that take every S-th spectrum of the run; their sums meet by warp shuffles in lane s = 0,
// which writes. Lanes past S * nfft only join the shuffles. Launched with whole warps:
// blockIdx.z * (blockDim.x / 32) + warp is the first run, striding by gridDim.z warps.
extern "C" __global__ void sp_dft_detect(const unsigned char* in, float* acc,
        const float* weights, unsigned nfft, unsigned spb, unsigned npol, unsigned nchan,
        unsigned nant, unsigned sum, unsigned mode, unsigned nint, unsigned nslots,
        unsigned phase, unsigned slot0, unsigned nbits, unsigned ant0, unsigned chan_start,
        unsigned nchan_per_ant, unsigned ntime) {
    if (nfft == 0 || nfft > SP_DFT_MAX) return;
    unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    unsigned S = 32 / nfft;
    unsigned k = lane % nfft, s = lane / nfft;   // s ≥ S: a lane that only shuffles
    unsigned c = blockIdx.y;
    unsigned h = (nfft + 1) / 2;
    unsigned j = k + h; if (j >= nfft) j -= nfft;
    // exp(-2 pi i j t / nfft); (j t) mod nfft keeps the angle in [0, 2 pi).
    float2 tw[SP_DFT_MAX];
    #pragma unroll
    for (unsigned t = 0; t < SP_DFT_MAX; t++) {
        float sn = 0.f, cs = 1.f;
        if (t < nfft) sincospif(-2.f * (float)((j * t) % nfft) / (float)nfft, &sn, &cs);
        tw[t] = make_float2(cs, sn);
    }
    unsigned nifs = mode == 0 ? 1 : 4;
    unsigned nout = sum ? 1 : nant;
    unsigned long long nchans = (unsigned long long)nchan * nfft;
    // Runs as in sp_detect.
    unsigned first = nint - phase;
    if (first > spb) first = spb;
    unsigned nruns = 1 + (spb - first + nint - 1) / nint;
    for (unsigned r = blockIdx.z * warps + warp; r < nruns; r += gridDim.z * warps) {
        unsigned q0 = r == 0 ? 0 : first + (r - 1) * nint;
        unsigned q1 = r == 0 ? first : q0 + nint;
        if (q1 > spb) q1 = spb;
        unsigned slot = slot0 + r; if (slot >= nslots) slot -= nslots;
        bool fresh = r > 0 || phase == 0;
        for (unsigned o = 0; o < nout; o++) {
            float v[4] = {0.f, 0.f, 0.f, 0.f};
            for (unsigned q = q0 + s; s < S && q < q1; q += S) {
                for (unsigned a = (sum ? 0 : o); a < (sum ? nant : o + 1); a++) {
                    unsigned long long gch = (unsigned long long)(ant0 + a) * nchan_per_ant
                        + chan_start + c;
                    unsigned long long i0 = (gch * ntime + (unsigned long long)q * nfft) * npol;
                    float2 x = make_float2(0.f, 0.f), y = make_float2(0.f, 0.f);
                    #pragma unroll
                    for (unsigned t = 0; t < SP_DFT_MAX; t++) {
                        if (t < nfft) {
                            float2 u = sp_sample(in, i0 + (unsigned long long)t * npol, nbits);
                            x.x += u.x * tw[t].x - u.y * tw[t].y;
                            x.y += u.x * tw[t].y + u.y * tw[t].x;
                            if (npol == 2) {
                                float2 p = sp_sample(in, i0 + (unsigned long long)t * npol + 1, nbits);
                                y.x += p.x * tw[t].x - p.y * tw[t].y;
                                y.y += p.x * tw[t].y + p.y * tw[t].x;
                            }
                        }
                    }
                    sp_accumulate(v, weights[a], x, y, npol, mode);
                }
            }
            // Lane k (s = 0) gathers the sums of lanes k + nfft, k + 2 nfft, ...
            for (unsigned s2 = 1; s2 < S; s2++) {
                unsigned from = k + s2 * nfft;
                #pragma unroll
                for (unsigned f = 0; f < 4; f++) {
                    float t = __shfl_sync(0xffffffffu, v[f], from);
                    if (s == 0) v[f] += t;
                }
            }
            if (s != 0) continue;
            #pragma unroll
            for (unsigned f = 0; f < 4; f++) {
                if (f >= nifs) break;
                unsigned long long at = (((unsigned long long)slot * nout + o) * nifs + f) * nchans
                    + (unsigned long long)c * nfft + k;
                acc[at] = fresh ? v[f] : acc[at] + v[f];
            }
        }
    }
}

// The input of a product's FFTs: spectra[((c * nant + a) * npol + pol) * len + tau] is sample
// tau (< len = spb * nfft) of polarisation pol of channel (ant0 + a) * nchan_per_ant +
// chan_start + c of `in`, a block (or a long FFT's gathered samples, `ntime` per channel) in
// the recorder's [channel][time][pol] layout, as float2: the transforms ordered [coarse
// channel][antenna][pol][spectrum], then transformed in place. Row blockIdx.y = c * nant + a;
// one thread per time step (its polarisations adjacent in `in`), so that the writes of a
// warp, 8 bytes per thread, are contiguous.
// (The engine first decoded the integers in a cuFFT load callback, which cudagraph ran as a
// conversion kernel before the callback-free transform: every sample's callback split its
// offset into channel, antenna, polarisation, spectrum and time with four divisions and read
// its parameters from memory, 115 µs a block for 1024x128 on an H100.)
extern "C" __global__ void sp_unpack(const unsigned char* in, float2* spectra,
        unsigned long long len, unsigned npol, unsigned nant, unsigned ant0, unsigned chan_start,
        unsigned nchan_per_ant, unsigned long long ntime, unsigned nbits) {
    unsigned row = blockIdx.y;
    unsigned a = row % nant, c = row / nant;
    unsigned long long gch = (unsigned long long)(ant0 + a) * nchan_per_ant + chan_start + c;
    unsigned long long first = gch * ntime * npol;
    float2* out = spectra + (unsigned long long)row * npol * len;
    unsigned long long step = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long tau = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
            tau < len; tau += step) {
        for (unsigned pol = 0; pol < npol; pol++)
            out[pol * len + tau] = sp_sample(in, first + tau * npol + pol, nbits);
    }
}
