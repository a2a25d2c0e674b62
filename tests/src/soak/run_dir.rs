//! The run directory peers find each other through: each live peer publishes one file with its
//! listener's port, its incarnation and the packed keys of its canary regions (which only hostile
//! connections aim at). A file is written whole under another name and renamed into place, so a
//! reader never sees half of one.

use std::path::{Path, PathBuf};

/// What a peer publishes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerFile {
    pub port: u16,
    /// 0 for the first process of a peer, one more for every restart.
    pub incarnation: u32,
    pub pid: u32,
    /// Packed key of the canary region with REMOTE_READ and REMOTE_WRITE.
    pub canary_rw: Vec<u8>,
    /// Packed key of the canary region with REMOTE_READ only.
    pub canary_ro: Vec<u8>,
}

pub fn peer_path(dir: &Path, peer: usize) -> PathBuf {
    dir.join(format!("peer-{peer}"))
}

/// Hex, with `-` for no bytes so that every field is a word.
fn hex(bytes: &[u8]) -> String {
    if bytes.is_empty() {
        return "-".into();
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if s == "-" {
        return Some(Vec::new());
    }
    if s.len() % 2 != 0 {
        return None;
    }
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok()).collect()
}

impl PeerFile {
    pub fn write(&self, dir: &Path, peer: usize) -> std::io::Result<()> {
        let text = format!(
            "{} {} {} {} {}\n",
            self.port,
            self.incarnation,
            self.pid,
            hex(&self.canary_rw),
            hex(&self.canary_ro)
        );
        let path = peer_path(dir, peer);
        let tmp = path.with_extension(format!("tmp{}", self.pid));
        std::fs::write(&tmp, text)?;
        std::fs::rename(&tmp, &path)
    }

    /// The file of `peer`, or `None` while it has none (not started yet, or killed).
    pub fn read(dir: &Path, peer: usize) -> Option<PeerFile> {
        let text = std::fs::read_to_string(peer_path(dir, peer)).ok()?;
        let mut words = text.split_whitespace();
        Some(PeerFile {
            port: words.next()?.parse().ok()?,
            incarnation: words.next()?.parse().ok()?,
            pid: words.next()?.parse().ok()?,
            canary_rw: unhex(words.next()?)?,
            canary_ro: unhex(words.next()?)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_file_reads_back_as_written() {
        let dir = std::env::temp_dir().join(format!("zcx-soak-run-dir-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file =
            PeerFile { port: 4242, incarnation: 3, pid: 17, canary_rw: vec![1, 2, 0xff], canary_ro: vec![] };
        assert_eq!(PeerFile::read(&dir, 1), None);
        file.write(&dir, 1).unwrap();
        assert_eq!(PeerFile::read(&dir, 1), Some(file));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
