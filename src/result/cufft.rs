//! cuFFT calls (`libcufft`).
