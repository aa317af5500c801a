//! The writer thread of a run ([`writer_loop`]): integrations written to the spectra files in
//! order, each file's write-back to the disk started as it grows ([`FilWriter`], [`Flusher`]),
//! the files synced and the plots drawn at the end.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::engine::{check_integration, Integration, SpectraPool};
use crate::error::{Error, Result};
use crate::filterbank::write_f32s;
use crate::output::Temporaries;
use crate::plan::Plan;
use crate::plot::PlotData;

/// A spectra file being written.
pub(super) enum SpectraFile {
    Filterbank(FilWriter),
    #[cfg(feature = "fbh5")]
    Fbh5(crate::fbh5::Fbh5Writer),
}

impl SpectraFile {
    fn write(
        &mut self,
        path: &std::path::Path,
        spectrum: &[f32],
        flusher: &mut Flusher,
    ) -> Result<()> {
        match self {
            SpectraFile::Filterbank(f) => {
                f.write(spectrum, flusher).map_err(|e| Error::io(path, e))
            }
            #[cfg(feature = "fbh5")]
            SpectraFile::Fbh5(w) => w.write_spectrum(spectrum),
        }
    }

    /// Writes what is buffered, closes the file and waits for it to reach the disk (after the
    /// [`Flusher`] is dropped, so that the errors of its write-backs are known).
    fn finish(self, path: &std::path::Path) -> Result<()> {
        match self {
            SpectraFile::Filterbank(f) => f.finish().map_err(|e| Error::io(path, e)),
            #[cfg(feature = "fbh5")]
            SpectraFile::Fbh5(w) => {
                w.finish()?;
                let file = File::open(path).map_err(|e| Error::io(path, e))?;
                file.sync_all().map_err(|e| Error::io(path, e))
            }
        }
    }
}

/// A filterbank file being written, its write-back to the disk started as it grows (by a
/// [`Flusher`]), so that most of it has reached the disk when the final `sync_all` (before the
/// outputs are renamed into place) runs, rather than all of it waiting for that call, as the
/// kernel would otherwise keep it in the page cache (a full-polarisation product of a 16 GiB
/// scan is 4 GiB).
pub(super) struct FilWriter {
    out: BufWriter<File>,
    /// Bytes handed to `out`.
    written: u64,
    /// `written` when the write-back was last requested.
    requested: u64,
    /// Bytes to accumulate before asking for their write-back ([`WRITEBACK_EVERY`]).
    every: u64,
    /// The first error of a write-back the flusher ran for this file: `sync_data` on the
    /// flusher's handle may be the call that sees an error of the write-back (Linux reports one
    /// once per open file, and the two handles share theirs), so it is kept for
    /// [`FilWriter::finish`].
    flush_error: Arc<Mutex<Option<std::io::Error>>>,
}

/// How many bytes a [`FilWriter`] lets accumulate before asking for their write-back.
pub(super) const WRITEBACK_EVERY: u64 = 64 << 20;

impl FilWriter {
    pub(super) fn new(file: File, header: &[u8], every: u64) -> std::io::Result<FilWriter> {
        let mut out = BufWriter::new(file);
        out.write_all(header)?;
        Ok(FilWriter {
            out,
            written: header.len() as u64,
            requested: 0,
            every,
            flush_error: Arc::default(),
        })
    }

    fn write(&mut self, spectrum: &[f32], flusher: &mut Flusher) -> std::io::Result<()> {
        write_f32s(&mut self.out, spectrum)?;
        self.written += std::mem::size_of_val(spectrum) as u64;
        if self.written - self.requested >= self.every {
            self.out.flush()?;
            if flusher.request(self.out.get_ref(), &self.flush_error) {
                self.requested = self.written;
            }
        }
        Ok(())
    }

    /// Writes what is buffered, waits for the whole file to reach the disk, and reports the
    /// first error of that or of an earlier write-back (call it after the [`Flusher`] is
    /// dropped).
    fn finish(self) -> std::io::Result<()> {
        let file = self.out.into_inner().map_err(|e| e.into_error())?;
        let synced = file.sync_all();
        let earlier = self
            .flush_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        earlier.map_or(synced, Err)
    }
}

/// One write-back request: a second handle of the file, and where its error goes.
type FlushRequest = (File, Arc<Mutex<Option<std::io::Error>>>);

/// A thread, started on the first request, that writes files handed to it back to the disk
/// (`sync_data` on a second handle of each) while the writer goes on writing them. Requests
/// queue up to [`Flusher::QUEUE`]; one that does not fit is refused, and the file asks again
/// with its next spectrum. The first error of each file is kept for its
/// [`FilWriter::finish`]. Dropping it waits for the requests queued.
#[derive(Default)]
struct Flusher {
    running: Option<(SyncSender<FlushRequest>, std::thread::JoinHandle<()>)>,
    /// The thread could not be started: requests are refused.
    failed: bool,
}

impl Flusher {
    const QUEUE: usize = 16;

    /// Asks for `file`'s write-back; whether the request was taken.
    fn request(&mut self, file: &File, error: &Arc<Mutex<Option<std::io::Error>>>) -> bool {
        if self.running.is_none() && !self.failed {
            let (tx, rx) = sync_channel::<FlushRequest>(Self::QUEUE);
            let spawned = std::thread::Builder::new()
                .name("fil-flusher".into())
                .spawn(move || {
                    for (file, error) in rx {
                        if let Err(e) = file.sync_data() {
                            error
                                .lock()
                                .unwrap_or_else(|p| p.into_inner())
                                .get_or_insert(e);
                        }
                    }
                });
            match spawned {
                Ok(thread) => self.running = Some((tx, thread)),
                Err(_) => self.failed = true,
            }
        }
        let Some((tx, _)) = &self.running else {
            return false;
        };
        match file.try_clone() {
            Ok(clone) => tx.try_send((clone, Arc::clone(error))).is_ok(),
            Err(_) => false,
        }
    }
}

