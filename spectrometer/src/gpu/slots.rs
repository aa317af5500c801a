//! The arithmetic of the integration slots, apart from the device: how `sp_detect`'s thread
//! blocks cover the runs of spectra, how many slots a product's ring has and which of them a
//! block copies back, and where a block starts in the integrations; how many staging and
//! output buffers the engine cycles through, and which output buffer holds which block's
//! integrations.

use std::collections::VecDeque;

/// `sp_detect`'s threads per block for an `nfft`-point product, and how many runs of spectra
/// one block covers (`blockDim.x / nfft` in the kernel when `nfft` < 256, else 1).
pub(super) fn detect_block(nfft: usize) -> (u32, usize) {
    if nfft >= 256 {
        (256, 1)
    } else {
        let per = 256 / nfft;
        ((per * nfft) as u32, per)
    }
}

/// The most runs of spectra (parts of one integration each) a block of `spb` spectra (at
/// least one) holds, `nint` per integration: `1 + ⌈(spb − 1) / nint⌉`, reached when the
/// block's first spectrum ends an integration. The detection kernels' grids cover this many
/// (at most `spb / nint + 2`, the slot ring's size, which they used before: for a long FFT's
/// block of one spectrum that gave two or three runs where there is one, and the threads of
/// the others returned at once, two thirds of `sp_detect_single`'s 2^20-point grid).
pub(super) fn max_runs(spb: usize, nint: usize) -> usize {
    1 + (spb - 1).div_ceil(nint)
}

/// A product's ring of integration slots on the device, `(nslots, d2h_slots)`: how many slots,
/// and how many of them a completing block copies back (`None`: all of them). `spb` spectra
/// per block (1 for an FFT longer than a block, `long`), `nint` per integration.
///
/// A block holds at most `spb / nint + 2` runs of spectra (one slot each), which is the ring
/// in general; a block's D2H then copies the whole ring, since the integrations it completes
/// may wrap around it. Two common shapes copy only what completed:
/// - `nint` a multiple of `spb` or larger (long integrations, long FFTs): a block completes at
///   most one integration, so one slot is copied;
/// - `spb` a multiple of `nint` (1024x16 from 131,072-sample blocks: 8 per block): every block
///   completes exactly `c = spb / nint` integrations starting at a multiple of `c`, so with a
///   ring of `2c` slots they are slots `0..c` or `c..2c`, never wrapped. For full
///   polarisation this copies 8 MiB a block instead of the 10 MiB ring, and the copy is on
///   the critical path of every block (the next block's graph waits for it).
pub(super) fn slot_ring(spb: usize, nint: usize, long: bool) -> (usize, Option<usize>) {
    let general = spb / nint + 2;
    if long || nint >= spb {
        (general, Some(1))
    } else if spb.is_multiple_of(nint) {
        let c = spb / nint;
        (general.max(2 * c), Some(c))
    } else {
        (general, None)
    }
}

/// Whether a product's copy-back can run one block late, in the next block's graph beside
/// its FFT (`GpuEngine`'s deferred D2H), rather than after the block's own detection: true
/// when every block completes exactly the `c = spb / nint` integrations it starts (`spb` a
/// multiple of `nint`, not a long FFT). The ring of [`slot_ring`] then has at least `2c`
/// slots, so the slots block `k + 1` writes are never the ones block `k` completed and the
/// next block's graph copies them back while its own detection runs; block `k + 2` writes
/// them again only after that graph has finished.
pub(super) fn deferred_copy(spb: usize, nint: usize, long: bool) -> bool {
    !long && spb.is_multiple_of(nint)
}

/// The elements of a ring of `nslots` slots of `slot_len` values that a block copies back
/// when `first_done` is the first integration it completes (`GpuEngine`'s `copy_back`).
pub(super) fn slots_copied(
    d2h_slots: Option<usize>,
    nslots: usize,
    first_done: u64,
    slot_len: usize,
) -> std::ops::Range<usize> {
    match d2h_slots {
        None => 0..nslots * slot_len,
        Some(n) => {
            let s = (first_done % nslots as u64) as usize;
            s * slot_len..(s + n) * slot_len
        }
    }
}

