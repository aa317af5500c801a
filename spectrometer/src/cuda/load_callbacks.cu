// The spectrometer's cuFFT load callbacks (C++ linkage: cuFFT's LTO callbacks need it), one per
// NBITS, reading the recorder's packed integers. Loaded by `gpu/callback.rs` with `include_str!`;
// the parameter struct must match `LoadParams` there.
struct sp_params {
    unsigned long long ptr;
    unsigned int nfft, spb, npol, nant_sel, ant0, chan_start, nchan_per_ant, ntime;
    // Division of 32-bit values by nfft, spb, npol and nant_sel: the multiplier and the two
    // shifts (`sh1 | sh2 << 8`) of each, computed on the host (`Div32` in `gpu/callback.rs`).
    unsigned int nfft_m, nfft_s, spb_m, spb_s, npol_m, npol_s, nant_m, nant_s;
};
// n / d for any 32-bit n, with the multiplier m and shifts s of d: Granlund and Montgomery's
// unsigned division by an invariant integer (t = mulhi(m, n); q = (t + ((n − t) >> sh1)) >> sh2).
// A 64-bit division by a value known only at run time is a long software routine on the GPU,
// and the callback runs once per input sample: its four 64-bit divisions and remainders were
// about 14 % of a 1024-point FFT node's time (218.6 against 188.3 µs on an H100).
__device__ __forceinline__ unsigned sp_div32(unsigned n, unsigned m, unsigned s) {
    unsigned t = __umulhi(n, m);
    return (t + ((n - t) >> (s & 0xffu))) >> (s >> 8);
}
// Element `offset` of the batched FFT input: transform b = offset / nfft, sample t; transforms
// are ordered [coarse channel][antenna][pol][spectrum]. Returns the index of that complex
// sample in the recorder's [channel][time][pol] layout. Offsets below 2^32 (every block the
// recorders write) take the 32-bit path; larger ones divide in 64 bits.
__device__ unsigned long long sp_index(const sp_params* p, unsigned long long offset) {
    unsigned long long t, q, pol, a, c;
    if ((offset >> 32) == 0) {
        unsigned o = (unsigned)offset;
        unsigned b = sp_div32(o, p->nfft_m, p->nfft_s);
        unsigned s = sp_div32(b, p->spb_m, p->spb_s);
        unsigned r = sp_div32(s, p->npol_m, p->npol_s);
        unsigned c32 = sp_div32(r, p->nant_m, p->nant_s);
        t = o - b * p->nfft;
        q = b - s * p->spb;
        pol = s - r * p->npol;
        a = r - c32 * p->nant_sel;
        c = c32;
    } else {
        unsigned long long b = offset / p->nfft;
        t = offset % p->nfft;
        q = b % p->spb;
        unsigned long long s = b / p->spb;
        pol = s % p->npol;
        unsigned long long r = s / p->npol;
        a = r % p->nant_sel;
        c = r / p->nant_sel;
    }
    unsigned long long gch = (p->ant0 + a) * p->nchan_per_ant + p->chan_start + c;
    return (gch * p->ntime + q * p->nfft + t) * p->npol + pol;
}
// Where a load callback reads: `ptr` when set, else `dataIn` (the whole input block); null when
// the parameters are zeroed (nothing to load: the fusion measurement runs with zeroed
// parameters), and the callback then loads zeros.
__device__ const void* sp_source(const sp_params* p, void* dataIn) {
    if (p->nfft == 0 || p->spb == 0 || p->npol == 0 || p->nant_sel == 0) return 0;
    return p->ptr ? (const void*)p->ptr : (const void*)dataIn;
}
__device__ float2 sp_load_8(void* dataIn, unsigned long long offset, void* info, void* smem) {
    const sp_params* p = (const sp_params*)info;
    const char2* in = (const char2*)sp_source(p, dataIn);
    if (!in) return make_float2(0.f, 0.f);
    char2 v = in[sp_index(p, offset)];
    return make_float2((float)v.x, (float)v.y);
}
__device__ float2 sp_load_16(void* dataIn, unsigned long long offset, void* info, void* smem) {
    const sp_params* p = (const sp_params*)info;
    const short2* in = (const short2*)sp_source(p, dataIn);
    if (!in) return make_float2(0.f, 0.f);
    short2 v = in[sp_index(p, offset)];
    return make_float2((float)v.x, (float)v.y);
}
__device__ float2 sp_load_4(void* dataIn, unsigned long long offset, void* info, void* smem) {
    const sp_params* p = (const sp_params*)info;
    const signed char* in = (const signed char*)sp_source(p, dataIn);
    if (!in) return make_float2(0.f, 0.f);
    signed char v = in[sp_index(p, offset)];
    // High nibble real, low nibble imaginary, two's complement.
    signed char re = (signed char)(v >> 4);
    signed char im = (signed char)((signed char)(v << 4) >> 4);
    return make_float2((float)re, (float)im);
}
