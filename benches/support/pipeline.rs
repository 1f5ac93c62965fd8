//! The pipelining client every throughput measurement uses, so Polaris and its baselines pay
//! the same client cost.

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};

/// Sends `lines` (each ending in a newline) keeping at most `window` requests in flight, and
/// checks that every reply says `"ok":true`. `reply` is scratch space for one reply line.
pub async fn pipeline<S: AsyncRead + AsyncWrite + Unpin>(
    io: &mut BufReader<S>,
    lines: &[Vec<u8>],
    window: usize,
    reply: &mut Vec<u8>,
) {
    let (mut sent, mut received) = (0, 0);
    let mut out = Vec::with_capacity(64 * 1024);
    while received < lines.len() {
        out.clear();
        while sent < lines.len() && sent - received < window {
            out.extend_from_slice(&lines[sent]);
            sent += 1;
        }
        if !out.is_empty() {
            io.get_mut().write_all(&out).await.expect("write");
        }
        loop {
            reply.clear();
            io.read_until(b'\n', reply).await.expect("read");
            assert!(
                memchr::memmem::find(reply, b"\"ok\":true").is_some(),
                "a reply was not ok: {}",
                String::from_utf8_lossy(reply)
            );
            received += 1;
            if memchr::memchr(b'\n', io.buffer()).is_none() {
                break;
            }
        }
    }
}
