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

/// Most damaged ranges one scan reports; past it, the rest of the file is
/// one range (a file this damaged is not worth resyncing byte by byte).
pub const DAMAGED_RANGES_MAX: usize = 256;
/// Bytes read at a time while looking for the next frame after damage.
const RESYNC_WINDOW_BYTES: usize = 1024 * 1024;

/// Bytes of a segment that hold no verified frame: from where a frame was
/// cut short or failed its checksum to where the next verified frame starts
/// (or the end of the file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DamagedRange {
    pub from: u64,
    pub to: u64,
    /// What was found at `from`.
    pub problem: &'static str,
    /// When the damaged bytes are exactly one frame (its header decodes and
    /// a verified frame, or the file's end, follows where it says it
    /// ends): its header, unverified. It names what was lost, if it agrees
    /// with the partition's offsets (`recover_segment`).
    pub frame: Option<FrameHeader>,
}

/// What a scan of a segment's frames found (`scan`).
#[derive(Debug)]
pub struct Scanned {
    pub file_bytes: u64,
    /// In file order, at most `DAMAGED_RANGES_MAX`; empty when every byte
    /// belongs to a verified frame.
    pub damaged: Vec<DamagedRange>,
}

impl Scanned {
    /// The range that runs to the end of the file, if the file ends in damage.
    pub fn damaged_tail(&self) -> Option<&DamagedRange> {
        self.damaged.last().filter(|range| range.to == self.file_bytes)
    }
}

/// Reads the frames of the file at `path` in order, handing each verified
/// one (its header, byte position, and the damaged ranges before it in
/// this file) to `visit`. Where a frame is cut short or fails its
/// checksum, it looks for the next frame that verifies and that
/// `plausible` accepts (a known partition, an offset not behind it),
/// byte by byte, and goes on from there: damage in the middle of a segment
/// costs only the frames it touched, and the scan says which bytes those
/// were. The one reading of a segment for recovery (`EmbeddedLog::open`)
/// and for `tern check`.
pub fn scan(
    path: &std::path::Path,
    plausible: impl Fn(&FrameHeader) -> bool,
    mut visit: impl FnMut(&FrameHeader, u64, &[DamagedRange]) -> Result<(), super::super::LogError>,
) -> Result<Scanned, super::super::LogError> {
    use std::io::{Read, Seek, SeekFrom};
    let file = std::fs::File::open(path)?;
    let file_bytes = file.metadata()?.len();
    let mut reader = std::io::BufReader::with_capacity(1024 * 1024, file.try_clone()?);
    let mut position: u64 = 0;
    let mut payload = Vec::new();
    let mut damaged = Vec::new();
    // Bytes the resync may read to verify candidates: bounded whatever the
    // damaged bytes hold (a value packed with fake headers included).
    let mut verify_budget_bytes = 2 * file_bytes + PAYLOAD_BYTES_MAX as u64;
    while position < file_bytes {
        let mut header_bytes = [0u8; HEADER_BYTES];
        let mut damaged_frame = None;
        let problem = if reader.read_exact(&mut header_bytes).is_err() {
            "a partial frame header"
        } else if let Some(header) = decode_header(&header_bytes) {
            payload.resize(header.payload_len as usize, 0);
            if reader.read_exact(&mut payload).is_err() {
                "a partial frame payload"
            } else if !verify(&header, &header_bytes, &payload) {
                damaged_frame = Some((header, position + (HEADER_BYTES + payload.len()) as u64));
                "a frame checksum mismatch"
            } else {
                visit(&header, position, &damaged)?;
                position += (HEADER_BYTES + payload.len()) as u64;
                continue;
            }
        } else {
            "an impossible frame length"
        };
        // First where the damaged frame says it ends (a flip in its payload
        // costs that frame alone, and no frame a client's value carries
        // inside it is taken for the log's); else byte by byte.
        let one_frame = damaged_frame.filter(|(_, end)| *end == file_bytes || frame_at(&file, *end, file_bytes, &plausible));
        let next = match one_frame {
            Some((_, end)) => Some(end).filter(|end| *end < file_bytes),
            None if damaged.len() + 1 < DAMAGED_RANGES_MAX => resync(&file, position + 1, file_bytes, &plausible, &mut verify_budget_bytes)?,
            None => None,
        };
        let to = next.unwrap_or(file_bytes);
        damaged.push(DamagedRange { from: position, to, problem, frame: one_frame.map(|(header, _)| header) });
        position = to;
        reader.seek(SeekFrom::Start(position))?;
    }
    Ok(Scanned { file_bytes, damaged })
}

/// Whether a verified, plausible frame starts at `at`.
fn frame_at(file: &std::fs::File, at: u64, file_bytes: u64, plausible: &impl Fn(&FrameHeader) -> bool) -> bool {
    read_at(file, at).is_ok_and(|(header, _)| at + (HEADER_BYTES as u64) + u64::from(header.payload_len) <= file_bytes && plausible(&header))
}

/// The position of the first verified, plausible frame at or after `from`,
/// reading at most `budget_bytes` of candidates' payloads (then: none).
fn resync(
    file: &std::fs::File,
    from: u64,
    file_bytes: u64,
    plausible: &impl Fn(&FrameHeader) -> bool,
    budget_bytes: &mut u64,
) -> std::io::Result<Option<u64>> {
    use std::os::unix::fs::FileExt;
    let mut window = vec![0u8; RESYNC_WINDOW_BYTES + HEADER_BYTES];
    let mut base = from;
    while base + HEADER_BYTES as u64 <= file_bytes {
        let len = (file_bytes - base).min(window.len() as u64) as usize;
        file.read_exact_at(&mut window[..len], base)?;
        for i in 0..=len - HEADER_BYTES {
            let header_bytes: &[u8; HEADER_BYTES] = window[i..i + HEADER_BYTES].try_into().expect("sized");
            let Some(header) = decode_header(header_bytes) else { continue };
            let at = base + i as u64;
            if at + (HEADER_BYTES as u64) + u64::from(header.payload_len) > file_bytes || !plausible(&header) {
                continue;
            }
            let cost = u64::from(header.payload_len) + HEADER_BYTES as u64;
            if cost > *budget_bytes {
                return Ok(None);
            }
            *budget_bytes -= cost;
            if read_at(file, at).is_ok() {
                return Ok(Some(at));
            }
        }
        base += (len - HEADER_BYTES + 1) as u64;
    }
    Ok(None)
}

/// Whether `bytes` hold a whole 512-byte sector of zeros: the mark of
/// pages a crash left unwritten (a filesystem shows them as zeros), which
/// bit rot or a cut does not leave.
pub fn has_zero_sector(bytes: &[u8], first_byte_position: u64) -> bool {
    const SECTOR_BYTES: u64 = 512;
    let first_sector = first_byte_position.div_ceil(SECTOR_BYTES) * SECTOR_BYTES;
    let mut at = (first_sector - first_byte_position) as usize;
    while at + SECTOR_BYTES as usize <= bytes.len() {
        if bytes[at..at + SECTOR_BYTES as usize].iter().all(|b| *b == 0) {
            return true;
        }
        at += SECTOR_BYTES as usize;
    }
    false
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
