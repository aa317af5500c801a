//! Tests of the packed arguments and of the arena their blocks are carved from.

use super::*;

#[test]
fn blocks_of_one_arena_share_chunks_and_the_last_one_out_frees_each() {
    let mut rec = crate::dag::RecordingBackend::new(crate::device::DeviceLimits::hopper());
    let x = rec.device_buffer::<f32>(16);
    let k = rec.kernel("k", &[8, 4]);
    let len = block_len(&k);
    let mut arena = ArgArena::default();
    let mut a = PackedArgs::new_in(&mut arena, &k, &crate::args![&x, 1u32]);
    let b = PackedArgs::new_in(&mut arena, &k, &crate::args![&x, 2u32]);
    assert!(Arc::ptr_eq(a.chunk(), b.chunk()), "one chunk");
    assert_eq!(a.chunk().len(), ArgArena::FIRST);
    // SAFETY (test): `len` cells on from `a`'s block are inside the chunk.
    assert_eq!(
        b.base(),
        unsafe { a.base().add(len) },
        "blocks side by side"
    );
    // Writing one block leaves its neighbour alone.
    a.set(1, &KernelArg::from(7u32));
    assert_eq!(a.param_bytes(1), 7u32.to_ne_bytes());
    assert_eq!(b.param_bytes(1), 2u32.to_ne_bytes());
    assert_eq!(b.param_bytes(0), x.alloc.ptr.to_ne_bytes());
    // Filling the first chunk moves on to one twice as large.
    let more: Vec<PackedArgs> = (0..ArgArena::FIRST / len)
        .map(|i| PackedArgs::new_in(&mut arena, &k, &crate::args![&x, i as u32]))
        .collect();
    let last = more.last().expect("some");
    assert!(!Arc::ptr_eq(a.chunk(), last.chunk()), "a new chunk");
    assert_eq!(last.chunk().len(), 2 * ArgArena::FIRST);
    for (i, p) in more.iter().enumerate() {
        assert_eq!(p.param_bytes(1), (i as u32).to_ne_bytes(), "block {i} kept");
    }
    // The first chunk lives as long as a block of it does; the arena moved on.
    let first = Arc::downgrade(a.chunk());
    let firsts: Vec<_> = more
        .into_iter()
        .filter(|p| Arc::ptr_eq(p.chunk(), a.chunk()))
        .collect();
    drop(a);
    assert!(first.upgrade().is_some(), "`b` still holds it");
    drop((b, firsts));
    assert!(first.upgrade().is_none(), "freed with its last block");
    // The buffers the blocks held were given back (one reference left: `x`'s own).
    assert_eq!(Arc::strong_count(&x.alloc), 1);
    // The current chunk is freed with the arena once its blocks are gone.
    let current = Arc::downgrade(arena.current().expect("a chunk"));
    drop(arena);
    assert!(current.upgrade().is_none());
}

#[test]
fn blocks_fill_a_chunk_to_its_last_cell_and_never_past_it() {
    let rec = crate::dag::RecordingBackend::new(crate::device::DeviceLimits::hopper());
    // 8 cells a block: 8 blocks fill the first chunk (64 cells) exactly.
    let eight = rec.kernel("k", &[4, 4, 4]);
    assert_eq!(block_len(&eight), 8);
    let mut arena = ArgArena::default();
    let v: Vec<_> = (0..20u32)
        .map(|i| PackedArgs::new_in(&mut arena, &eight, &crate::args![i, i, i]))
        .collect();
    assert!(Arc::ptr_eq(v[0].chunk(), v[7].chunk()), "exactly full");
    assert!(!Arc::ptr_eq(v[7].chunk(), v[8].chunk()));
    // 5 cells a block: the 13th would end one cell past the first chunk (Miri reports an
    // out-of-bounds write if it did).
    let five = rec.kernel("k", &[4, 4]);
    assert_eq!(block_len(&five), 5);
    let mut arena = ArgArena::default();
    let w: Vec<_> = (0..13u32)
        .map(|i| PackedArgs::new_in(&mut arena, &five, &crate::args![i, i]))
        .collect();
    assert!(Arc::ptr_eq(w[0].chunk(), w[11].chunk()));
    assert!(
        !Arc::ptr_eq(w[11].chunk(), w[12].chunk()),
        "the 13th does not fit"
    );
    for (i, p) in v.iter().enumerate() {
        assert_eq!(p.param_bytes(2), (i as u32).to_ne_bytes(), "block {i} kept");
    }
    for (i, p) in w.iter().enumerate() {
        assert_eq!(p.param_bytes(1), (i as u32).to_ne_bytes(), "block {i} kept");
    }
}

