//! Fewer wake-ups for large requests: while the rest of a big frame is still on its way, the
//! socket's receive low-water mark (SO_RCVLOWAT) tells the kernel not to wake the reader
//! until that much has arrived.
//!
//! Without it a connection wakes for every few kilobytes a client's socket writes deliver.
//! Over TLS that is each record (librdkafka writes 16 KiB records one by one): 50,000
//! wake-ups per GiB produced against 3,000 in plaintext, and each costs a context switch
//! and an epoll round. The mark is only ever a lower bound of what the peer must still send
//! for the frame, so it cannot hold back a frame that is complete. A connection sets it only
//! when it is about to wait (its last read found nothing), from what the frame still misses
//! then: reads that find bytes waiting cost no syscall for it. The kernel also wakes the
//! reader regardless on a close, under memory pressure, or when the receive window is nearly
//! shut (tcp_data_ready), so a mark the buffer cannot reach does not stall the connection.

use std::os::fd::{AsRawFd, BorrowedFd};

/// Below this many missing bytes the mark stays at 1 (the kernel's default): a small
/// request arrives in one or two segments anyway, and changing the mark costs a syscall.
const MIN_MARK: usize = 64 * 1024;

/// The highest mark set. The kernel grows the receive buffer to hold twice the mark; a
/// wake-up per MiB is already few.
const MAX_MARK: usize = 1024 * 1024;

/// The mark one connection has set, so that it changes only when it must.
#[derive(Debug)]
pub(crate) struct LowWater {
    mark: usize,
}

impl LowWater {
    pub(crate) fn new() -> LowWater {
        LowWater { mark: 1 }
    }

    /// Sets the mark for a frame that needs `missing` more bytes, of which up to `held` may
    /// already sit in the transport's own buffers (a TLS layer's undelivered records).
    pub(crate) fn expect(&mut self, socket: BorrowedFd<'_>, missing: usize, held: usize) {
        let mark = mark_for(missing, held);
        if mark == self.mark {
            return;
        }
        match set_receive_low_water(socket, mark) {
            Ok(()) => self.mark = mark,
            // Only wake-ups are lost: reading works the same at the kernel's mark.
            Err(error) => tracing::debug!(%error, mark, "could not set SO_RCVLOWAT"),
        }
    }
}

/// The mark for `missing` bytes to come, `held` of which the transport may have read already.
fn mark_for(missing: usize, held: usize) -> usize {
    let to_come = missing.saturating_sub(held);
    if to_come < MIN_MARK {
        1
    } else {
        to_come.min(MAX_MARK)
    }
}

fn set_receive_low_water(socket: BorrowedFd<'_>, mark: usize) -> std::io::Result<()> {
    let value = libc::c_int::try_from(mark).unwrap_or(libc::c_int::MAX);
    // SAFETY: a valid socket descriptor (borrowed for the call) and a pointer to a c_int with
    // its size, as setsockopt(2) asks for SO_RCVLOWAT.
    let result = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVLOWAT,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if result == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsFd;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    use super::*;

    fn current_mark(socket: BorrowedFd<'_>) -> usize {
        let mut value: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: as in set_receive_low_water, with getsockopt's out-parameters.
        let result = unsafe {
            libc::getsockopt(
                socket.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVLOWAT,
                (&mut value as *mut libc::c_int).cast(),
                &mut len,
            )
        };
        assert_eq!(result, 0);
        value as usize
    }

    async fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap());
        let (client, accepted) = tokio::join!(client, listener.accept());
        (client.unwrap(), accepted.unwrap().0)
    }

    #[test]
    fn only_large_remainders_raise_the_mark() {
        assert_eq!(mark_for(0, 0), 1);
        assert_eq!(mark_for(MIN_MARK - 1, 0), 1);
        assert_eq!(mark_for(MIN_MARK, 0), MIN_MARK);
        assert_eq!(mark_for(500_000, 0), 500_000);
        // What the transport may hold is not waited for.
        assert_eq!(mark_for(500_000, 100_000), 400_000);
        assert_eq!(mark_for(MIN_MARK + 10, 64), 1);
        assert_eq!(mark_for(usize::MAX, 0), MAX_MARK);
    }

    #[tokio::test]
    async fn the_mark_is_set_then_lowered_again() {
        let (_client, server) = pair().await;
        let mut low_water = LowWater::new();
        low_water.expect(server.as_fd(), 300_000, 0);
        assert_eq!(current_mark(server.as_fd()), 300_000);
        low_water.expect(server.as_fd(), 4, 0);
        assert_eq!(current_mark(server.as_fd()), 1);
    }

    #[tokio::test]
    async fn a_raised_mark_still_delivers_every_byte() {
        // The reader is woken once the mark is reached, and reads what is there.
        let (mut client, mut server) = pair().await;
        let mut low_water = LowWater::new();
        let total = 200_000;
        low_water.expect(server.as_fd(), total, 0);
        let writer = tokio::spawn(async move {
            for chunk in vec![7u8; total].chunks(16 * 1024) {
                client.write_all(chunk).await.unwrap();
                tokio::task::yield_now().await;
            }
            client
        });
        let mut got = vec![0u8; total];
        server.read_exact(&mut got).await.unwrap();
        assert!(got.iter().all(|b| *b == 7));
        drop(writer.await.unwrap());
    }

    #[tokio::test]
    async fn a_close_wakes_a_reader_below_the_mark() {
        let (mut client, mut server) = pair().await;
        let mut low_water = LowWater::new();
        low_water.expect(server.as_fd(), MAX_MARK, 0);
        client.write_all(&[1; 100]).await.unwrap();
        drop(client);
        let mut got = Vec::new();
        server.read_to_end(&mut got).await.unwrap();
        assert_eq!(got.len(), 100);
    }
}
