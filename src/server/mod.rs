//! The local-socket server: a private socket directory, accept loops, and per-connection
//! reading and writing with the frame, connection and in-flight limits, and graceful shutdown.
//!
//! The server knows no protocol of its own: each socket serves a [`Service`], which turns
//! frames into replies. The bridge socket serves the host and the introspection socket the
//! operator's channel; `crate::serve` puts them together.
//!
//! - `socket_dir`: where the sockets live and the checks that make serving there safe.
//! - `connection`: one connection's buffers — frames in, reply lines out.
//! - `listener`: the accept loops, the connection limit, the in-flight window and shutdown.
//!
//! Locks: the only lock taken here is the async one that keeps a connection's reply lines
//! whole, and async locks do not poison. Behind the services, every `std::sync` lock a
//! request reaches recovers from poisoning the same way (`PoisonError::into_inner`): the
//! host's state, which the introspection service also reads through `Host::lock`, and the
//! fixture executor's pages. A panic is already answered as that request's `INTERNAL` reply;
//! refusing everyone afterwards would not undo it.

mod connection;
mod listener;
mod socket_dir;

pub use connection::{Connection, Outbound, Outbox};
pub use listener::{accept_loop, serve_connection};
pub use socket_dir::{
    bind, current_uid, prepare_socket_dir, reclaim_socket_path, resolve_socket_dir, ServeError,
};

use std::time::Duration;

use crate::host::Handled;

/// Default `--max-connections`: enough for every agent and console on one machine, few enough
/// that a runaway client cannot exhaust the host's file descriptors.
pub const DEFAULT_MAX_CONNECTIONS: usize = 256;
/// Default `--frame-timeout-ms`: a frame must be whole this long after its first byte, so a
/// peer trickling bytes cannot hold a connection slot forever.
pub const DEFAULT_FRAME_TIMEOUT_MS: u64 = 10_000;
/// Default `--idle-timeout-ms`: a connection with nothing in flight, no partial frame and no
/// subscription is closed after this long, so idle peers cannot take every slot.
pub const DEFAULT_IDLE_TIMEOUT_MS: u64 = 300_000;
/// Default `--max-pending-reply-bytes`: reply bytes one connection may have waiting to be
/// written before the host stops reading it, so a peer that does not read cannot grow memory.
pub const DEFAULT_MAX_PENDING_REPLY_BYTES: usize = 8 * 1024 * 1024;
/// The bridge socket's file name, where agents (through `polaris mcp` or the client library)
/// send requests.
pub const BRIDGE_SOCKET: &str = "bridge.sock";
/// The introspection socket's file name, where the console and the operator commands read the
/// book and clear it.
pub const INTROSPECT_SOCKET: &str = "introspect.sock";

/// A protocol spoken on one socket. The accept loops are generic over it, so the bridge and
/// the operator's channel share every limit and the shutdown path without the server knowing
/// either protocol.
pub trait Service: Clone + Send + Sync + 'static {
    /// Handles one frame (without its newline).
    fn handle_frame(&self, frame: &[u8], conn: &Connection) -> Handled;
    /// Handles frames that arrived together, in order, pushing one answer per frame, and
    /// stops taking frames once the ready replies pushed reach `room` bytes (the connection's
    /// reply-byte bound, SPEC §10); at least one frame is taken. The caller hands the frames
    /// not taken again once the peer has read. A service whose requests share a lock can take
    /// it once for all of them; by default each frame is handled on its own.
    fn handle_frames(
        &self,
        frames: &[&[u8]],
        room: usize,
        conn: &Connection,
        out: &mut Vec<Handled>,
    ) {
        let mut used = 0;
        for (i, frame) in frames.iter().enumerate() {
            if i > 0 && used >= room {
                break;
            }
            let answer = self.handle_frame(frame, conn);
            match &answer {
                Handled::Ready(line) => used += line.len(),
                Handled::Replay(replay) => used += replay.line_len(self.run_id()),
                Handled::Later(_) | Handled::Joined(_) => {}
            }
            out.push(answer);
        }
    }
    /// The run ID for replies written by the connection layer (a frame too large, a frame cut
    /// off), so they name the run like every other reply.
    fn run_id(&self) -> &str;
}

/// The limits of one socket, set on the command line, so one client cannot exhaust the host.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// `--max-frame-bytes`: a longer frame is refused and its connection closed.
    pub max_frame_bytes: usize,
    /// `--max-connections`: beyond it, a new connection gets one `HOST_BUSY` line and is closed.
    pub max_connections: usize,
    /// `--frame-timeout-ms`: a frame not whole this long after its first byte gets
    /// `FRAME_TIMEOUT` and its connection is closed.
    pub frame_timeout: Duration,
    /// `--idle-timeout-ms`: a connection with nothing in flight, no partial frame and no
    /// subscription is closed after this long.
    pub idle_timeout: Duration,
    /// `--max-pending-reply-bytes`: past this many unwritten reply bytes, the host stops
    /// reading the connection until the peer reads.
    pub max_pending_reply_bytes: usize,
}

impl Default for Limits {
    /// The command line's defaults.
    fn default() -> Limits {
        Limits {
            max_frame_bytes: crate::protocol::DEFAULT_MAX_FRAME_BYTES,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            frame_timeout: Duration::from_millis(DEFAULT_FRAME_TIMEOUT_MS),
            idle_timeout: Duration::from_millis(DEFAULT_IDLE_TIMEOUT_MS),
            max_pending_reply_bytes: DEFAULT_MAX_PENDING_REPLY_BYTES,
        }
    }
}