#[test]
fn removed_nodes_and_copies_of_a_dag_work_on_other_threads() {
    use crate::dag::{Dag, Op};
    let mut rec = crate::dag::RecordingBackend::new(crate::device::DeviceLimits::hopper());
    let x = rec.device_buffer::<f32>(16);
    let k = rec.kernel("k", &[8, 4]);
    let cfg = crate::LaunchConfig::new(1, 32);
    let mut dag = Dag::new();
    let ids: Vec<_> = (0..4u32)
        .map(|i| dag.add_kernel(&k, cfg, &crate::args![&x, i]).unwrap())
        .collect();
    // A removed node and a copy of the DAG share chunks with it, or did.
    let mut removed = dag.remove(ids[1]).unwrap();
    let mut copy = dag.clone();
    let k2 = k.clone();
    let t = std::thread::spawn(move || {
        let Op::Kernel(kn) = &mut removed.op else {
            panic!("a kernel node")
        };
        for j in 0..10u32 {
            kn.args.set(1, &KernelArg::from(j));
            let r = kn
                .args
                .update_one_in_place(1, &KernelArg::from(j + 100), |p| {
                    // SAFETY: the array has two pointers, the second to a `u32`.
                    Ok::<_, ()>(unsafe { *(*p.add(1)).cast::<u32>() })
                });
            assert_eq!(r, Some(Ok(j + 100)));
        }
        assert_eq!(kn.arg_bytes(1), 109u32.to_ne_bytes());
        for j in 0..10u32 {
            copy.add_kernel(&k2, cfg, &crate::args![0u64, j]).unwrap();
        }
        drop(removed);
        copy
    });
    for j in 0..30u32 {
        dag.add_kernel(&k, cfg, &crate::args![&x, j]).unwrap();
        dag.set_kernel_args(ids[2], &crate::args![&x, j]).unwrap();
    }
    let copy = t.join().unwrap();
    assert_eq!(copy.node_count(), 13);
    drop((dag, copy));
    assert_eq!(Arc::strong_count(&x.alloc), 1, "every reference given back");
}

#[test]
fn a_block_larger_than_a_chunk_gets_one_of_its_own_and_clones_their_own() {
    let rec = crate::dag::RecordingBackend::new(crate::device::DeviceLimits::hopper());
    let sizes = vec![8usize; ArgArena::MOST / 2];
    let big = rec.kernel("big", &sizes);
    let small = rec.kernel("small", &[4]);
    let mut arena = ArgArena::default();
    let s = PackedArgs::new_in(&mut arena, &small, &crate::args![1u32]);
    let args: Vec<KernelArg> = (0..sizes.len() as u64).map(KernelArg::from).collect();
    let b = PackedArgs::new_in(&mut arena, &big, &args);
    assert!(b.chunk().len() >= block_len(&big) && block_len(&big) > ArgArena::MOST);
    assert!(!Arc::ptr_eq(s.chunk(), b.chunk()));
    assert_eq!(b.param_bytes(4000), 4000u64.to_ne_bytes());
    // The arena still carves from the chunk it had.
    let s2 = PackedArgs::new_in(&mut arena, &small, &crate::args![2u32]);
    assert!(Arc::ptr_eq(s.chunk(), s2.chunk()));
    // A clone has a block of its own, of its own chunk of its size, and the same bytes.
    let c = s2.clone();
    assert!(!Arc::ptr_eq(c.chunk(), s2.chunk()));
    assert_eq!(c.chunk().len(), block_len(&small));
    assert_eq!(c.param_bytes(0), 2u32.to_ne_bytes());
    // A cloned arena carves elsewhere.
    let mut copy = arena.clone();
    let s3 = PackedArgs::new_in(&mut copy, &small, &crate::args![3u32]);
    assert!(!Arc::ptr_eq(s3.chunk(), s2.chunk()));
    assert_eq!(s2.param_bytes(0), 2u32.to_ne_bytes());
}

