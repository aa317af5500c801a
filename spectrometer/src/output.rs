//! Output files written under temporary names and renamed together once a stem's run has
//! succeeded, so that a failed or interrupted run leaves no partial output.
//!
//! - Each output is written as a hidden temporary beside its final name,
//!   `DIR/.BASE.tmp-PID.EXT` ([`temp_name`]).
//! - [`Temporaries::commit`] renames them all to their final names. If one rename fails, the
//!   ones already done are undone and the files they replaced are put back, so the directory
//!   holds either every new output or none.
//! - Dropping [`Temporaries`] uncommitted removes its files (an error, a panic).
//! - Every temporary of the process is also in one registry, so that a signal handler can
//!   remove them all before the process exits ([`remove_all_and_exit`]; the binary installs it
//!   for SIGINT, SIGTERM and SIGHUP). Temporaries are created, rendered into and renamed with
//!   the registry locked, and the handler exits with it locked, so no temporary can appear
//!   after the handler has removed them.
//! - A temporary left by a process that died without cleaning up (SIGKILL, a power cut) is
//!   found by the next run that writes the same output ([`remove_stale`]): removed when its
//!   process is gone, reported when it is still running.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use crate::error::{Error, Result};

/// The temporaries of the process, and whether a signal handler has started removing them.
struct Registry {
    paths: Vec<PathBuf>,
    terminating: bool,
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    paths: Vec::new(),
    terminating: false,
});

/// The registry, locked. A panic while it was locked cannot leave it inconsistent (every
/// change is one push or one retain), so a poisoned lock is taken as it is.
fn registry() -> MutexGuard<'static, Registry> {
    REGISTRY.lock().unwrap_or_else(|p| p.into_inner())
}

/// The error for work refused because the process is being interrupted.
fn interrupted(path: &Path) -> Error {
    Error::io(
        path,
        std::io::Error::new(
            std::io::ErrorKind::Interrupted,
            "the run is being interrupted (signal received)",
        ),
    )
}

/// `dir/.base.tmp-PID.ext`: hidden, and keeping the extension (the PNG encoder goes by it).
pub fn temp_name(dir: &Path, base: &str, ext: &str) -> PathBuf {
    dir.join(format!(".{base}.tmp-{}.{ext}", std::process::id()))
}

/// `dir/.base.old-PID.ext`: where a final file that a commit replaces waits until the commit
/// has succeeded.
fn backup_name(dir: &Path, base: &str, ext: &str) -> PathBuf {
    dir.join(format!(".{base}.old-{}.{ext}", std::process::id()))
}

/// One output: its temporary, its final name, and the parts of the name.
#[derive(Debug)]
struct Entry {
    tmp: PathBuf,
    fin: PathBuf,
    backup: PathBuf,
}

/// The temporary outputs of one stem's run.
#[derive(Debug, Default)]
pub struct Temporaries {
    entries: Vec<Entry>,
    committed: bool,
}

impl Temporaries {
    /// No outputs yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers the output `dir/base.ext` and returns its temporary's path, without creating
    /// it (for a file another library creates: write it inside [`Temporaries::write_with`]).
    pub fn reserve(&mut self, dir: &Path, base: &str, ext: &str) -> Result<PathBuf> {
        let tmp = temp_name(dir, base, ext);
        let mut reg = registry();
        if reg.terminating {
            return Err(interrupted(&tmp));
        }
        reg.paths.push(tmp.clone());
        self.entries.push(Entry {
            tmp: tmp.clone(),
            fin: dir.join(format!("{base}.{ext}")),
            backup: backup_name(dir, base, ext),
        });
        Ok(tmp)
    }

    /// Registers the output `dir/base.ext` and creates its temporary.
    pub fn create(&mut self, dir: &Path, base: &str, ext: &str) -> Result<(File, PathBuf)> {
        let tmp = self.reserve(dir, base, ext)?;
        let file = Self::write_with(&tmp, || File::create(&tmp))
            .and_then(|created| created)
            .map_err(|e| Error::OutputDir {
                path: dir.to_path_buf(),
                source: e,
            })?;
        Ok((file, tmp))
    }

    /// Runs `f`, which creates or writes the reserved temporary `tmp`, with the registry
    /// locked, so that a signal handler removes `tmp` only after `f` is done with it. Refused
    /// (an `Interrupted` error naming `tmp`) once the handler has started.
    pub fn write_with<T>(tmp: &Path, f: impl FnOnce() -> T) -> std::io::Result<T> {
        let reg = registry();
        if reg.terminating {
            return Err(std::io::Error::new(
                std::io::ErrorKind::Interrupted,
                format!(
                    "{}: the run is being interrupted (signal received)",
                    tmp.display()
                ),
            ));
        }
        let r = f();
        drop(reg);
        Ok(r)
    }

