//! The line codec: one JSON object per `\n`-terminated line, with a frame limit.

use tokio::io::{AsyncBufRead, AsyncBufReadExt};

/// Default `--max-frame-bytes`: the longest line a peer may send, so no peer can make the host
/// buffer without bound.
pub const DEFAULT_MAX_FRAME_BYTES: usize = 1024 * 1024;
/// At most this many requests of one connection are handled at once; beyond it the host stops
/// reading from that connection until replies drain.
pub const MAX_IN_FLIGHT_PER_CONNECTION: usize = 64;

/// What one read of the line codec produced: the server answers a frame, a line over the limit
/// and a connection closed mid-line each in its own way.
#[derive(Debug, PartialEq, Eq)]
pub enum FrameRead {
    /// A complete line is in the buffer (without its newline or a trailing `\r`).
    Frame,
    /// The line exceeded the frame limit; the rest of the line was not read.
    TooLarge,
    /// The peer closed after a partial line (kept in the buffer).
    Partial,
    /// The peer closed cleanly between frames.
    Eof,
}

/// Reads one `\n`-terminated frame of at most `max` bytes into `buf`; a longer line is skipped
/// rather than buffered.
///
/// Cancel-safe as long as `buf` is kept between calls: bytes are moved from the reader into
/// `buf` as they are consumed, so a cancelled call loses nothing.
pub async fn read_frame<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    buf: &mut Vec<u8>,
    max: usize,
) -> std::io::Result<FrameRead> {
    loop {
        let available = reader.fill_buf().await?;
        if available.is_empty() {
            return Ok(if buf.is_empty() {
                FrameRead::Eof
            } else {
                FrameRead::Partial
            });
        }
        if let Some(pos) = memchr::memchr(b'\n', available) {
            // A `\r` before the `\n` is not part of the frame: it does not count toward `max`.
            let before = if pos > 0 {
                available.get(pos - 1)
            } else {
                buf.last()
            };
            let cr = usize::from(before == Some(&b'\r'));
            if buf.len() + pos - cr > max {
                reader.consume(pos + 1);
                return Ok(FrameRead::TooLarge);
            }
            buf.extend_from_slice(&available[..pos]);
            reader.consume(pos + 1);
            if buf.last() == Some(&b'\r') {
                buf.pop();
            }
            return Ok(FrameRead::Frame);
        }
        let n = available.len();
        // One byte past `max` may still be the `\r` of a CRLF line.
        if buf.len() + n > max.saturating_add(1) {
            reader.consume(n);
            return Ok(FrameRead::TooLarge);
        }
        buf.extend_from_slice(available);
        reader.consume(n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_cr_of_crlf_does_not_count_toward_the_limit() {
        for data in [&b"0123456789\r\nx"[..], &b"0123456789\r\n"[..]] {
            // Read in pieces that split the CR from the LF, too.
            for cap in [1, 3, 11, 64] {
                let mut r = tokio::io::BufReader::with_capacity(cap, data);
                let mut buf = Vec::new();
                assert_eq!(
                    read_frame(&mut r, &mut buf, 10).await.unwrap(),
                    FrameRead::Frame,
                    "capacity {cap}"
                );
                assert_eq!(buf, b"0123456789");
            }
        }
        let mut r = tokio::io::BufReader::with_capacity(4, &b"0123456789A\r\n"[..]);
        let mut buf = Vec::new();
        assert_eq!(
            read_frame(&mut r, &mut buf, 10).await.unwrap(),
            FrameRead::TooLarge
        );
    }

    #[tokio::test]
    async fn frames_are_limited_and_split_on_newlines() {
        let data: &[u8] = b"{\"a\":1}\r\n0123456789ABCDEF\nlast";
        let mut r = tokio::io::BufReader::new(data);
        let mut buf = Vec::new();
        assert_eq!(
            read_frame(&mut r, &mut buf, 10).await.unwrap(),
            FrameRead::Frame
        );
        assert_eq!(buf, b"{\"a\":1}");
        buf.clear();
        assert_eq!(
            read_frame(&mut r, &mut buf, 10).await.unwrap(),
            FrameRead::TooLarge
        );
        buf.clear();
        assert_eq!(
            read_frame(&mut r, &mut buf, 10).await.unwrap(),
            FrameRead::Partial
        );
        assert_eq!(buf, b"last");
    }
}