#[test]
fn mismatched_arguments_panic_before_anything_is_held() {
    let mut rec = crate::dag::RecordingBackend::new(crate::device::DeviceLimits::hopper());
    let x = rec.device_buffer::<f32>(16);
    let k = rec.kernel("k", &[8, 4]);
    // Too few arguments; an argument of the wrong size after a buffer.
    for bad in [crate::args![&x].to_vec(), crate::args![&x, 1u64].to_vec()] {
        let buffer = bad[0].buffer.expect("a buffer argument");
        let held = Arc::strong_count(buffer);
        let r =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| PackedArgs::new(&k, &bad)));
        assert!(r.is_err(), "mismatched arguments must panic");
        assert_eq!(
            Arc::strong_count(buffer),
            held,
            "no reference to the buffer is taken (and leaked) before the panic"
        );
    }
    let ok = crate::args![&x, 2.0f32];
    let p = PackedArgs::new(&k, &ok);
    assert_eq!(p.words(), 2, "values end at byte 12: two words");
    assert_eq!(p.param_bytes(1), &2.0f32.to_ne_bytes());
    assert_eq!(
        &p.storage_bytes()[12..],
        &[0; 4],
        "padding after the values is zeroed"
    );
}

#[test]
fn values_pack_at_parameter_offsets() {
    let k = Kernel::recording("k", &[4, 8, 2], 1);
    assert_eq!(
        k.params(),
        &[
            ParamInfo { offset: 0, size: 4 },
            ParamInfo { offset: 8, size: 8 },
            ParamInfo {
                offset: 16,
                size: 2
            }
        ]
    );
    let args = crate::args![1.5f32, 7u64, 3u16];
    k.check_args(&args).unwrap();
    let mut p = PackedArgs::new(&k, &args);
    assert_eq!(p.param_bytes(0), &1.5f32.to_ne_bytes());
    assert_eq!(p.param_bytes(1), &7u64.to_ne_bytes());
    let ptrs_before = p.kernel_params();
    p.set(1, &KernelArg::from(9u64));
    assert_eq!(p.param_bytes(1), &9u64.to_ne_bytes());
    assert_eq!(
        p.kernel_params(),
        ptrs_before,
        "update must not move the pointer array"
    );
    let c = p.clone();
    assert_eq!(c.param_bytes(1), &9u64.to_ne_bytes());
    // SAFETY: reading the first pointer of the clone's own array.
    let first = unsafe { *c.kernel_params() };
    assert_eq!(first as *const u8, c.param_bytes(0).as_ptr());
}

#[test]
fn the_pointer_array_reads_the_current_values_after_updates() {
    // What CUDA does with `kernelParams`: read each argument through its pointer. The
    // pointers are made once; every later write (set, swap, update in place, inline call)
    // must leave them valid for reading the values as they are now (Miri checks the
    // aliasing model: `cargo +nightly miri test --lib kernel::packed`).
    let k = Kernel::recording("k", &[4, 8], 1);
    let args = crate::args![1.5f32, 7u64];
    k.check_args(&args).unwrap();
    let mut p = PackedArgs::new(&k, &args);
    let read = |p: &PackedArgs| -> (f32, u64) {
        let ptrs = p.kernel_params();
        // SAFETY: one pointer per parameter, each at its value (4 and 8 bytes, aligned:
        // the values start on a cell and the offsets are the parameters' alignments).
        unsafe { (*(*ptrs).cast::<f32>(), *(*ptrs.add(1)).cast::<u64>()) }
    };
    assert_eq!(read(&p), (1.5, 7));
    p.set(1, &KernelArg::from(9u64));
    assert_eq!(read(&p), (1.5, 9));
    let two = KernelArg::from(2.5f32);
    let seen = p.update_one_in_place(0, &two, |ptrs| {
        // SAFETY: CUDA's view during the call: one pointer per parameter.
        Err::<(), _>(unsafe { (*(*ptrs).cast::<f32>(), *(*ptrs.add(1)).cast::<u64>()) })
    });
    assert_eq!(seen, Some(Err((2.5, 9))), "the call saw the new value");
    assert_eq!(read(&p), (1.5, 9), "and a refusal kept the old one");
    p.set_bytes(0, &2.5f32.to_ne_bytes());
    assert_eq!(read(&p), (2.5, 9));
    p.set_bytes(0, &1.5f32.to_ne_bytes());
    assert_eq!(read(&p), (1.5, 9));
    let refused = p.update_in_place(&crate::args![3.5f32, 11u64], |_| Err::<(), ()>(()));
    assert_eq!(refused, Some(Err(())));
    assert_eq!(read(&p), (1.5, 9));
    let done = p.update_in_place(&crate::args![4.5f32, 12u64], |_| Ok::<_, ()>(()));
    assert_eq!(done, Some(Ok(())));
    assert_eq!(read(&p), (4.5, 12));
    let eight = KernelArg::from(8u64);
    p.with_inline_args(std::iter::once((1, &eight)), |_| ());
    assert_eq!(read(&p), (4.5, 12));
    let _ = p.buffer_mut(0);
    assert_eq!(read(&p), (4.5, 12));
}

