//! Request targets as people type them: curl sends a URL's query as
//! written, so Firebase's documented `curl '…/dinosaurs.json?orderBy="$key"'`
//! puts a raw `"` on the request line. httparse accepts it; the `http`
//! crate's URI parser does not, and hyper then answers an empty 400 that
//! names nothing. Browsers and the SDKs encode these bytes (`%22`).
//!
//! This wrapper sits between the socket and hyper on HTTP/1.1 connections
//! and percent-encodes, in each request's target only, the printable bytes
//! the `http` crate refuses there and httparse accepts: `"`, `<` and `>` in
//! the query, `<`, `>` and `` ` `` in the path, and `"` in the path too
//! (accepted there; one rule for both halves). Every decoder of a target
//! (the router's, Firebase's) reads `%22` as `"`, so the request means what
//! its sender wrote. HTTP/2 is not covered: its clients encode targets.
//!
//! To touch only request lines it follows HTTP/1.1's message framing: the
//! head up to its empty line, then a body of `Content-Length` bytes or
//! chunks. Bodies are copied as they are. Anything it does not follow with
//! certainty — an upgrade (WebSocket), `CONNECT`, a transfer coding other
//! than chunked, conflicting lengths, a line past `LINE_BYTES_MAX` — turns
//! it into a plain pass-through for the rest of the connection, and hyper
//! judges the bytes as sent.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The longest request line, header line or chunk-size line followed; a
/// longer one ends the rewriting (hyper refuses heads far shorter).
const LINE_BYTES_MAX: usize = 64 * 1024;
/// What a connection keeps of its line and pending buffers once they are
/// used up (more is freed): an idle connection holds next to nothing.
const KEEP_BYTES: usize = 1024;
/// What a worker thread keeps of its output buffer between reads.
const THREAD_KEEP_BYTES: usize = 64 * 1024;

