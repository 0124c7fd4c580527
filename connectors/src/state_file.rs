//! The state a connector keeps across restarts (the watcher's and the
//! applier's alike): a JSON file one process at a time holds, written whole
//! or not at all, so that a process killed mid-write finds either the old
//! state or the new one, never a mix.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde::de::DeserializeOwned;

/// A state `T` loaded from its file and held under its lock; [`save`]
/// writes it back, and a save that would write what the file holds writes
/// nothing.
///
/// [`save`]: StateFile::save
pub struct StateFile<T> {
    path: PathBuf,
    state: T,
    /// Whether the file existed when it was opened.
    existed: bool,
    /// The state as last written (empty until the first save).
    written: Vec<u8>,
    /// The exclusive lock, held while the state is.
    _lock: std::fs::File,
}

impl<T: Serialize + DeserializeOwned + Default> StateFile<T> {
    /// Lock the state in `path` and load it: the default state if there
    /// is no file yet ([`StateFile::existed`] says which).
    pub fn open(path: &Path) -> Result<Self, String> {
        let lock = lock(path)?;
        let existed = path
            .try_exists()
            .map_err(|e| format!("state file {}: {e}", path.display()))?;
        Ok(StateFile {
            path: path.to_owned(),
            state: load(path)?,
            existed,
            written: Vec::new(),
            _lock: lock,
        })
    }

    /// Whether the file existed when it was opened.
    pub fn existed(&self) -> bool {
        self.existed
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Write the state, unless it is as last written.
    pub fn save(&mut self) -> Result<(), String> {
        let now = serde_json::to_vec(&self.state).expect("the state serialises");
        if now != self.written {
            save(&self.path, &self.state)?;
            self.written = now;
        }
        Ok(())
    }
}

impl<T> std::ops::Deref for StateFile<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.state
    }
}

impl<T> std::ops::DerefMut for StateFile<T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.state
    }
}

/// An exclusive lock on the state in `path` (on `PATH.lock`, created if
/// absent), held until the file returned is dropped (or the process
/// ends); an error, naming the path, if another process holds it.
fn lock(path: &Path) -> Result<std::fs::File, String> {
    let mut name = path.as_os_str().to_owned();
    name.push(".lock");
    let lock_path = PathBuf::from(name);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(|e| format!("state file lock {}: {e}", lock_path.display()))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => Err(format!(
            "state file {} is in use by another process (it holds {}): one process per state",
            path.display(),
            lock_path.display()
        )),
        Err(std::fs::TryLockError::Error(e)) => {
            Err(format!("state file lock {}: {e}", lock_path.display()))
        }
    }
}

/// The state in `path`; the default state if there is no file yet.
fn load<T: DeserializeOwned + Default>(path: &Path) -> Result<T, String> {
    let failed = |reason: String| format!("state file {}: {reason}", path.display());
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| failed(e.to_string())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(T::default()),
        Err(e) => Err(failed(e.to_string())),
    }
}

/// Write `state` to `path`: a new file, synced, then renamed over the old
/// one, and the directory synced so that the rename survives a crash.
fn save<T: Serialize>(path: &Path, state: &T) -> Result<(), String> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let written = (|| {
        let mut file = std::fs::File::create(&tmp)?;
        serde_json::to_writer(&mut file, state)?;
        file.flush()?;
        file.sync_all()?;
        std::fs::rename(&tmp, path)?;
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::File::open(dir)?.sync_all()?;
        }
        Ok::<(), std::io::Error>(())
    })();
    written.map_err(|e| format!("state file {}: {e}", path.display()))
}