/// The most device staging buffers the engine cycles through ([`stage_depth`]).
pub(super) const MAX_STAGE_DEPTH: usize = 8;

/// Bytes a product's output buffers may take together before it gets only two
/// ([`out_depth`]).
pub(super) const OUT_RING_BYTES: usize = 256 << 20;

/// How many blocks' H2D copies may be queued ahead of the GPU work that reads them: the
/// number of device staging buffers (block `k` goes to buffer `k mod depth`), `nfft`s the
/// products' transform lengths, `new` the samples a block adds.
///
/// Two (a block's copy overlaps the previous block's work) unless a product's FFT is longer
/// than a block. Such a product's gather runs every block, but its FFT and detection only on
/// every `b`-th (`b = nfft / new`), and that block's work takes several blocks' copy time
/// (2^20 points from 131,072-sample blocks: about 3 ms against 0.6 ms of H2D). With two
/// buffers the copy of block `k + 2` waits for block `k`'s work, so the copies stopped
/// through the long block and the GPU stages ran at the copy rate plus that stall (64 % of
/// H2D for the three-product set). With `b` buffers (at most [`MAX_STAGE_DEPTH`]) the copies
/// run on through it, and the short blocks after it catch up from the buffers filled.
pub(super) fn stage_depth(new: usize, nffts: impl IntoIterator<Item = usize>) -> usize {
    nffts
        .into_iter()
        .filter(|&n| n > new && n.is_multiple_of(new))
        .map(|n| n / new)
        .max()
        .unwrap_or(2)
        .clamp(2, MAX_STAGE_DEPTH)
}

/// How many pinned output buffers a product whose slot ring takes `ring_bytes` gets: one per
/// staging buffer (`depth`), so that the engine reads a block's integrations `depth` blocks
/// after queuing it and never waits on the way; two where that would take more than
/// [`OUT_RING_BYTES`] (a long FFT's ring: 256 MiB a slot for 2^20 points of 64 channels). Such
/// a product copies back rarely (once per integration of many blocks), and the engine reads
/// its oldest buffer early only when a copy would otherwise overwrite it.
pub(super) fn out_depth(depth: usize, ring_bytes: usize) -> usize {
    if ring_bytes.saturating_mul(depth) <= OUT_RING_BYTES {
        depth
    } else {
        2
    }
}

/// A product's copy-backs: which blocks complete integrations, whose work copies them to the
/// host (the block's own, or the next block's for a deferred copy), into which of the
/// product's pinned output buffers (taken in turn), and which copies the engine has not read
/// yet. Host-side bookkeeping only: `GpuEngine` queues the copies and reads the buffers.
pub(super) struct CopyBacks {
    /// Block `k` ends after spectrum `(k + 1) spb / blocks` of every stream: `spb` spectra a
    /// block (and `blocks` = 1), or one spectrum every `blocks` blocks (`spb` = 1, an FFT
    /// longer than a block).
    spb: u64,
    blocks: u64,
    nint: u64,
    /// The plan's integrations (those after it are never completed).
    integrations: u64,
    /// The copy of block `k`'s integrations runs in block `k + 1`'s work ([`deferred_copy`]).
    pub(super) deferred: bool,
    /// Output buffers ([`out_depth`]).
    nbuf: usize,
    /// Copies queued so far: the next goes to buffer `copies mod nbuf`.
    copies: u64,
    /// The copies queued and not yet read: (block whose integrations it holds, buffer),
    /// oldest first; never more than `nbuf`.
    pending: VecDeque<(u64, usize)>,
    /// Integrations read so far (all before this one).
    pub(super) emitted: u64,
}