    /// Renames every temporary to its final name and returns the final names. All or nothing:
    /// if a rename fails, the renames already made are undone (the files they replaced are put
    /// back), the temporaries are removed, and the error names the file.
    pub fn commit(mut self) -> Result<Vec<PathBuf>> {
        let reg = registry();
        if let (true, Some(e)) = (reg.terminating, self.entries.first()) {
            return Err(interrupted(&e.tmp));
        }
        // (entry, whether a previous final file was moved to its backup name).
        let mut done: Vec<(usize, bool)> = Vec::with_capacity(self.entries.len());
        let mut failure = None;
        for (i, e) in self.entries.iter().enumerate() {
            let had_old = match std::fs::symlink_metadata(&e.fin) {
                Ok(m) if m.is_file() => {
                    if let Err(err) = std::fs::rename(&e.fin, &e.backup) {
                        failure = Some(Error::io(&e.fin, err));
                        break;
                    }
                    true
                }
                _ => false,
            };
            if let Err(err) = std::fs::rename(&e.tmp, &e.fin) {
                if had_old {
                    let _ = std::fs::rename(&e.backup, &e.fin);
                }
                failure = Some(Error::io(&e.fin, err));
                break;
            }
            done.push((i, had_old));
        }
        if let Some(err) = failure {
            // Undo in reverse order: the new file goes back to its temporary name (removed by
            // `Drop`), the old one to its final name.
            for &(i, had_old) in done.iter().rev() {
                let e = &self.entries[i];
                let _ = std::fs::rename(&e.fin, &e.tmp);
                if had_old {
                    let _ = std::fs::rename(&e.backup, &e.fin);
                }
            }
            drop(reg);
            return Err(err);
        }
        for &(i, had_old) in &done {
            if had_old {
                let _ = std::fs::remove_file(&self.entries[i].backup);
            }
        }
        self.committed = true;
        let mut reg = reg;
        reg.paths
            .retain(|p| !self.entries.iter().any(|e| &e.tmp == p));
        drop(reg);
        Ok(self.entries.iter().map(|e| e.fin.clone()).collect())
    }
}

impl Drop for Temporaries {
    fn drop(&mut self) {
        if self.committed {
            return;
        }
        let mut reg = registry();
        for e in &self.entries {
            let _ = std::fs::remove_file(&e.tmp);
        }
        reg.paths
            .retain(|p| !self.entries.iter().any(|e| &e.tmp == p));
    }
}

/// Removes every temporary of the process and exits with `code`, for a signal handler (it runs
/// on an ordinary thread, as `ctrlc` calls it). Holds the registry until the process has
/// exited, so no other thread creates, renames or writes a temporary after this removed them.
pub fn remove_all_and_exit(code: i32) -> ! {
    let mut reg = registry();
    reg.terminating = true;
    let mut removed = 0usize;
    for p in &reg.paths {
        if std::fs::remove_file(p).is_ok() {
            removed += 1;
        }
    }
    eprintln!("interrupted: {removed} unfinished output file(s) removed; no output was written");
    std::process::exit(code)
}

/// What [`remove_stale`] did with one temporary of another process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stale {
    /// Removed: its process is gone.
    Removed {
        /// The temporary.
        path: PathBuf,
        /// The process that wrote it.
        pid: u32,
    },
    /// Left alone: its process is still running (another run writing the same output?).
    Running {
        /// The temporary.
        path: PathBuf,
        /// The process that writes it.
        pid: u32,
    },
    /// Left alone: whether its process runs cannot be told on this system (no `/proc`).
    Unknown {
        /// The temporary.
        path: PathBuf,
        /// The process that wrote it.
        pid: u32,
    },
}

impl Stale {
    /// The temporary.
    pub fn path(&self) -> &Path {
        match self {
            Stale::Removed { path, .. }
            | Stale::Running { path, .. }
            | Stale::Unknown { path, .. } => path,
        }
    }
}

impl std::fmt::Display for Stale {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Stale::Removed { path, pid } => write!(
                f,
                "removed {}: an unfinished output of an interrupted run (process {pid} is gone)",
                path.display()
            ),
            Stale::Running { path, pid } => write!(
                f,
                "warning: {} is being written by process {pid}, which is still running (another run writing the same outputs?); left alone",
                path.display()
            ),
            Stale::Unknown { path, pid } => write!(
                f,
                "warning: {} is an unfinished output of process {pid}; whether it still runs cannot be told here: remove it if it is not",
                path.display()
            ),
        }
    }
}

/// Whether process `pid` exists: `Some` where `/proc` tells, `None` where it cannot be told.
fn process_alive(pid: u32) -> Option<bool> {
    let proc = Path::new("/proc");
    if !proc.join("self").exists() {
        return None;
    }
    Some(proc.join(pid.to_string()).exists())
}

