//! rsockets are not implemented: `rsocket()` fails with ENOSYS, so no
//! rsocket descriptor can exist, and every other r* call is about an
//! ordinary descriptor and passes straight to the C library, exactly what
//! rdma-core's rsockets do for descriptors that are not rsockets (rping
//! and cmtime call `rpoll` on ordinary descriptors).

use core::ffi::{c_int, c_void};

use libc::{
    fd_set, iovec, msghdr, nfds_t, off_t, pollfd, size_t, sockaddr, socklen_t, ssize_t, timeval,
};

use crate::error::set_errno;

#[no_mangle]
pub extern "C" fn rsocket(_domain: c_int, _type: c_int, _protocol: c_int) -> c_int {
    set_errno(libc::ENOSYS);
    -1
}

/// # Safety
/// As `bind(2)`.
#[no_mangle]
pub unsafe extern "C" fn rbind(socket: c_int, addr: *const sockaddr, addrlen: socklen_t) -> c_int {
    // SAFETY: the caller's arguments go to libc unchanged.
    unsafe { libc::bind(socket, addr, addrlen) }
}

#[no_mangle]
pub extern "C" fn rlisten(socket: c_int, backlog: c_int) -> c_int {
    // SAFETY: plain syscall.
    unsafe { libc::listen(socket, backlog) }
}

/// # Safety
/// As `accept(2)`.
#[no_mangle]
pub unsafe extern "C" fn raccept(
    socket: c_int,
    addr: *mut sockaddr,
    addrlen: *mut socklen_t,
) -> c_int {
    // SAFETY: the caller's arguments go to libc unchanged.
    unsafe { libc::accept(socket, addr, addrlen) }
}

/// # Safety
/// As `connect(2)`.
#[no_mangle]
pub unsafe extern "C" fn rconnect(
    socket: c_int,
    addr: *const sockaddr,
    addrlen: socklen_t,
) -> c_int {
    // SAFETY: the caller's arguments go to libc unchanged.
    unsafe { libc::connect(socket, addr, addrlen) }
}

#[no_mangle]
pub extern "C" fn rshutdown(socket: c_int, how: c_int) -> c_int {
    // SAFETY: plain syscall.
    unsafe { libc::shutdown(socket, how) }
}

#[no_mangle]
pub extern "C" fn rclose(socket: c_int) -> c_int {
    // SAFETY: plain syscall on the caller's descriptor.
    unsafe { libc::close(socket) }
}

/// # Safety
/// As `recv(2)`.
#[no_mangle]
pub unsafe extern "C" fn rrecv(
    socket: c_int,
    buf: *mut c_void,
    len: size_t,
    flags: c_int,
) -> ssize_t {
    // SAFETY: the caller's arguments go to libc unchanged.
    unsafe { libc::recv(socket, buf, len, flags) }
}

/// # Safety
/// As `recvfrom(2)`.
#[no_mangle]
pub unsafe extern "C" fn rrecvfrom(
    socket: c_int,
    buf: *mut c_void,
    len: size_t,
    flags: c_int,
    src_addr: *mut sockaddr,
    addrlen: *mut socklen_t,
) -> ssize_t {
    // SAFETY: the caller's arguments go to libc unchanged.
    unsafe { libc::recvfrom(socket, buf, len, flags, src_addr, addrlen) }
}

/// # Safety
/// As `recvmsg(2)`.
#[no_mangle]
pub unsafe extern "C" fn rrecvmsg(socket: c_int, msg: *mut msghdr, flags: c_int) -> ssize_t {
    // SAFETY: the caller's arguments go to libc unchanged.
    unsafe { libc::recvmsg(socket, msg, flags) }
}

/// # Safety
/// As `send(2)`.
#[no_mangle]
pub unsafe extern "C" fn rsend(
    socket: c_int,
    buf: *const c_void,
    len: size_t,
    flags: c_int,
) -> ssize_t {
    // SAFETY: the caller's arguments go to libc unchanged.
    unsafe { libc::send(socket, buf, len, flags) }
}

/// # Safety
/// As `sendto(2)`.
#[no_mangle]
pub unsafe extern "C" fn rsendto(
    socket: c_int,
    buf: *const c_void,
    len: size_t,
    flags: c_int,
    dest_addr: *const sockaddr,
    addrlen: socklen_t,
) -> ssize_t {
    // SAFETY: the caller's arguments go to libc unchanged.
    unsafe { libc::sendto(socket, buf, len, flags, dest_addr, addrlen) }
}

/// # Safety
/// As `sendmsg(2)`.
#[no_mangle]
pub unsafe extern "C" fn rsendmsg(socket: c_int, msg: *const msghdr, flags: c_int) -> ssize_t {
    // SAFETY: the caller's arguments go to libc unchanged.
    unsafe { libc::sendmsg(socket, msg, flags) }
}

/// # Safety
/// As `read(2)`.
#[no_mangle]
pub unsafe extern "C" fn rread(socket: c_int, buf: *mut c_void, count: size_t) -> ssize_t {
    // SAFETY: the caller's arguments go to libc unchanged.
    unsafe { libc::read(socket, buf, count) }
}