impl CopyBacks {
    /// A product of `spb` spectra a block or, where `blocks` > 1, one spectrum every `blocks`
    /// blocks, integrating `nint` spectra, `integrations` of them, with `nbuf` output buffers.
    pub(super) fn new(
        spb: usize,
        blocks: usize,
        nint: usize,
        integrations: u64,
        deferred: bool,
        nbuf: usize,
    ) -> CopyBacks {
        assert!(nbuf >= 2 && spb >= 1 && blocks >= 1 && nint >= 1);
        CopyBacks {
            spb: spb as u64,
            blocks: blocks as u64,
            nint: nint as u64,
            integrations,
            deferred,
            nbuf,
            copies: 0,
            pending: VecDeque::with_capacity(nbuf),
            emitted: 0,
        }
    }

    /// Integrations complete after block `k` (capped at the plan's count).
    pub(super) fn done_after(&self, k: u64) -> u64 {
        ((k + 1) * self.spb / self.blocks / self.nint).min(self.integrations)
    }

    /// The first integration block `k` completes, if it completes any (only then are the
    /// integrations copied back).
    pub(super) fn first_completed(&self, k: u64) -> Option<u64> {
        let before = k.checked_sub(1).map_or(0, |p| self.done_after(p));
        (self.done_after(k) > before).then_some(before)
    }

    /// The block whose integrations the work of block `k` copies back (itself, or the one
    /// before for a deferred copy), and the first integration that block completes; `None`
    /// when that block completes none.
    pub(super) fn copied_by(&self, k: u64) -> Option<(u64, u64)> {
        let b = k.checked_sub(u64::from(self.deferred))?;
        self.first_completed(b).map(|first| (b, first))
    }

    /// Before queuing block `k`: whether its copy-back would go to a buffer whose last copy
    /// has not been read (then the oldest must be read first: [`CopyBacks::pop`]).
    pub(super) fn full_for(&self, k: u64) -> bool {
        self.pending.len() >= self.nbuf && self.copied_by(k).is_some()
    }

    /// The buffer for the copy-back of block `block`'s integrations, noted as pending.
    pub(super) fn next_out(&mut self, block: u64) -> usize {
        assert!(self.pending.len() < self.nbuf, "room made before the copy");
        let i = (self.copies % self.nbuf as u64) as usize;
        self.copies += 1;
        self.pending.push_back((block, i));
        i
    }

    /// Whether the oldest pending copy is due once `launched` blocks are queued: it copied
    /// block `lag` or more blocks back (one more for a deferred copy), so that the engine
    /// runs at most `lag` blocks ahead of what it reads.
    pub(super) fn due(&self, launched: u64, lag: u64) -> bool {
        self.pending
            .front()
            .is_some_and(|&(b, _)| b + lag + u64::from(self.deferred) <= launched)
    }

    /// Whether a copy-back is queued and not yet read.
    pub(super) fn pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// The oldest pending copy-back (block, buffer), taken off the list.
    pub(super) fn pop(&mut self) -> Option<(u64, usize)> {
        self.pending.pop_front()
    }
}

/// Where a block whose first spectrum has global index `g0` starts, as `sp_detect` takes it
/// (`GpuEngine`'s `run_start`): `(g0 mod nint, (g0 div nint) mod nslots)`.
pub(super) fn block_start(g0: u64, nint: usize, nslots: usize) -> (u32, u32) {
    let nint = nint as u64;
    ((g0 % nint) as u32, ((g0 / nint) % nslots as u64) as u32)
}

#[cfg(test)]
mod tests {
    use super::{
        block_start, deferred_copy, detect_block, max_runs, out_depth, slot_ring, slots_copied,
        stage_depth, CopyBacks, MAX_STAGE_DEPTH, OUT_RING_BYTES,
    };

