//! The filesystem a store or its backups live on: how much room is left.
//! A full disk stops RocksDB's writes, and a backup that fills it stops
//! the store it copies, so both are watched (`jobcast_filesystem_*`) and a
//! backup without room for a copy of the store is refused before it
//! starts.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// The size of the filesystem holding `path`, and the bytes an
/// unprivileged process may still write to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Space {
    pub size_bytes: u64,
    pub free_bytes: u64,
}

/// [`Space`] of the filesystem holding `path` (which must exist), by
/// `statvfs(3)`.
pub fn space(path: &Path) -> io::Result<Space> {
    let c_path = CString::new(path.as_os_str().as_bytes())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    let mut stat = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `c_path` is a NUL-terminated string that outlives the call,
    // and `stat` points to writable memory of the right type, which
    // statvfs fills when it returns 0.
    let stat = unsafe {
        if libc::statvfs(c_path.as_ptr(), stat.as_mut_ptr()) != 0 {
            return Err(io::Error::last_os_error());
        }
        stat.assume_init()
    };
    let fragment = stat.f_frsize as u64;
    Ok(Space {
        size_bytes: (stat.f_blocks as u64).saturating_mul(fragment),
        free_bytes: (stat.f_bavail as u64).saturating_mul(fragment),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_has_room_within_its_filesystem() {
        let dir = tempfile::tempdir().unwrap();
        let room = space(dir.path()).unwrap();
        assert!(
            room.size_bytes > 0 && room.free_bytes <= room.size_bytes,
            "{room:?}"
        );
        let err = space(Path::new("/no/such/directory/here")).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
    }
}