thread_local! {
    /// A read's bytes as rewritten: one buffer per worker thread, not per
    /// connection (a poll never yields while it holds it).
    static REWRITTEN: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The socket, with request targets made acceptable to the `http` crate.
pub(super) struct LenientTarget<IO> {
    io: IO,
    framing: Framing,
    /// Rewritten bytes that did not fit the reader's buffer; `pending[handed..]` is left.
    pending: Vec<u8>,
    handed: usize,
}

impl<IO> LenientTarget<IO> {
    pub(super) fn new(io: IO) -> LenientTarget<IO> {
        LenientTarget { io, framing: Framing::default(), pending: Vec::new(), handed: 0 }
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for LenientTarget<IO> {
    /// Reads into the caller's buffer and rewrites what it read there: in
    /// the common case (nothing to encode) the bytes stay where they are.
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.handed < this.pending.len() {
            let n = buf.remaining().min(this.pending.len() - this.handed);
            buf.put_slice(&this.pending[this.handed..this.handed + n]);
            this.handed += n;
            if this.handed == this.pending.len() {
                this.pending.clear();
                this.pending.shrink_to(KEEP_BYTES);
                this.handed = 0;
            }
            return Poll::Ready(Ok(()));
        }
        if this.framing.passing_through() {
            return Pin::new(&mut this.io).poll_read(cx, buf);
        }
        let before = buf.filled().len();
        ready!(Pin::new(&mut this.io).poll_read(cx, buf))?;
        let read = buf.filled().len() - before;
        if read == 0 {
            return Poll::Ready(Ok(())); // end of stream
        }
        REWRITTEN.with(|cell| {
            let mut out = cell.borrow_mut();
            out.clear();
            // The common case (nothing to encode) copies nothing: the bytes
            // stay where they were read.
            if this.framing.scan(&buf.filled()[before..], &mut out) {
                // A rewrite only ever lengthens.
                debug_assert!(out.len() > read);
                buf.set_filled(before);
                let fits = buf.remaining().min(out.len());
                buf.put_slice(&out[..fits]);
                this.pending.extend_from_slice(&out[fits..]);
            }
            out.clear();
            out.shrink_to(THREAD_KEEP_BYTES);
        });
        Poll::Ready(Ok(()))
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for LenientTarget<IO> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_write_vectored(self: Pin<&mut Self>, cx: &mut Context<'_>, bufs: &[io::IoSlice<'_>]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

/// Where in HTTP/1.1's message framing the next byte falls.
#[derive(Debug, Default)]
struct Framing {
    state: State,
    /// The header, chunk-size or trailer line being read, when a read ended
    /// inside it (a line read whole is looked at where it was read).
    line: Vec<u8>,
    /// Bytes of the request line read so far, after its method.
    request_line_bytes: usize,
    head: Head,
}

/// Where a read's rewritten bytes go: nothing until the first byte that
/// must be encoded, then everything before it and every byte after.
struct Rewrite<'a> {
    out: &'a mut Vec<u8>,
    /// Bytes of the input already in `out`.
    copied: usize,
    started: bool,
}

impl Rewrite<'_> {
    /// `input[at]` goes out percent-encoded.
    fn encode(&mut self, input: &[u8], at: usize) {
        let byte = input[at];
        self.out.extend_from_slice(&input[self.copied..at]);
        self.out.extend_from_slice(&[b'%', HEX[usize::from(byte >> 4)], HEX[usize::from(byte & 0xf)]]);
        self.copied = at + 1;
        self.started = true;
    }

    /// Whether anything was encoded (then `out` holds the whole rewritten input).
    fn finish(self, input: &[u8]) -> bool {
        if self.started {
            self.out.extend_from_slice(&input[self.copied..]);
        }
        self.started
    }
}

#[derive(Debug, Default, PartialEq)]
enum State {
    /// Before a request: its method (empty lines before it are allowed).
    #[default]
    Method,
    /// The request target; `query` once its `?` was seen.
    Target { query: bool },
    /// The rest of the request line (the version).
    Version,
    /// Header lines, up to the empty line.
    Headers,
    /// This many body bytes are left.
    Body(u64),
    /// A chunk-size line.
    ChunkSize,
    /// This many bytes of a chunk's data and its CRLF are left.
    ChunkData(u64),
    /// Trailer lines after the last chunk, up to the empty line.
    Trailers,
    /// Bytes are no longer followed: copied as they are.
    PassThrough,
}

/// What a request's head says about its body.
#[derive(Debug, Default)]
struct Head {
    method: Vec<u8>,
    content_length: Option<u64>,
    /// The last transfer coding named (lowercase).
    transfer_coding: Option<String>,
    /// Something it cannot follow with certainty (see the module doc).
    unsure: bool,
}

impl Framing {
    fn passing_through(&self) -> bool {
        self.state == State::PassThrough
    }

    /// Appends `input` to `out`, rewriting request targets.
    #[cfg(test)]
    fn feed(&mut self, input: &[u8], out: &mut Vec<u8>) {
        if !self.scan(input, out) {
            out.extend_from_slice(input);
        }
    }

    /// Follows `input`; when a target in it needs encoding, appends all of
    /// it, rewritten, to `out` and says so (otherwise `out` is untouched).
    /// Lines are found with `memchr` and bodies skipped whole: only the
    /// request line is looked at byte by byte.
    fn scan(&mut self, input: &[u8], out: &mut Vec<u8>) -> bool {
        let mut rewrite = Rewrite { out, copied: 0, started: false };
        let mut at = 0;
        while at < input.len() {
            match &mut self.state {
                State::PassThrough => break,
                State::Body(left) | State::ChunkData(left) => {
                    let n = (*left).min((input.len() - at) as u64);
                    at += n as usize;
                    *left -= n;
                    if *left == 0 {
                        self.state = if self.state == State::Body(0) { State::Method } else { State::ChunkSize };
                    }
                }
                State::Method => {
                    self.method_byte(input[at]);
                    at += 1;
                }
                State::Target { query } => {
                    let (byte, query) = (input[at], *query);
                    match byte {
                        b' ' => self.state = State::Version,
                        b'?' => self.state = State::Target { query: true },
                        b'\r' | b'\n' => self.state = State::PassThrough,
                        _ => {}
                    }
                    if refused_by_the_uri_parser(byte, query) {
                        rewrite.encode(input, at);
                    }
                    at += 1;
                    self.request_line_grew(1);
                }
                State::Version => {
                    let rest = &input[at..];
                    // The line's end is not counted against the bound (as
                    // for header lines): a line of exactly the bound is followed.
                    match memchr::memchr(b'\n', rest) {
                        Some(newline) => {
                            at += newline + 1;
                            self.request_line_grew(newline);
                            if self.state == State::Version {
                                self.state = State::Headers;
                                self.request_line_bytes = 0;
                            }
                        }
                        None => {
                            at = input.len();
                            self.request_line_grew(rest.len());
                        }
                    }
                }
                State::Headers | State::ChunkSize | State::Trailers => {
                    let rest = &input[at..];
                    match memchr::memchr(b'\n', rest) {
                        Some(newline) if self.line.is_empty() && newline + self.head.method.len() <= LINE_BYTES_MAX => {
                            self.end_line(&rest[..newline]);
                            at += newline + 1;
                        }
                        Some(newline) => {
                            at += newline + 1;
                            if self.line_grew(&rest[..newline]) {
                                let mut taken = std::mem::take(&mut self.line);
                                self.end_line(&taken);
                                // The line's buffer is kept for the next one, within bounds.
                                taken.clear();
                                taken.shrink_to(KEEP_BYTES);
                                self.line = taken;
                            }
                        }
                        None => {
                            at = input.len();
                            self.line_grew(rest);
                        }
                    }
                }
            }
        }
        rewrite.finish(input)
    }

    /// Counts `n` more bytes of the request line, held (with its method) to
    /// `LINE_BYTES_MAX`.
    fn request_line_grew(&mut self, n: usize) {
        self.request_line_bytes += n;
        if self.request_line_bytes + self.head.method.len() > LINE_BYTES_MAX {
            self.state = State::PassThrough;
        }
    }

    /// Adds `bytes` to the line being read; false (and bytes no longer
    /// followed) once it is longer than `LINE_BYTES_MAX`.
    fn line_grew(&mut self, bytes: &[u8]) -> bool {
        if self.line.len() + bytes.len() + self.head.method.len() > LINE_BYTES_MAX {
            self.line = Vec::new();
            self.state = State::PassThrough;
            return false;
        }
        self.line.extend_from_slice(bytes);
        true
    }

    /// A head, chunk-size or trailer line ended (its `\n` read).
    fn end_line(&mut self, line: &[u8]) {
        let crlf = line.last() == Some(&b'\r');
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        // hyper ends chunk-size and trailer lines only at CRLF (a bare LF is
        // a byte of the line to it): anything else is not followed.
        if !crlf && matches!(self.state, State::ChunkSize | State::Trailers) {
            self.state = State::PassThrough;
            return;
        }
        match self.state {
            State::Headers if line.is_empty() => self.state = self.after_head(),
            State::Headers => self.header(line),
            State::ChunkSize => {
                self.state = chunk_size(line).map_or(State::PassThrough, |size| match size {
                    0 => State::Trailers,
                    size => State::ChunkData(size.saturating_add(2)),
                })
            }
            State::Trailers if line.is_empty() => self.state = State::Method,
            _ => {}
        }
    }

    fn method_byte(&mut self, byte: u8) {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'-' | b'_' => {
                self.head.method.push(byte);
                self.request_line_grew(0);
            }
            // Empty lines before a request are allowed (RFC 9112, 2.2).
            b'\r' | b'\n' if self.head.method.is_empty() => {}
            b' ' if !self.head.method.is_empty() => {
                self.state = State::Target { query: false };
                self.request_line_bytes = 0;
            }
            _ => self.state = State::PassThrough,
        }
    }

    fn header(&mut self, line: &[u8]) {
        let Some(colon) = memchr::memchr(b':', line) else {
            self.head.unsure = true;
            return;
        };
        let name = &line[..colon];
        // Only the names that frame a body are read (no copy of the others).
        let value = || String::from_utf8_lossy(&line[colon + 1..]).trim().to_ascii_lowercase();
        if name.eq_ignore_ascii_case(b"content-length") {
            let value = value();
            // Digits only, as hyper reads it (Rust's parse also takes "+1").
            let length = if value.bytes().all(|b| b.is_ascii_digit()) { value.parse::<u64>().ok() } else { None };
            match (length.ok_or(()), self.head.content_length) {
                (Ok(length), None) => self.head.content_length = Some(length),
                (Ok(length), Some(earlier)) if length == earlier => {}
                _ => self.head.unsure = true,
            }
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            self.head.transfer_coding = value().rsplit(',').next().map(|coding| coding.trim().to_string());
        } else if name.eq_ignore_ascii_case(b"upgrade") {
            self.head.unsure = true;
        }
    }

    /// What follows a request's head: its body, the next request, or bytes
    /// no longer followed.
    fn after_head(&mut self) -> State {
        let head = std::mem::take(&mut self.head);
        if head.unsure || head.method.eq_ignore_ascii_case(b"CONNECT") {
            return State::PassThrough;
        }
        match (head.transfer_coding.as_deref(), head.content_length) {
            (Some("chunked"), _) => State::ChunkSize,
            (Some(_), _) => State::PassThrough,
            (None, Some(length)) if length > 0 => State::Body(length),
            (None, _) => State::Method,
        }
    }
}

const HEX: &[u8; 16] = b"0123456789ABCDEF";

/// The bytes httparse lets into a request target that the `http` crate's
/// URI parser (1.x) refuses, in the path or in the query.
fn refused_by_the_uri_parser(byte: u8, query: bool) -> bool {
    match byte {
        b'"' | b'<' | b'>' => true,
        b'`' => !query,
        _ => false,
    }
}

/// A chunk-size line's size (hex, before any `;` extension).
fn chunk_size(line: &[u8]) -> Option<u64> {
    let digits = line.split(|b| *b == b';').next()?;
    let digits = std::str::from_utf8(digits).ok()?.trim();
    u64::from_str_radix(digits, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rewrite(input: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        Framing::default().feed(input, &mut out);
        out
    }

    /// The same, fed one byte at a time: reads split anywhere.
    fn rewrite_bytewise(input: &[u8]) -> Vec<u8> {
        let mut framing = Framing::default();
        let mut out = Vec::new();
        for byte in input {
            framing.feed(std::slice::from_ref(byte), &mut out);
        }
        out
    }

    fn both(input: &str) -> String {
        let whole = rewrite(input.as_bytes());
        assert_eq!(whole, rewrite_bytewise(input.as_bytes()), "a split read changes nothing");
        String::from_utf8(whole).unwrap()
    }

    #[test]
    fn a_raw_quote_in_a_query_is_encoded() {
        assert_eq!(
            both("GET /dinos.json?orderBy=\"$key\"&startAt=\"b\" HTTP/1.1\r\nHost: x\r\n\r\n"),
            "GET /dinos.json?orderBy=%22$key%22&startAt=%22b%22 HTTP/1.1\r\nHost: x\r\n\r\n"
        );
        assert_eq!(both("GET /a`b?c`<d> HTTP/1.1\r\n\r\n"), "GET /a%60b?c`%3Cd%3E HTTP/1.1\r\n\r\n");
    }

    #[test]
    fn a_target_the_uri_parser_accepts_is_unchanged() {
        let request = "GET /v1/ns/default/kv/svc%2Fapi/config?after=default:12:1 HTTP/1.1\r\nHost: x\r\n\r\n";
        assert_eq!(both(request), request);
        for target in ["/a.json?x={1}|^\\", "/%22", "/é?é"] {
            let request = format!("GET {target} HTTP/1.1\r\n\r\n");
            assert_eq!(both(&request), request);
            let uri: Result<axum::http::Uri, _> = target.parse();
            assert!(uri.is_ok(), "{target}: the http crate accepts it");
        }
    }

    #[test]
    fn every_rewritten_target_is_accepted_by_the_uri_parser() {
        for byte in 0x21u8..=0x7e {
            let target = format!("/p{0}q?x{0}y", byte as char);
            let request = format!("GET {target} HTTP/1.1\r\n\r\n");
            let rewritten = both(&request);
            let target = rewritten.split(' ').nth(1).unwrap();
            let parsed: Result<axum::http::Uri, _> = target.parse();
            assert!(parsed.is_ok() || byte == b'#', "{:?} -> {target}: {parsed:?}", byte as char);
        }
    }

    #[test]
    fn bodies_are_copied_and_the_next_request_is_rewritten() {
        let body = "{\"a\": \"GET /x?\\\"\"}";
        let request = format!("PUT /k?q=\"1\" HTTP/1.1\r\nContent-Length: {}\r\n\r\n{body}GET /z?q=\"2\" HTTP/1.1\r\n\r\n", body.len());
        let expected = format!("PUT /k?q=%221%22 HTTP/1.1\r\nContent-Length: {}\r\n\r\n{body}GET /z?q=%222%22 HTTP/1.1\r\n\r\n", body.len());
        assert_eq!(both(&request), expected);
    }

    #[test]
    fn chunked_bodies_and_trailers_are_followed() {
        let request = "POST /a?\"x\" HTTP/1.1\r\ntransfer-encoding: gzip, Chunked\r\n\r\n\
                       5;ext=1\r\n\"<\">\"\r\n0\r\nTrailer: \"t\"\r\n\r\nGET /b?\"y\" HTTP/1.1\r\n\r\n";
        let expected = "POST /a?%22x%22 HTTP/1.1\r\ntransfer-encoding: gzip, Chunked\r\n\r\n\
                        5;ext=1\r\n\"<\">\"\r\n0\r\nTrailer: \"t\"\r\n\r\nGET /b?%22y%22 HTTP/1.1\r\n\r\n";
        assert_eq!(both(request), expected);
    }

    #[test]
    fn what_it_cannot_follow_passes_through_untouched() {
        for request in [
            // An upgrade: the bytes after the head are another protocol's.
            "GET /v1/ws HTTP/1.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\nGET /?\" HTTP/1.1\r\n\r\n",
            "CONNECT x:1 HTTP/1.1\r\n\r\nGET /?\" HTTP/1.1\r\n\r\n",
            // Lengths that disagree, a coding it does not know.
            "PUT /a HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nxGET /?\" HTTP/1.1\r\n\r\n",
            "PUT /a HTTP/1.1\r\nContent-Length: +1\r\n\r\nxGET /?\" HTTP/1.1\r\n\r\n",
            "PUT /a HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\nxGET /?\" HTTP/1.1\r\n\r\n",
            // Not a request line at all.
            "\u{1}GET /?\" HTTP/1.1\r\n\r\n",
            "GET\r\n/?\" HTTP/1.1\r\n\r\n",
        ] {
            assert_eq!(both(request), request);
        }
    }

    /// hyper ends trailer lines only at CRLF: a bare LF after the last chunk
    /// is a byte of a trailer to it, so what follows is not a request.
    /// Followed as one, a body's quotes were rewritten (found in review).
    #[test]
    fn a_bare_lf_in_chunked_framing_ends_the_rewriting() {
        let body = "GET /?\"\" HTTP/1.1\r\n";
        for request in [
            format!("POST /a HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\nGET / HTTP/1.1\r\nContent-Length: 4\r\n\r\nPUT /p HTTP/1.1\r\n\r\n{body}"),
            format!("POST /a HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\nGET /?\" HTTP/1.1\r\n\r\n{body}"),
            format!("POST /a HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX: 1\n\r\n{body}"),
        ] {
            assert_eq!(both(&request), request);
        }
    }

    #[test]
    fn a_line_past_the_bound_ends_the_rewriting() {
        let long = "a".repeat(LINE_BYTES_MAX);
        let request = format!("GET /{long}?\" HTTP/1.1\r\n\r\nGET /?\" HTTP/1.1\r\n\r\n");
        assert_eq!(both(&request), request);
        let header = format!("GET / HTTP/1.1\r\nX: {long}\r\n\r\nGET /?\" HTTP/1.1\r\n\r\n");
        assert_eq!(both(&header), header);
    }

    /// A request line or header line of exactly `LINE_BYTES_MAX` (its
    /// method included, its CRLF not) is followed; one byte more is not.
    #[test]
    fn a_line_of_exactly_the_bound_is_followed() {
        let next = "GET /?\" HTTP/1.1\r\n\r\n";
        let rewritten_next = "GET /?%22 HTTP/1.1\r\n\r\n";
        // The method, then what follows its space up to the LF.
        let filler = LINE_BYTES_MAX - "GET".len() - "/".len() - " HTTP/1.1\r".len();
        let at_bound = format!("GET /{} HTTP/1.1\r\n\r\n", "a".repeat(filler));
        assert_eq!(both(&format!("{at_bound}{next}")), format!("{at_bound}{rewritten_next}"));
        let past_bound = format!("GET /{} HTTP/1.1\r\n\r\n", "a".repeat(filler + 1));
        assert_eq!(both(&format!("{past_bound}{next}")), format!("{past_bound}{next}"));
        // A header line: "X: " and its value, the CR counted, the LF not,
        // with the request's method (held until the head ends).
        let value = LINE_BYTES_MAX - "GET".len() - "X: ".len() - "\r".len();
        let header_at_bound = format!("GET / HTTP/1.1\r\nX: {}\r\n\r\n", "v".repeat(value));
        assert_eq!(both(&format!("{header_at_bound}{next}")), format!("{header_at_bound}{rewritten_next}"));
        let header_past = format!("GET / HTTP/1.1\r\nX: {}\r\n\r\n", "v".repeat(value + 1));
        assert_eq!(both(&format!("{header_past}{next}")), format!("{header_past}{next}"));
    }

    #[test]
    fn empty_lines_before_a_request_are_allowed() {
        assert_eq!(both("\r\n\r\nGET /?\" HTTP/1.1\r\n\r\n"), "\r\n\r\nGET /?%22 HTTP/1.1\r\n\r\n");
    }
}