    #[test]
    #[cfg_attr(
        miri,
        ignore = "integer arithmetic over millions of cases: no unsafe code or memory access for Miri to check, hours under it"
    )]
    fn a_blocks_copy_back_holds_every_integration_it_completes() {
        // Blocks of `spb` spectra (or, for a long FFT, one spectrum every `blocks` blocks):
        // the integrations block k completes are [before, done); each one's slot must lie in
        // the range copied back, and that range in the ring.
        let slot_len = 3;
        let mut partial = 0;
        for long_blocks in [None, Some(2), Some(8)] {
            for spb in 1..=40usize {
                if long_blocks.is_some() && spb > 1 {
                    break;
                }
                for nint in 1..=40usize {
                    let (nslots, d2h) = slot_ring(spb, nint, long_blocks.is_some());
                    assert!(nslots >= spb / nint + 2, "a block's runs fit in the ring");
                    partial += usize::from(d2h.is_some());
                    let spectra = |k: u64| match long_blocks {
                        None => (k + 1) * spb as u64,
                        Some(b) => (k + 1) / b,
                    };
                    for k in 0..200u64 {
                        let before = if k == 0 {
                            0
                        } else {
                            spectra(k - 1) / nint as u64
                        };
                        let done = spectra(k) / nint as u64;
                        if done == before {
                            continue;
                        }
                        let r = slots_copied(d2h, nslots, before, slot_len);
                        assert!(r.end <= nslots * slot_len, "within the ring");
                        for integ in before..done {
                            let at = (integ % nslots as u64) as usize * slot_len;
                            assert!(
                                r.start <= at && at + slot_len <= r.end,
                                "spb {spb}, nint {nint}, block {k}: integration {integ} \
                                 (slot at {at}) outside {r:?}"
                            );
                        }
                    }
                }
            }
        }
        assert!(
            partial > 1000,
            "most shapes copy part of the ring ({partial})"
        );
    }

    /// A deferred copy-back (block `k`'s completed slots copied while block `k + 1` runs) must
    /// read slots block `k + 1` never writes, and must be one unwrapped range.
    #[test]
    fn a_deferred_copy_reads_no_slot_the_next_block_writes() {
        let mut deferred = 0;
        for spb in 1..=64usize {
            for nint in 1..=64usize {
                for long in [false, true] {
                    if !deferred_copy(spb, nint, long) {
                        continue;
                    }
                    deferred += 1;
                    let (nslots, d2h) = slot_ring(spb, nint, long);
                    let c = spb / nint;
                    assert_eq!(
                        d2h,
                        Some(c),
                        "spb {spb}, nint {nint}: copies what completed"
                    );
                    for k in 0..50u64 {
                        let (spb, nint) = (spb as u64, nint as u64);
                        // Block k completes [k c, (k + 1) c); block k + 1 writes the
                        // integrations its spectra [(k + 1) spb, (k + 2) spb) fall in.
                        let copied = slots_copied(d2h, nslots, k * c as u64, 1);
                        assert!(copied.end <= nslots, "unwrapped");
                        let first = (k + 1) * spb / nint;
                        let last = ((k + 2) * spb - 1) / nint;
                        for integ in first..=last {
                            let slot = (integ % nslots as u64) as usize;
                            assert!(
                                !copied.contains(&slot),
                                "spb {spb}, nint {nint}, block {k}: slot {slot} copied \
                                 ({copied:?}) while the next block writes it"
                            );
                        }
                    }
                }
            }
        }
        assert!(deferred > 100, "shapes with a deferred copy ({deferred})");
        assert!(!deferred_copy(128, 51, false) && !deferred_copy(1, 1, true));
        assert!(deferred_copy(128, 16, false) && deferred_copy(128, 128, false));
    }

    /// `sp_detect`'s runs of a block (first spectrum, end, slot, whether the run starts its
    /// integration), as the kernel derives them from `block_start`'s phase and slot with
    /// 32-bit arithmetic (a transcription of its loop header).
    fn kernel_runs(
        phase: u32,
        slot0: u32,
        spb: u32,
        nint: u32,
        nslots: u32,
    ) -> Vec<(u32, u32, u32, bool)> {
        let first = (nint - phase).min(spb);
        let nruns = 1 + (spb - first).div_ceil(nint);
        assert!(nruns <= nslots, "more runs than slots");
        (0..nruns)
            .map(|r| {
                let q0 = if r == 0 { 0 } else { first + (r - 1) * nint };
                let q1 = if r == 0 { first } else { q0 + nint }.min(spb);
                let mut slot = slot0 + r;
                if slot >= nslots {
                    slot -= nslots;
                }
                (q0, q1, slot, r > 0 || phase == 0)
            })
            .collect()
    }

    /// `max_runs` bounds the runs the kernel derives for every phase, and is reached.
    #[test]
    fn max_runs_bounds_every_blocks_runs() {
        for spb in 1..=40u32 {
            for nint in 1..=45u32 {
                let bound = max_runs(spb as usize, nint as usize);
                let nslots = spb / nint + 2;
                let most = (0..nint)
                    .map(|phase| kernel_runs(phase, 0, spb, nint, nslots).len())
                    .max()
                    .unwrap();
                assert!(
                    most <= bound,
                    "spb {spb}, nint {nint}: {most} runs > {bound}"
                );
                assert_eq!(most, bound, "spb {spb}, nint {nint}: the bound is reached");
            }
        }
    }

    #[test]
    #[cfg_attr(
        miri,
        ignore = "integer arithmetic over millions of cases: no unsafe code or memory access for Miri to check, hours under it"
    )]
    fn runs_from_the_hosts_phase_and_slot_are_the_integrations_by_definition() {
        // Every spectrum q of the block belongs to integration (g0 + q) / nint, whose slot is
        // that modulo nslots; a run starts its integration when (g0 + q0) is a multiple of nint.
        for (spb, nint) in [
            (128, 16),
            (128, 51),
            (1, 51),
            (1, 1),
            (8, 3),
            (16384, 128),
            (4, 4096),
        ] {
            let nslots = spb / nint + 2;
            for g0 in (0..3 * nint as u64 + 5).chain([u64::from(u32::MAX) * 7 + 3]) {
                let g0 = g0 * spb as u64 + g0 % 7;
                let (phase, slot0) = block_start(g0, nint, nslots);
                let runs = kernel_runs(phase, slot0, spb as u32, nint as u32, nslots as u32);
                let mut next = 0;
                for (q0, q1, slot, fresh) in runs {
                    assert_eq!(q0, next, "runs tile the block (g0 {g0}, nint {nint})");
                    assert!(q1 > q0);
                    let integ = (g0 + q0 as u64) / nint as u64;
                    for q in q0..q1 {
                        assert_eq!(
                            (g0 + q as u64) / nint as u64,
                            integ,
                            "one integration per run"
                        );
                    }
                    assert_eq!(
                        slot as u64,
                        integ % nslots as u64,
                        "slot (g0 {g0}, q0 {q0})"
                    );
                    assert_eq!(fresh, (g0 + q0 as u64).is_multiple_of(nint as u64));
                    next = q1;
                }
                assert_eq!(next, spb as u32, "runs cover the block");
            }
        }
    }

    /// `sp_detect`'s blocks: whole runs of `nfft` threads below 256 points (never a partial
    /// run, never more than 256 threads), one run's 256 channels at a time from 256 up.
    #[test]
    fn detect_blocks_hold_whole_runs() {
        for nfft in 1..=1024 {
            let (threads, per) = detect_block(nfft);
            assert!(threads <= 256 && per >= 1, "nfft {nfft}");
            if nfft < 256 {
                assert_eq!(threads as usize, per * nfft, "nfft {nfft}");
                assert!(
                    threads as usize + nfft > 256,
                    "nfft {nfft}: room for one more run"
                );
            } else {
                assert_eq!((threads, per), (256, 1), "nfft {nfft}");
            }
        }
        assert_eq!(detect_block(8), (256, 32));
    }

    #[test]
    fn staging_depth_follows_the_longest_fft() {
        let new = 131_072;
        // Transforms within a block (or as long as one): two buffers.
        assert_eq!(stage_depth(new, [8, 1024, new]), 2);
        assert_eq!(stage_depth(new, []), 2);
        // 2^20 points: one spectrum every 8 blocks, 8 buffers.
        assert_eq!(stage_depth(new, [1 << 20, 8, 1024]), 8);
        assert_eq!(stage_depth(new, [2 * new]), 2);
        assert_eq!(stage_depth(new, [4 * new, 2 * new]), 4);
        // Capped.
        assert_eq!(stage_depth(new, [1 << 24]), MAX_STAGE_DEPTH);
        // A length that is neither (the engine refuses it) does not count.
        assert_eq!(stage_depth(new, [3 * new / 2]), 2);
    }

    #[test]
    fn small_rings_get_an_output_buffer_per_staging_buffer() {
        assert_eq!(out_depth(8, 1 << 20), 8);
        assert_eq!(out_depth(8, OUT_RING_BYTES / 8), 8);
        assert_eq!(out_depth(8, OUT_RING_BYTES / 8 + 1), 2);
        assert_eq!(out_depth(2, 512 << 20), 2);
        assert_eq!(out_depth(8, usize::MAX), 2);
    }

    /// The engine's order of calls, simulated with the copies done at once: room made before
    /// each block, the block's copy-back (if any) into `next_out`, then the due copies read;
    /// at the end every copy read, then a deferred product's last block copied and read.
    /// Every read must find its buffer holding the block it was queued for (no copy-back
    /// overwrote a buffer not yet read), the reads must cover every integration once in
    /// order, and the engine must never be more than `depth` blocks ahead of what it read,
    /// nor wait (read early) where a product has as many buffers as staging buffers.
    #[test]
    fn copy_backs_never_overwrite_an_unread_buffer() {
        let mut early_reads = 0;
        for (spb, blocks) in [(1, 1), (3, 1), (8, 1), (1, 2), (1, 8)] {
            for nint in 1..=12usize {
                let long = blocks > 1;
                let deferred = deferred_copy(spb, nint, long);
                for depth in 2..=MAX_STAGE_DEPTH {
                    for nbuf in [2, depth] {
                        for nblocks in [1u64, 2, 7, 40] {
                            let integrations = nblocks * spb as u64 / blocks as u64 / nint as u64;
                            let mut c =
                                CopyBacks::new(spb, blocks, nint, integrations, deferred, nbuf);
                            let mut bufs = vec![None; nbuf];
                            let mut read = Vec::new();
                            let mut take = |c: &mut CopyBacks, bufs: &[Option<u64>]| {
                                let (b, i) = c.pop().expect("pending");
                                assert_eq!(bufs[i], Some(b), "buffer {i} overwritten");
                                let done = c.done_after(b);
                                read.extend(c.emitted..done);
                                c.emitted = c.emitted.max(done);
                            };
                            for k in 0..nblocks {
                                if c.full_for(k) {
                                    assert!(nbuf < depth, "no early read with a buffer each");
                                    early_reads += 1;
                                    take(&mut c, &bufs);
                                }
                                if let Some((b, _)) = c.copied_by(k) {
                                    bufs[c.next_out(b)] = Some(b);
                                }
                                while c.due(k + 1, depth as u64) {
                                    take(&mut c, &bufs);
                                }
                                if let Some(&(b, _)) = c.pending.front() {
                                    assert!(
                                        b + depth as u64 + u64::from(deferred) > k + 1,
                                        "a due copy left"
                                    );
                                }
                                assert!(c.pending.len() < nbuf.max(depth), "at most depth − 1");
                            }
                            while c.pending() {
                                take(&mut c, &bufs);
                            }
                            if let Some(last) = nblocks.checked_sub(1) {
                                if deferred && c.first_completed(last).is_some() {
                                    bufs[c.next_out(last)] = Some(last);
                                }
                            }
                            while c.pending() {
                                take(&mut c, &bufs);
                            }
                            assert_eq!(
                                read,
                                (0..integrations).collect::<Vec<_>>(),
                                "spb {spb}, blocks {blocks}, nint {nint}, depth {depth}, \
                                 nbuf {nbuf}, {nblocks} blocks"
                            );
                        }
                    }
                }
            }
        }
        assert!(
            early_reads > 100,
            "the early read is exercised ({early_reads})"
        );
    }
}