impl Drop for Flusher {
    fn drop(&mut self) {
        if let Some((tx, thread)) = self.running.take() {
            drop(tx);
            let _ = thread.join();
        }
    }
}

/// One output stream being written.
pub(super) struct Sink {
    pub(super) file: SpectraFile,
    pub(super) path: PathBuf,
    pub(super) written: u64,
    pub(super) plot: Option<(PlotData, PathBuf)>,
}

pub(super) struct WriterDone {
    pub(super) write_time: Duration,
    pub(super) sync_time: Duration,
    pub(super) plot_time: Duration,
}

pub(super) fn writer_loop(
    rx: Receiver<Vec<Integration>>,
    mut sinks: Vec<Vec<Sink>>,
    plan: Plan,
    pool: SpectraPool,
) -> Result<WriterDone> {
    let mut write_time = Duration::ZERO;
    let mut flusher = Flusher::default();
    for batch in rx {
        let t = Instant::now();
        for it in batch {
            check_integration(&plan, &it).map_err(Error::Engine)?;
            let s = &mut sinks[it.product][it.output];
            if it.index != s.written {
                return Err(Error::Engine(format!(
                    "product {} output {}: integration {} arrived when {} was expected",
                    it.product, it.output, it.index, s.written
                )));
            }
            s.file.write(&s.path, &it.data, &mut flusher)?;
            if let Some((pd, _)) = &mut s.plot {
                pd.add(&it.data);
            }
            s.written += 1;
            pool.give(it.data);
        }
        write_time += t.elapsed();
    }
    let t = Instant::now();
    // A write-back under way finishes first (what `sync_all` would wait for anyway).
    drop(flusher);
    let mut plots = Vec::new();
    for (p, outs) in sinks.into_iter().enumerate() {
        for (o, s) in outs.into_iter().enumerate() {
            let want = plan.products[p].integrations;
            if s.written != want {
                return Err(Error::Engine(format!(
                    "product {p} output {o}: {} integration(s) produced, {want} planned",
                    s.written
                )));
            }
            s.file.finish(&s.path)?;
            plots.extend(s.plot);
        }
    }
    let sync_time = t.elapsed();
    let t = Instant::now();
    let any_plot = !plots.is_empty();
    for (pd, path) in plots {
        Temporaries::write_with(&path, || pd.render(&path)).map_err(|e| Error::io(&path, e))??;
    }
    Ok(WriterDone {
        write_time,
        sync_time,
        plot_time: if any_plot {
            t.elapsed()
        } else {
            Duration::ZERO
        },
    })
}

#[cfg(test)]
mod tests {
    use super::{FilWriter, Flusher, SpectraFile};

    /// A file past several write-back requests (made while it grows, run on the flusher's
    /// thread) holds exactly the header and every spectrum, in order.
    #[test]
    fn files_written_back_as_they_grow_keep_every_byte() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.fil");
        let header = b"HEADER_START-and-so-on";
        // 64 KiB spectra, a request every 1 MiB (Miri, which interprets every step: 1 KiB and
        // 16 KiB).
        let spectrum_len = if cfg!(miri) { 1 << 8 } else { 1 << 14 };
        let count = 100;
        let mut flusher = Flusher::default();
        let file = std::fs::File::create(&path).unwrap();
        let every = 16 * 4 * spectrum_len as u64;
        let mut fil = FilWriter::new(file, header, every).unwrap();
        let mut requests = 0;
        for i in 0..count {
            let spectrum: Vec<f32> = (0..spectrum_len).map(|k| (i * 7 + k) as f32).collect();
            let before = fil.requested;
            fil.write(&spectrum, &mut flusher).unwrap();
            requests += usize::from(fil.requested != before);
        }
        assert!(requests >= 3, "{requests} write-back requests taken");
        assert!(flusher.running.is_some(), "the flusher thread ran");
        drop(flusher);
        SpectraFile::Filterbank(fil).finish(&path).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(&bytes[..header.len()], header);
        let data: &[u8] = &bytes[header.len()..];
        assert_eq!(data.len(), count * spectrum_len * 4);
        for (i, s) in data.chunks(spectrum_len * 4).enumerate() {
            for (k, v) in s.chunks(4).enumerate().step_by(97) {
                let v = f32::from_le_bytes(v.try_into().unwrap());
                assert_eq!(v, (i * 7 + k) as f32, "spectrum {i}, value {k}");
            }
        }
    }

    /// An error one of the flusher's write-backs met is the file's error at the end, although
    /// the final sync succeeds.
    #[test]
    fn a_write_back_error_fails_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.fil");
        let file = std::fs::File::create(&path).unwrap();
        let fil = FilWriter::new(file, b"h", 1 << 20).unwrap();
        *fil.flush_error.lock().unwrap() = Some(std::io::Error::other("injected EIO"));
        let e = SpectraFile::Filterbank(fil).finish(&path).unwrap_err();
        let crate::error::Error::Io { path: at, source } = &e else {
            panic!("{e:?}")
        };
        assert_eq!((at, source.to_string().as_str()), (&path, "injected EIO"));
    }
}