/// Finds temporaries of other processes for the outputs `bases` (`(base, ext)`: the final
/// file `dir/base.ext`) in `dir`, removes those whose process is gone, and says what it did
/// with each. Files of other names are never touched.
pub fn remove_stale(dir: &Path, bases: &[(String, &str)]) -> Result<Vec<Stale>> {
    let mut found = Vec::new();
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(found),
        Err(e) => return Err(Error::io(dir, e)),
    };
    let own = std::process::id();
    for entry in entries {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some(pid) = bases.iter().find_map(|(base, ext)| {
            let pid = name
                .strip_prefix('.')?
                .strip_prefix(base.as_str())?
                .strip_prefix(".tmp-")?
                .strip_suffix(ext)?
                .strip_suffix('.')?;
            pid.parse::<u32>().ok()
        }) else {
            continue;
        };
        if pid == own {
            continue;
        }
        let path = entry.path();
        found.push(match process_alive(pid) {
            Some(false) => {
                std::fs::remove_file(&path).map_err(|e| Error::io(&path, e))?;
                Stale::Removed { path, pid }
            }
            Some(true) => Stale::Running { path, pid },
            None => Stale::Unknown { path, pid },
        });
    }
    found.sort_by(|a, b| a.path().cmp(b.path()));
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    fn write(t: &mut Temporaries, dir: &Path, base: &str, text: &str) {
        let (mut f, _) = t.create(dir, base, "fil").unwrap();
        f.write_all(text.as_bytes()).unwrap();
    }

    #[test]
    fn commit_renames_all_and_replaces_old_outputs() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::write(d.join("a.fil"), "old a").unwrap();
        let mut t = Temporaries::new();
        write(&mut t, d, "a", "new a");
        write(&mut t, d, "b", "new b");
        assert_eq!(names(d).len(), 3, "{:?}", names(d));
        let fins = t.commit().unwrap();
        assert_eq!(fins, vec![d.join("a.fil"), d.join("b.fil")]);
        assert_eq!(names(d), ["a.fil", "b.fil"]);
        assert_eq!(std::fs::read_to_string(d.join("a.fil")).unwrap(), "new a");
    }

    #[test]
    fn a_failed_commit_undoes_its_renames_and_restores_old_outputs() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::write(d.join("a.fil"), "old a").unwrap();
        // `c.fil` is a non-empty directory: renaming a file onto it fails.
        std::fs::create_dir(d.join("c.fil")).unwrap();
        std::fs::write(d.join("c.fil/keep"), "x").unwrap();
        let mut t = Temporaries::new();
        write(&mut t, d, "a", "new a");
        write(&mut t, d, "b", "new b");
        write(&mut t, d, "c", "new c");
        let err = t.commit().unwrap_err();
        assert!(err.to_string().contains("c.fil"), "{err}");
        assert_eq!(names(d), ["a.fil", "c.fil"], "no new output, no temporary");
        assert_eq!(std::fs::read_to_string(d.join("a.fil")).unwrap(), "old a");
    }

    #[test]
    fn dropping_uncommitted_removes_temporaries_and_unregisters_them() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let mut t = Temporaries::new();
        write(&mut t, d, "a", "x");
        let tmp = t.entries[0].tmp.clone();
        assert!(registry().paths.contains(&tmp));
        drop(t);
        assert!(names(d).is_empty());
        assert!(!registry().paths.contains(&tmp));
    }

    #[test]
    #[cfg_attr(
        miri,
        ignore = "spawns `true` for a dead pid: Miri cannot run a process"
    )]
    fn stale_temporaries_of_dead_processes_are_removed_others_kept() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        // A process that has exited: its pid names no process (until the system reuses it).
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        // A process that runs: our parent (our own temporaries are never touched).
        let parent = std::os::unix::process::parent_id();
        for name in [
            format!(".demo.0.tmp-{dead}.fil"),
            format!(".demo.0.tmp-{parent}.png"),
            format!(".demo.0.tmp-{}.fil", std::process::id()),
            format!(".other.0.tmp-{dead}.fil"),
            "demo.0.fil".to_string(),
        ] {
            std::fs::write(d.join(name), "x").unwrap();
        }
        let r = remove_stale(
            d,
            &[("demo.0".to_string(), "fil"), ("demo.0".to_string(), "png")],
        )
        .unwrap();
        if process_alive(dead).is_none() {
            // No /proc: nothing can be told, nothing is removed.
            assert!(
                r.iter().all(|s| matches!(s, Stale::Unknown { .. })),
                "{r:?}"
            );
            assert_eq!(names(d).len(), 5);
            return;
        }
        assert_eq!(r.len(), 2, "{r:?}");
        assert!(r.contains(&Stale::Removed {
            path: d.join(format!(".demo.0.tmp-{dead}.fil")),
            pid: dead
        }));
        assert!(r.contains(&Stale::Running {
            path: d.join(format!(".demo.0.tmp-{parent}.png")),
            pid: parent
        }));
        let left = names(d);
        assert!(!left.contains(&format!(".demo.0.tmp-{dead}.fil")));
        assert!(
            left.contains(&format!(".other.0.tmp-{dead}.fil")),
            "other outputs untouched"
        );
        assert_eq!(left.len(), 4);
    }
}
