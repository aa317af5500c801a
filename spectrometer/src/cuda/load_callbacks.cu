// The spectrometer's cuFFT load callbacks (C++ linkage: cuFFT's LTO callbacks need it), one per
// NBITS, reading the recorder's packed integers. Loaded by `gpu.rs` with `include_str!`; the
// parameter struct must match `LoadParams` there.
struct sp_params {
    unsigned long long ptr;
    unsigned int nfft, spb, npol, nant_sel, ant0, chan_start, nchan_per_ant, ntime;
};
// Element `offset` of the batched FFT input: transform b = offset / nfft, sample t; transforms
// are ordered [coarse channel][antenna][pol][spectrum]. Returns the index of that complex
// sample in the recorder's [channel][time][pol] layout.
__device__ unsigned long long sp_index(const sp_params* p, unsigned long long offset) {
    unsigned long long b = offset / p->nfft;
    unsigned long long t = offset % p->nfft;
    unsigned long long q = b % p->spb;
    unsigned long long s = b / p->spb;
    unsigned long long pol = s % p->npol;
    unsigned long long r = s / p->npol;
    unsigned long long a = r % p->nant_sel;
    unsigned long long c = r / p->nant_sel;
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
