//! A JSON state file written whole or not at all, so that a process killed
//! mid-write finds either the old state or the new one, never a mix.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde::de::DeserializeOwned;

/// An exclusive lock on the state in `path` (on `PATH.lock`, created if
/// absent), held until the file returned is dropped (or the process
/// ends); an error, naming the path, if another process holds it.
pub fn lock(path: &Path) -> Result<std::fs::File, String> {
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
pub fn load<T: DeserializeOwned + Default>(path: &Path) -> Result<T, String> {
    let failed = |reason: String| format!("state file {}: {reason}", path.display());
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| failed(e.to_string())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(T::default()),
        Err(e) => Err(failed(e.to_string())),
    }
}

/// Write `state` to `path`: a new file, synced, then renamed over the old
/// one, and the directory synced so that the rename survives a crash.
pub fn save<T: Serialize>(path: &Path, state: &T) -> Result<(), String> {
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
