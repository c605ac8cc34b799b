//! The store the files of payload segments are read from, and its
//! confinement.
//!
//! A response names files; a response that came over the network may name
//! any file of the machine (`../secret.bin`, `/etc/hostname`, a symlink that
//! leads out). So every read from disk goes through [`Store::resolve`]: a
//! relative name is joined to the root, the result is canonicalized (every
//! symlink and `..` resolved), and the canonical path must lie inside an
//! allowed directory: the root, or one given with
//! [`Store::confined`]'s `allow`. Anything else is
//! [`GatherError::Outside`], naming the file. The file is then opened by its
//! canonical path.
//!
//! The check is made when a file is opened, by path: it keeps a response from
//! pointing a reader at files outside the allowed directories, not a process
//! that can rename files inside them at the same moment.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::Location;

use super::GatherError;

/// Where the files that payload segments name are read from (and, for the
/// simulator and tests, written to).
///
/// Every store reads only what it is allowed to: [`Store::Memory`] its own
/// files, [`Store::Dir`] files inside its directory, [`Store::Confined`]
/// files inside its root or an allowed directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Store {
    /// Files on disk; relative names are resolved against this directory,
    /// and reads are confined to it (it is canonicalized at each read; see
    /// [`Store::confined`] to do that once and to allow more directories).
    Dir(PathBuf),
    /// Files in memory, by name.
    Memory(BTreeMap<String, Vec<u8>>),
    /// Files on disk inside allowed directories, from [`Store::confined`].
    Confined(Confinement),
}

/// The canonical root and allowed directories of a [`Store::Confined`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Confinement {
    root: PathBuf,
    allow: Vec<PathBuf>,
}

impl Confinement {
    /// The canonical root, against which relative names resolve.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Every directory reads may reach into, canonical: the root first, then
    /// each allowed directory.
    pub fn allowed(&self) -> impl Iterator<Item = &Path> + '_ {
        std::iter::once(self.root.as_path()).chain(self.allow.iter().map(PathBuf::as_path))
    }
}

/// How a read found its file: its length and, on disk, the open file.
struct Opened {
    path: PathBuf,
    len: u64,
    file: Option<File>,
}

impl Store {
    /// An empty in-memory store.
    pub fn memory() -> Store {
        Store::Memory(BTreeMap::new())
    }

    /// A store that reads files on disk only inside `root` (against which
    /// relative names resolve) and the directories of `allow`. Each directory
    /// is canonicalized once, here.
    ///
    /// ```
    /// use pd_stitch::gather::{gather_from, GatherError, Store};
    /// use serde_json::json;
    ///
    /// let dir = std::env::temp_dir().join(format!("pd-stitch-confined-doc-{}", std::process::id()));
    /// std::fs::create_dir_all(dir.join("root"))?;
    /// std::fs::write(dir.join("secret.bin"), [7, 7])?;
    /// let response = json!({"choices": [{"payload": [
    ///     {"field": "routed_experts", "file": "../secret.bin", "offset": 0, "pos": 0, "rows": 2,
    ///      "dtype": "uint8", "shape": []}]}]});
    ///
    /// let confined = Store::confined(&dir.join("root"), &[])?;
    /// let refused = gather_from(&response, 0, "routed_experts", &confined);
    /// assert!(matches!(refused, Err(GatherError::Outside { .. })));
    /// // Allowing the directory lets it in.
    /// let allowed = Store::confined(&dir.join("root"), &[dir.clone()])?;
    /// assert_eq!(gather_from(&response, 0, "routed_experts", &allowed)?.data(), [7, 7]);
    /// std::fs::remove_dir_all(&dir)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// The I/O error of canonicalizing `root` or a directory of `allow` (one
    /// that does not exist, say).
    pub fn confined(root: &Path, allow: &[PathBuf]) -> std::io::Result<Store> {
        let root = root.canonicalize()?;
        let allow = allow
            .iter()
            .map(|dir| dir.canonicalize())
            .collect::<std::io::Result<Vec<PathBuf>>>()?;
        Ok(Store::Confined(Confinement { root, allow }))
    }

