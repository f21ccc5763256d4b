//! The on-disk frame of one embedded-log entry.
//!
//! ```text
//! 0      4        8          12          16        24
//! | len  | crc32c | topic_id | partition | offset  | payload (len bytes) |
//! ```
//! All integers little-endian. `crc32c` covers `len` and every byte after the
//! crc field (header rest and payload), so a torn or bit-flipped frame is
//! detected both at recovery and on every read.

use bytes::{BufMut, Bytes};

pub const HEADER_BYTES: usize = 24;
/// Largest payload a frame may carry. A mutation is at most 4 MiB of keys and
/// values; protobuf framing adds a little. Anything larger is corruption.
pub const PAYLOAD_BYTES_MAX: usize = 8 * 1024 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    pub payload_len: u32,
    pub crc: u32,
    pub topic_id: u32,
    pub partition: u32,
    pub offset: u64,
}

fn checksum(header_rest: &[u8], len_bytes: [u8; 4], payload: &[u8]) -> u32 {
    let crc = crc32c::crc32c(&len_bytes);
    let crc = crc32c::crc32c_append(crc, header_rest);
    crc32c::crc32c_append(crc, payload)
}

/// Appends the frame of one entry to `buf`.
pub fn encode_into(buf: &mut Vec<u8>, topic_id: u32, partition: u32, offset: u64, payload: &[u8]) {
    assert!(payload.len() <= PAYLOAD_BYTES_MAX, "payload size is checked before append");
    let len_bytes = (payload.len() as u32).to_le_bytes();
    let mut rest = [0u8; 16];
    rest[0..4].copy_from_slice(&topic_id.to_le_bytes());
    rest[4..8].copy_from_slice(&partition.to_le_bytes());
    rest[8..16].copy_from_slice(&offset.to_le_bytes());
    let crc = checksum(&rest, len_bytes, payload);
    buf.put_slice(&len_bytes);
    buf.put_u32_le(crc);
    buf.put_slice(&rest);
    buf.put_slice(payload);
}

/// Parses a header; `None` if the length field is impossible.
pub fn decode_header(bytes: &[u8; HEADER_BYTES]) -> Option<FrameHeader> {
    let u32_at = |i: usize| u32::from_le_bytes(bytes[i..i + 4].try_into().unwrap());
    let header = FrameHeader {
        payload_len: u32_at(0),
        crc: u32_at(4),
        topic_id: u32_at(8),
        partition: u32_at(12),
        offset: u64::from_le_bytes(bytes[16..24].try_into().unwrap()),
    };
    (header.payload_len as usize <= PAYLOAD_BYTES_MAX).then_some(header)
}

/// True when `payload` is the one `header` was written with.
pub fn verify(header: &FrameHeader, header_bytes: &[u8; HEADER_BYTES], payload: &[u8]) -> bool {
    payload.len() == header.payload_len as usize && checksum(&header_bytes[8..24], header_bytes[0..4].try_into().unwrap(), payload) == header.crc
}

/// Reads and verifies the frame at `pos` of `file`.
pub fn read_at(file: &std::fs::File, pos: u64) -> std::io::Result<(FrameHeader, Bytes)> {
    use std::os::unix::fs::FileExt;
    let corrupt = |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, format!("{what} at byte {pos}"));
    let mut header_bytes = [0u8; HEADER_BYTES];
    file.read_exact_at(&mut header_bytes, pos)?;
    let header = decode_header(&header_bytes).ok_or_else(|| corrupt("impossible frame length"))?;
    let mut payload = vec![0u8; header.payload_len as usize];
    file.read_exact_at(&mut payload, pos + HEADER_BYTES as u64)?;
    if !verify(&header, &header_bytes, &payload) {
        return Err(corrupt("frame checksum mismatch"));
    }
    Ok((header, Bytes::from(payload)))
}

/// Where a scan of a segment's frames stopped (`scan`).
pub struct Scanned {
    /// Bytes of whole, verified frames from the start.
    pub valid_bytes: u64,
    pub file_bytes: u64,
    /// What was found at `valid_bytes` (None: the end of the file).
    pub problem: Option<&'static str>,
}

/// Reads the frames of the file at `path` in order, handing each verified
/// one (its header and byte position) to `visit`, until the end of the file
/// or the first frame that is cut short or fails its checksum. The one
/// reading of a segment for recovery (`EmbeddedLog::open`) and for
/// `tern check`.
pub fn scan(
    path: &std::path::Path,
    mut visit: impl FnMut(&FrameHeader, u64) -> Result<(), super::super::LogError>,
) -> Result<Scanned, super::super::LogError> {
    use std::io::Read;
    let file = std::fs::File::open(path)?;
    let file_bytes = file.metadata()?.len();
    let mut reader = std::io::BufReader::with_capacity(1024 * 1024, file);
    let mut position: u64 = 0;
    let mut payload = Vec::new();
    let problem = loop {
        if position == file_bytes {
            break None;
        }
        let mut header_bytes = [0u8; HEADER_BYTES];
        if reader.read_exact(&mut header_bytes).is_err() {
            break Some("a partial frame header");
        }
        let Some(header) = decode_header(&header_bytes) else { break Some("an impossible frame length") };
        payload.resize(header.payload_len as usize, 0);
        if reader.read_exact(&mut payload).is_err() {
            break Some("a partial frame payload");
        }
        if !verify(&header, &header_bytes, &payload) {
            break Some("a frame checksum mismatch");
        }
        visit(&header, position)?;
        position += (HEADER_BYTES + payload.len()) as u64;
    };
    Ok(Scanned { valid_bytes: position, file_bytes, problem })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_detects_flips() {
        let mut buf = Vec::new();
        encode_into(&mut buf, 3, 7, 42, b"hello");
        assert_eq!(buf.len(), HEADER_BYTES + 5);
        let header_bytes: [u8; HEADER_BYTES] = buf[..HEADER_BYTES].try_into().unwrap();
        let header = decode_header(&header_bytes).unwrap();
        assert_eq!((header.topic_id, header.partition, header.offset, header.payload_len), (3, 7, 42, 5));
        assert!(verify(&header, &header_bytes, &buf[HEADER_BYTES..]));
        for i in 0..buf.len() {
            let mut flipped = buf.clone();
            flipped[i] ^= 0x01;
            let hb: [u8; HEADER_BYTES] = flipped[..HEADER_BYTES].try_into().unwrap();
            let ok = decode_header(&hb).is_some_and(|h| verify(&h, &hb, &flipped[HEADER_BYTES..]));
            assert!(!ok, "flip of byte {i} went undetected");
        }
    }
}