/// # Safety
/// As `readv(2)`.
#[no_mangle]
pub unsafe extern "C" fn rreadv(socket: c_int, iov: *const iovec, iovcnt: c_int) -> ssize_t {
    // SAFETY: the caller's arguments go to libc unchanged.
    unsafe { libc::readv(socket, iov, iovcnt) }
}

/// # Safety
/// As `write(2)`.
#[no_mangle]
pub unsafe extern "C" fn rwrite(socket: c_int, buf: *const c_void, count: size_t) -> ssize_t {
    // SAFETY: the caller's arguments go to libc unchanged.
    unsafe { libc::write(socket, buf, count) }
}

/// # Safety
/// As `writev(2)`.
#[no_mangle]
pub unsafe extern "C" fn rwritev(socket: c_int, iov: *const iovec, iovcnt: c_int) -> ssize_t {
    // SAFETY: the caller's arguments go to libc unchanged.
    unsafe { libc::writev(socket, iov, iovcnt) }
}

/// # Safety
/// As `poll(2)`.
#[no_mangle]
pub unsafe extern "C" fn rpoll(fds: *mut pollfd, nfds: nfds_t, timeout: c_int) -> c_int {
    // SAFETY: the caller's arguments go to libc unchanged.
    unsafe { libc::poll(fds, nfds, timeout) }
}

/// # Safety
/// As `select(2)`.
#[no_mangle]
pub unsafe extern "C" fn rselect(
    nfds: c_int,
    readfds: *mut fd_set,
    writefds: *mut fd_set,
    exceptfds: *mut fd_set,
    timeout: *mut timeval,
) -> c_int {
    // SAFETY: the caller's arguments go to libc unchanged.
    unsafe { libc::select(nfds, readfds, writefds, exceptfds, timeout) }
}

/// # Safety
/// As `getpeername(2)`.
#[no_mangle]
pub unsafe extern "C" fn rgetpeername(
    socket: c_int,
    addr: *mut sockaddr,
    addrlen: *mut socklen_t,
) -> c_int {
    // SAFETY: the caller's arguments go to libc unchanged.
    unsafe { libc::getpeername(socket, addr, addrlen) }
}

/// # Safety
/// As `getsockname(2)`.
#[no_mangle]
pub unsafe extern "C" fn rgetsockname(
    socket: c_int,
    addr: *mut sockaddr,
    addrlen: *mut socklen_t,
) -> c_int {
    // SAFETY: the caller's arguments go to libc unchanged.
    unsafe { libc::getsockname(socket, addr, addrlen) }
}

/// # Safety
/// As `setsockopt(2)`.
#[no_mangle]
pub unsafe extern "C" fn rsetsockopt(
    socket: c_int,
    level: c_int,
    optname: c_int,
    optval: *const c_void,
    optlen: socklen_t,
) -> c_int {
    // SAFETY: the caller's arguments go to libc unchanged.
    unsafe { libc::setsockopt(socket, level, optname, optval, optlen) }
}

/// # Safety
/// As `getsockopt(2)`.
#[no_mangle]
pub unsafe extern "C" fn rgetsockopt(
    socket: c_int,
    level: c_int,
    optname: c_int,
    optval: *mut c_void,
    optlen: *mut socklen_t,
) -> c_int {
    // SAFETY: the caller's arguments go to libc unchanged.
    unsafe { libc::getsockopt(socket, level, optname, optval, optlen) }
}

/// `int rfcntl(int socket, int cmd, ... /* arg */)`. Stable Rust cannot
/// define a C variadic function; on x86-64 (and the other 64-bit Linux
/// ABIs) the one optional integer or pointer argument travels in the same
/// register as a third fixed argument, so it is taken as one.
#[no_mangle]
pub extern "C" fn rfcntl(socket: c_int, cmd: c_int, arg: usize) -> c_int {
    // SAFETY: fcntl with the caller's command and argument, unchanged.
    unsafe { libc::fcntl(socket, cmd, arg) }
}

#[no_mangle]
pub extern "C" fn riomap(
    _socket: c_int,
    _buf: *mut c_void,
    _len: size_t,
    _prot: c_int,
    _flags: c_int,
    _offset: off_t,
) -> off_t {
    set_errno(libc::ENOSYS);
    -1
}

#[no_mangle]
pub extern "C" fn riounmap(_socket: c_int, _buf: *mut c_void, _len: size_t) -> c_int {
    set_errno(libc::ENOSYS);
    -1
}

#[no_mangle]
pub extern "C" fn riowrite(
    _socket: c_int,
    _buf: *const c_void,
    _count: size_t,
    _offset: off_t,
    _flags: c_int,
) -> size_t {
    set_errno(libc::ENOSYS);
    usize::MAX
}

#[no_mangle]
pub extern "C" fn repoll_create(_flags: c_int) -> c_int {
    set_errno(libc::ENOSYS);
    -1
}

#[no_mangle]
pub extern "C" fn repoll_ctl(
    _epfd: c_int,
    _op: c_int,
    _fd: c_int,
    _event: *mut libc::epoll_event,
) -> c_int {
    set_errno(libc::ENOSYS);
    -1
}

#[no_mangle]
pub extern "C" fn repoll_wait(
    _epfd: c_int,
    _events: *mut libc::epoll_event,
    _maxevents: c_int,
    _timeout: c_int,
) -> c_int {
    set_errno(libc::ENOSYS);
    -1
}