#[test]
fn buffers_are_held_once_per_copy_and_released_when_replaced_or_dropped() {
    let mut rec = crate::RecordingBackend::new(crate::DeviceLimits::hopper());
    let a = rec.device_buffer::<f32>(64);
    let b = rec.device_buffer::<f32>(64);
    let count = |buf: &crate::DeviceBuffer<f32>| Arc::strong_count(&buf.alloc);
    let (a0, b0) = (count(&a), count(&b));
    let k = Kernel::recording("k", &[8, 4, 8], 1);
    let args = crate::args![&a, 3u32, &a];
    let mut p = PackedArgs::new(&k, &args);
    drop(args);
    assert_eq!(count(&a), a0 + 2, "one reference per argument slot");
    assert!(p.buffers()[1].is_none());
    let c = p.clone();
    assert_eq!(count(&a), a0 + 4, "the clone holds its own references");
    let old = p.set(2, &KernelArg::from(&b));
    assert!(old.is_some_and(|o| Arc::ptr_eq(&o, &a.alloc)));
    assert_eq!(
        count(&a),
        a0 + 3,
        "the replaced buffer is given back (and dropped)"
    );
    assert_eq!(count(&b), b0 + 1);
    assert_eq!(p.param_bytes(2), &b.alloc.ptr.to_ne_bytes());
    assert_eq!(
        c.param_bytes(2),
        &a.alloc.ptr.to_ne_bytes(),
        "the clone is apart"
    );
    drop(p);
    assert_eq!(
        (count(&a), count(&b)),
        (a0 + 2, b0),
        "dropping releases every slot"
    );
    drop(c);
    assert_eq!(count(&a), a0);
}

#[test]
fn inline_arguments_are_pointed_to_for_the_call_only() {
    let k = Kernel::recording("k", &[4, 8], 1);
    let args = crate::args![1.5f32, 7u64];
    k.check_args(&args).unwrap();
    let mut p = PackedArgs::new(&k, &args);
    let own = |p: &PackedArgs| -> Vec<*mut c_void> {
        // SAFETY: the array has one pointer per parameter.
        unsafe { std::slice::from_raw_parts(p.kernel_params(), p.len()) }.to_vec()
    };
    let before = own(&p);
    let nine = KernelArg::from(9u64);
    let (p0, p1) = p.with_inline_args(std::iter::once((1, &nine)), |ptrs| {
        // SAFETY: `ptrs` has one entry per parameter, each pointing at its value (the
        // node's own, or `nine`'s, alive here; an inline value is 8-byte aligned).
        unsafe {
            assert_eq!(*(*ptrs.add(1)).cast::<u64>(), 9);
            (*ptrs, *ptrs.add(1))
        }
    });
    assert_eq!(p0, before[0], "other parameters point at the node's values");
    assert_eq!(p1, nine.as_ptr(), "no copy of an inline value");
    assert_eq!(
        own(&p),
        before,
        "the array points at the node's values again"
    );
    assert_eq!(
        p.param_bytes(1),
        &7u64.to_ne_bytes(),
        "the node is unchanged"
    );
    // Also when the call unwinds.
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        p.with_inline_args(std::iter::once((0, &KernelArg::from(2.5f32))), |_| {
            panic!("in the call")
        })
    }));
    assert!(r.is_err());
    assert_eq!(own(&p), before, "restored after a panic too");
}

