//! Closing without a reset. A socket closed with the client's bytes still
//! unread is reset (RST), and the client may lose what it was sent last (a
//! 503, a 431, a WebSocket's close frame with 1009): its send fails, and
//! some stacks drop what they received on a reset, so a WebSocket client
//! reports 1006. Such a socket is shut down for writing instead, and what
//! the client still sends is read and dropped until it closes too, for at
//! most a second and for at most [`LINGERING`] sockets at a time.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;

/// Sockets of one listener being closed at once, at most.
const LINGERING: usize = 64;
/// How long a closing socket waits for the client to close.
const LINGER: Duration = Duration::from_secs(1);

/// One listener's sockets being closed.
#[derive(Clone, Default)]
pub(super) struct Closing(Arc<AtomicUsize>);

impl Closing {
    /// Shuts `stream` down for writing and drops what the client still sends
    /// until it closes too; past [`LINGERING`] sockets, closes it at once.
    pub(super) fn linger(&self, mut stream: TcpStream) {
        if self.0.fetch_add(1, Ordering::AcqRel) >= LINGERING {
            self.0.fetch_sub(1, Ordering::AcqRel);
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            self.0.fetch_sub(1, Ordering::AcqRel);
            return;
        };
        let closing = self.0.clone();
        runtime.spawn(async move {
            let drain = async {
                let _ = stream.shutdown().await;
                let mut sink = [0u8; 8192];
                while stream.read(&mut sink).await? > 0 {}
                io::Result::Ok(())
            };
            let _ = tokio::time::timeout(LINGER, drain).await;
            closing.fetch_sub(1, Ordering::AcqRel);
        });
    }
}

/// A served connection's socket, which lingers when dropped (by hyper, or
/// by a WebSocket upgraded from it) unless the client has closed already.
pub(super) struct Lingering {
    /// Taken when dropped.
    stream: Option<TcpStream>,
    closing: Closing,
}

impl Lingering {
    pub(super) fn new(stream: TcpStream, closing: Closing) -> Self {
        Self { stream: Some(stream), closing }
    }

    fn stream(self: Pin<&mut Self>) -> io::Result<Pin<&mut TcpStream>> {
        self.get_mut().stream.as_mut().map(Pin::new).ok_or_else(|| io::ErrorKind::NotConnected.into())
    }
}

impl Drop for Lingering {
    fn drop(&mut self) {
        let Some(stream) = self.stream.take() else { return };
        match stream.try_read(&mut [0u8; 1]) {
            // The client closed its side, or the socket failed: nothing to wait for.
            Ok(0) => {}
            Err(err) if err.kind() != io::ErrorKind::WouldBlock => {}
            _ => self.closing.linger(stream),
        }
    }
}

impl AsyncRead for Lingering {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        self.stream()?.poll_read(cx, buf)
    }
}

impl AsyncWrite for Lingering {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.stream()?.poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.stream()?.poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.as_ref().is_some_and(TcpStream::is_write_vectored)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.stream()?.poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.stream()?.poll_shutdown(cx)
    }
}