    /// Writes (replaces) the file `name`. A directory store creates the
    /// directories it needs, and writes beside the file and renames it into
    /// place, so that a reader never sees it half-written, even while another
    /// process writes the same file.
    ///
    /// # Errors
    ///
    /// An I/O error of a directory store; a confined store is for reading
    /// only, and refuses with [`std::io::ErrorKind::PermissionDenied`].
    pub fn write(&mut self, name: &str, bytes: Vec<u8>) -> std::io::Result<()> {
        match self {
            Store::Dir(root) => {
                let path = root.join(name);
                if let Some(parent) = path.parent() {
                    std::fs::create_dir_all(parent)?;
                }
                static NEXT: AtomicU64 = AtomicU64::new(0);
                let mut temp = path.clone().into_os_string();
                let unique = NEXT.fetch_add(1, Ordering::Relaxed);
                temp.push(format!(".{}.{unique}.tmp", std::process::id()));
                std::fs::write(&temp, bytes)?;
                std::fs::rename(&temp, &path).inspect_err(|_| {
                    let _ = std::fs::remove_file(&temp);
                })
            }
            Store::Memory(files) => {
                files.insert(name.to_owned(), bytes);
                Ok(())
            }
            Store::Confined(_) => Err(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                "a confined store is for reading",
            )),
        }
    }

    /// The path `name` is read from: for a store on disk, its canonical path,
    /// which must lie inside an allowed directory (else
    /// [`GatherError::Outside`]); for a memory store, `name` itself.
    ///
    /// # Errors
    ///
    /// [`GatherError::Io`] when the file (or the root of a [`Store::Dir`])
    /// cannot be canonicalized, a missing file for one;
    /// [`GatherError::Outside`] when it lies outside; `at` names the segment.
    pub fn resolve(&self, name: &str, at: impl Fn() -> Location) -> Result<PathBuf, GatherError> {
        let (root, allow): (PathBuf, &[PathBuf]) = match self {
            Store::Memory(_) => return Ok(PathBuf::from(name)),
            Store::Dir(root) => {
                let canonical = root.canonicalize().map_err(|source| GatherError::Io {
                    path: root.clone(),
                    source,
                })?;
                (canonical, &[])
            }
            Store::Confined(c) => (c.root.clone(), c.allow.as_slice()),
        };
        // `join` keeps an absolute `name` as it is.
        let path = root.join(name);
        let resolved = path.canonicalize().map_err(|source| GatherError::Io {
            path: path.clone(),
            source,
        })?;
        let inside =
            resolved.starts_with(&root) || allow.iter().any(|dir| resolved.starts_with(dir));
        if !inside {
            return Err(GatherError::Outside {
                at: at(),
                path,
                resolved,
            });
        }
        Ok(resolved)
    }

    /// The length of file `name`, read only where the store may read.
    pub(super) fn len(
        &self,
        name: &str,
        at: impl Fn() -> Location,
    ) -> Result<(PathBuf, u64), GatherError> {
        self.open(name, at, false)
            .map(|opened| (opened.path, opened.len))
    }

    /// Finds file `name` (opening it, on disk, when `open`) and its length.
    fn open(
        &self,
        name: &str,
        at: impl Fn() -> Location,
        open: bool,
    ) -> Result<Opened, GatherError> {
        let path = self.resolve(name, at)?;
        let io = |source| GatherError::Io {
            path: path.clone(),
            source,
        };
        match self {
            Store::Memory(files) => {
                let bytes = files.get(name).ok_or_else(|| {
                    io(std::io::Error::new(
                        std::io::ErrorKind::NotFound,
                        "no such file in the store",
                    ))
                })?;
                let len = u64::try_from(bytes.len()).unwrap_or(u64::MAX);
                Ok(Opened {
                    path,
                    len,
                    file: None,
                })
            }
            Store::Dir(_) | Store::Confined(_) if open => {
                let file = File::open(&path).map_err(io)?;
                let len = file.metadata().map_err(io)?.len();
                Ok(Opened {
                    path,
                    len,
                    file: Some(file),
                })
            }
            Store::Dir(_) | Store::Confined(_) => {
                let len = std::fs::metadata(&path).map_err(io)?.len();
                Ok(Opened {
                    path,
                    len,
                    file: None,
                })
            }
        }
    }

    /// The bytes of each of `ranges` of file `name`, the file found (and
    /// confined) once; each range checked against its length first.
    pub(super) fn read_ranges(
        &self,
        name: &str,
        ranges: &[Range<u64>],
        at: impl Fn(usize) -> Location,
    ) -> Result<Vec<Vec<u8>>, GatherError> {
        if let (Store::Memory(_), _) | (_, 0..=1) = (self, ranges.len()) {
            return ranges
                .iter()
                .enumerate()
                .map(|(k, r)| {
                    let mut out = Vec::new();
                    if r.is_empty() {
                        self.len(name, || at(k))?;
                    } else {
                        self.read(name, r.clone(), || at(k), &mut out)?;
                    }
                    Ok(out)
                })
                .collect();
        }
        let Opened { path, len, file } = self.open(name, || at(0), true)?;
        let Some(mut file) = file else {
            return Ok(vec![Vec::new(); ranges.len()]);
        };
        let io = |source| GatherError::Io {
            path: path.clone(),
            source,
        };
        let mut answers = Vec::with_capacity(ranges.len());
        for (k, range) in ranges.iter().enumerate() {
            if range.is_empty() {
                answers.push(Vec::new());
                continue;
            }
            if len < range.end {
                return Err(GatherError::ShortFile {
                    path,
                    at: at(k),
                    needed: range.end,
                    len,
                });
            }
            let bytes = range.end - range.start;
            let size =
                usize::try_from(bytes).map_err(|_| GatherError::TooLarge { at: at(k), bytes })?;
            let mut out = vec![0u8; size];
            file.seek(SeekFrom::Start(range.start)).map_err(io)?;
            file.read_exact(&mut out).map_err(io)?;
            answers.push(out);
        }
        Ok(answers)
    }

    /// Appends the bytes `range` of file `name` to `out`, after checking that
    /// the store may read the file and that it holds them; `at` names the
    /// segment for errors.
    pub(super) fn read(
        &self,
        name: &str,
        range: Range<u64>,
        at: impl Fn() -> Location,
        out: &mut Vec<u8>,
    ) -> Result<(), GatherError> {
        let Opened {
            path,
            len,
            mut file,
        } = self.open(name, &at, true)?;
        if len < range.end {
            return Err(GatherError::ShortFile {
                path,
                at: at(),
                needed: range.end,
                len,
            });
        }
        // The file holds these bytes, so the size is real data, not a claim.
        let bytes = range.end - range.start;
        let too_large = || GatherError::TooLarge { at: at(), bytes };
        let size = usize::try_from(bytes).map_err(|_| too_large())?;
        let start = out.len();
        out.try_reserve(size).map_err(|_| too_large())?;
        match (self, file.as_mut()) {
            (Store::Memory(files), _) => {
                let from = usize::try_from(range.start).map_err(|_| too_large())?;
                let slice = files
                    .get(name)
                    .and_then(|b| b.get(from..from + size))
                    .unwrap_or_default();
                out.extend_from_slice(slice);
            }
            (_, Some(file)) => {
                let io = |source| GatherError::Io {
                    path: path.clone(),
                    source,
                };
                out.resize(start + size, 0);
                file.seek(SeekFrom::Start(range.start)).map_err(io)?;
                file.read_exact(out.get_mut(start..).unwrap_or_default())
                    .map_err(io)?;
            }
            (_, None) => {}
        }
        Ok(())
    }
}
