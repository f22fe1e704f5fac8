//! A socket's kernel receive buffer, enlarged: the datagrams of a rail
//! between hosts come in bursts of up to a window of packets per flow,
//! which overflow a default buffer (about 208 KiB, and an 8 KiB datagram
//! that crossed a 1500-byte link in fragments is charged about twice its
//! size) and are then lost and resent after a timeout.

use std::io;
use std::os::fd::AsRawFd;

/// Ask for a receive buffer of `bytes` on `socket`: beyond the system's
/// `net.core.rmem_max` where the process may (`SO_RCVBUFFORCE`, which
/// needs `CAP_NET_ADMIN`), up to it otherwise (`SO_RCVBUF`). Returns the
/// size the kernel granted (which counts its own bookkeeping too).
pub fn grow_receive_buffer(socket: &impl AsRawFd, bytes: usize) -> io::Result<usize> {
    let fd = socket.as_raw_fd();
    let want = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    if set(fd, libc::SO_RCVBUFFORCE, want).is_err() {
        set(fd, libc::SO_RCVBUF, want)?;
    }
    let mut granted: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `fd` is an open socket borrowed for this call; `granted` and
    // `len` are valid for writes of the sizes passed, and outlive the call.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&raw mut granted).cast(),
            &raw mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(usize::try_from(granted).unwrap_or(0))
}

fn set(fd: libc::c_int, option: libc::c_int, value: libc::c_int) -> io::Result<()> {
    // SAFETY: `fd` is an open socket borrowed for this call; the option
    // value is a c_int on the stack, its size passed with it.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            option,
            (&raw const value).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_buffer_grows_and_a_non_socket_is_refused() {
        let socket = std::net::UdpSocket::bind("127.0.0.1:0").expect("socket");
        let before = grow_receive_buffer(&socket, 0).expect("a socket");
        let after = grow_receive_buffer(&socket, 4 << 20).expect("a socket");
        assert!(after > before, "{before} -> {after}");
        let file = std::fs::File::open("/dev/null").expect("a file");
        assert!(grow_receive_buffer(&file, 1 << 20).is_err());
    }
}