#[test]
fn an_update_in_place_points_cuda_at_the_arguments_and_keeps_them_only_when_accepted() {
    let mut rec = crate::RecordingBackend::new(crate::DeviceLimits::hopper());
    let (a, b) = (rec.device_buffer::<u32>(8), rec.device_buffer::<u32>(8));
    let k = Kernel::recording("k", &[8, 4], 1);
    let mut p = PackedArgs::new(&k, &crate::args![&a, 7u32]);
    let own = |p: &PackedArgs| -> Vec<*mut c_void> {
        // SAFETY: the array has one pointer per parameter.
        unsafe { std::slice::from_raw_parts(p.kernel_params(), p.len()) }.to_vec()
    };
    let before = own(&p);
    let count = Arc::strong_count(&a.alloc);
    // CUDA reads the caller's bytes, where they are; the node takes them once accepted.
    let new = crate::args![&a, 9u32];
    let seen = p.update_in_place(&new, |ptrs| {
        // SAFETY: one pointer per parameter; the second at a `u32` (an inline value).
        Ok::<_, ()>(unsafe { (*ptrs.add(1), *(*ptrs.add(1)).cast::<u32>()) })
    });
    assert_eq!(
        seen,
        Some(Ok((new[1].as_ptr(), 9))),
        "no copy before the call"
    );
    assert_eq!(p.param_bytes(1), &9u32.to_ne_bytes());
    assert_eq!(
        own(&p),
        before,
        "the array points at the node's values again"
    );
    assert_eq!(
        Arc::strong_count(&a.alloc),
        count,
        "the same buffer: no reference taken"
    );
    // A refusal, a panic in the call, or an argument that does not fit (here the second,
    // after the first was pointed to) leave the node as it was.
    let refused = p.update_in_place(&crate::args![&a, 10u32], |_| Err::<(), ()>(()));
    assert_eq!(refused, Some(Err(())));
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        p.update_in_place(&crate::args![&a, 11u32], |_| -> Result<(), ()> {
            panic!("in the call")
        })
    }));
    assert!(r.is_err());
    for other in [
        crate::args![&a, 12u64],
        crate::args![&b, 12u32],
        crate::args![0u64, 12u32],
    ] {
        let r = p.update_in_place(&other, |_| -> Result<(), ()> { panic!("CUDA called") });
        assert!(r.is_none());
    }
    assert!(p
        .update_in_place(&crate::args![&a], |_| Ok::<_, ()>(()))
        .is_none());
    assert_eq!(p.param_bytes(1), &9u32.to_ne_bytes());
    assert_eq!(own(&p), before);
}

#[test]
fn staged_arguments_copy_big_ones_into_the_scratch() {
    let k = Kernel::recording("k", &[4, 8, 100], 1);
    let args = crate::args![1.5f32, 7u64, [3u8; 100]];
    k.check_args(&args).unwrap();
    let p = PackedArgs::new(&k, &args);
    let mut scratch = ArgScratch::default();
    // A value kept on the heap is copied with the rest, in the scratch.
    let big = KernelArg::from([5u8; 100]);
    let ptrs = p.staged(&mut scratch, &|i| (i == 2).then(|| big.as_bytes()));
    // SAFETY: `ptrs` has one entry per parameter, each pointing into the scratch.
    let (q1, q2) = unsafe { (*ptrs.add(1), *ptrs.add(2)) };
    // SAFETY: the scratch copy holds parameter 1 (8 bytes) and parameter 2 (100 bytes).
    let (v1, v2) = unsafe {
        (
            std::slice::from_raw_parts(q1.cast::<u8>(), 8),
            std::slice::from_raw_parts(q2.cast::<u8>(), 100),
        )
    };
    assert_eq!(v1, &7u64.to_ne_bytes());
    assert!(v2.iter().all(|&b| b == 5));
    assert!(
        p.param_bytes(2).iter().all(|&b| b == 3),
        "the node is unchanged"
    );
}
