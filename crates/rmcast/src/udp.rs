//! Batched UDP system calls on Linux, after quinn-udp's `unix.rs`: GSO
//! sends (`sendmsg` with a `UDP_SEGMENT` control message), `sendmmsg`, and
//! `recvmmsg` that reads the `UDP_GRO` segment size of coalesced buffers.
//!
//! Every function takes a raw descriptor of a non-blocking socket and
//! returns the kernel's error untouched; deciding what an error means
//! (socket full, feature missing, a loss) is the caller's business.

use std::io;
use std::mem;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::RawFd;

/// Bytes of one receive slot: the largest datagram, or the largest buffer
/// GRO coalesces (64 KiB on IPv4), whichever is larger.
pub(crate) const RX_SLOT_BYTES: usize = 1 << 16;
/// Most slots one `recvmmsg` fills.
pub(crate) const RX_SLOTS_MAX: usize = 32;
/// Most datagrams one `sendmmsg` sends (the batch bound).
const MMSG_MAX: usize = crate::batch::GSO_MAX_SEGMENTS;

/// Room for one control message carrying a `c_int` (a `u16` fits too),
/// aligned for `cmsghdr`.
#[repr(C, align(8))]
#[derive(Clone, Copy)]
struct CmsgBuf([u8; 32]);

/// True when the environment variable `name` is set to anything but "" or "0".
pub(crate) fn env_flag(name: &str) -> bool {
    std::env::var_os(name).is_some_and(|v| !v.is_empty() && v != "0")
}

fn int_opt_len() -> libc::socklen_t {
    mem::size_of::<libc::c_int>() as libc::socklen_t
}

/// Whether the kernel knows `UDP_SEGMENT` on this socket (Linux 4.18+).
/// A send can still fail later (a device without checksum offload says
/// EIO); the caller then falls back.
pub(crate) fn gso_supported(fd: RawFd) -> bool {
    let mut value: libc::c_int = 0;
    let mut len = int_opt_len();
    // SAFETY: getsockopt writes at most `len` bytes into `value`.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_UDP,
            libc::UDP_SEGMENT,
            (&raw mut value).cast(),
            &raw mut len,
        )
    };
    rc == 0
}

/// Asks the kernel to hand this socket coalesced buffers (`UDP_GRO`, Linux
/// 5.0+); false when it cannot.
pub(crate) fn enable_gro(fd: RawFd) -> bool {
    let on: libc::c_int = 1;
    // SAFETY: setsockopt reads one c_int from a valid pointer.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_UDP,
            libc::UDP_GRO,
            (&raw const on).cast(),
            int_opt_len(),
        )
    };
    rc == 0
}

/// True for the errors by which a kernel or a device refuses GSO.
pub(crate) fn is_gso_refusal(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EIO | libc::EINVAL | libc::ENOPROTOOPT | libc::EOPNOTSUPP)
    )
}

fn check(rc: isize) -> io::Result<usize> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc as usize)
    }
}

/// Sends one datagram.
pub(crate) fn send_one(fd: RawFd, to: &socket2::SockAddr, bytes: &[u8]) -> io::Result<()> {
    // SAFETY: the buffer and the address are valid for the stated lengths.
    let rc = unsafe {
        libc::sendto(
            fd,
            bytes.as_ptr().cast(),
            bytes.len(),
            libc::MSG_DONTWAIT,
            to.as_ptr().cast(),
            to.len(),
        )
    };
    check(rc).map(drop)
}

/// Sends `bytes` as datagrams of `segment` bytes (the last may be shorter)
/// in one `sendmsg` with `UDP_SEGMENT`: the kernel (or the device) cuts it.
/// All or nothing.
pub(crate) fn send_gso(
    fd: RawFd,
    to: &socket2::SockAddr,
    bytes: &[u8],
    segment: usize,
) -> io::Result<()> {
    let segment = u16::try_from(segment).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let mut iov = libc::iovec {
        iov_base: bytes.as_ptr().cast_mut().cast(),
        iov_len: bytes.len(),
    };
    let mut cmsg = CmsgBuf([0; 32]);
    // SAFETY: an all-zero msghdr is a valid empty one.
    let mut msg: libc::msghdr = unsafe { mem::zeroed() };
    msg.msg_name = to.as_ptr().cast_mut().cast();
    msg.msg_namelen = to.len();
    msg.msg_iov = &raw mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cmsg.0.as_mut_ptr().cast();
    // SAFETY: CMSG_SPACE is a pure computation.
    let space = unsafe { libc::CMSG_SPACE(mem::size_of::<u16>() as u32) } as usize;
    assert!(space <= cmsg.0.len());
    msg.msg_controllen = space as _;
    // SAFETY: msg_control points to `space` aligned bytes, enough for one
    // header and a u16; the kernel reads `bytes` and the address only.
    let rc = unsafe {
        let hdr = libc::CMSG_FIRSTHDR(&raw const msg);
        (*hdr).cmsg_level = libc::SOL_UDP;
        (*hdr).cmsg_type = libc::UDP_SEGMENT;
        (*hdr).cmsg_len = libc::CMSG_LEN(mem::size_of::<u16>() as u32) as _;
        libc::CMSG_DATA(hdr).cast::<u16>().write_unaligned(segment);
        libc::sendmsg(fd, &raw const msg, libc::MSG_DONTWAIT)
    };
    check(rc).map(drop)
}

/// Sends `bytes` as separate datagrams of `segment` bytes (the last may be
/// shorter) with one `sendmmsg`; returns how many went (at least one).
pub(crate) fn send_mmsg(
    fd: RawFd,
    to: &socket2::SockAddr,
    bytes: &[u8],
    segment: usize,
) -> io::Result<usize> {
    assert!(segment > 0);
    let count = bytes.len().div_ceil(segment);
    assert!((1..=MMSG_MAX).contains(&count));
    // SAFETY: all-zero iovecs and mmsghdrs are valid empty ones.
    let mut iovs: [libc::iovec; MMSG_MAX] = unsafe { mem::zeroed() };
    let mut msgs: [libc::mmsghdr; MMSG_MAX] = unsafe { mem::zeroed() };
    for (i, chunk) in bytes.chunks(segment).enumerate() {
        iovs[i] = libc::iovec {
            iov_base: chunk.as_ptr().cast_mut().cast(),
            iov_len: chunk.len(),
        };
        let hdr = &mut msgs[i].msg_hdr;
        hdr.msg_name = to.as_ptr().cast_mut().cast();
        hdr.msg_namelen = to.len();
        hdr.msg_iov = &raw mut iovs[i];
        hdr.msg_iovlen = 1;
    }
    // SAFETY: the first `count` headers point to live iovecs over `bytes`
    // and to the address; the kernel writes only `msg_len`.
    let rc = unsafe {
        libc::sendmmsg(
            fd,
            msgs.as_mut_ptr(),
            count as libc::c_uint,
            libc::MSG_DONTWAIT,
        )
    };
    check(rc as isize)
}

/// What one receive slot holds after [`recv_mmsg`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct RxMeta {
    /// Bytes in the slot.
    pub(crate) len: usize,
    /// GRO segment size; 0 when the buffer is one datagram.
    pub(crate) stride: usize,
    /// The sender of the datagram(s); `None` for an address family we do not speak.
    pub(crate) from: Option<SocketAddr>,
    /// The buffer did not fit the slot (its tail was cut off).
    pub(crate) truncated: bool,
}

/// Receive slots: `slots` buffers of [`RX_SLOT_BYTES`] and what each holds.
pub(crate) struct RxRing {
    buf: Box<[u8]>,
    meta: Vec<RxMeta>,
}

impl RxRing {
    /// A ring of `slots` (1..=32) slots.
    pub(crate) fn new(slots: usize) -> Self {
        assert!((1..=RX_SLOTS_MAX).contains(&slots));
        Self {
            // Zeroed pages are mapped lazily: unused slot tails cost no memory.
            buf: vec![0u8; slots * RX_SLOT_BYTES].into_boxed_slice(),
            meta: vec![
                RxMeta {
                    len: 0,
                    stride: 0,
                    from: None,
                    truncated: false,
                };
                slots
            ],
        }
    }

    /// Slot `i`'s bytes (writable: a sealed datagram is opened where it
    /// lies) and metadata.
    pub(crate) fn get_mut(&mut self, i: usize) -> (&mut [u8], RxMeta) {
        let m = self.meta[i];
        let start = i * RX_SLOT_BYTES;
        (&mut self.buf[start..start + m.len], m)
    }
}

/// Reads the IPv4 or IPv6 address the kernel wrote.
fn socket_addr(storage: &libc::sockaddr_storage, len: libc::socklen_t) -> Option<SocketAddr> {
    match i32::from(storage.ss_family) {
        libc::AF_INET if len as usize >= mem::size_of::<libc::sockaddr_in>() => {
            // SAFETY: the family says it is a sockaddr_in, and it is long enough.
            let a = unsafe { &*(&raw const *storage).cast::<libc::sockaddr_in>() };
            Some(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr)),
                u16::from_be(a.sin_port),
            )))
        }
        libc::AF_INET6 if len as usize >= mem::size_of::<libc::sockaddr_in6>() => {
            // SAFETY: as above, for sockaddr_in6.
            let a = unsafe { &*(&raw const *storage).cast::<libc::sockaddr_in6>() };
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(a.sin6_addr.s6_addr),
                u16::from_be(a.sin6_port),
                a.sin6_flowinfo,
                a.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

/// Finds the `UDP_GRO` segment size among a received message's control messages.
///
/// # Safety
/// `msg` must be a header the kernel just filled, its control buffer alive.
unsafe fn gro_stride(msg: &libc::msghdr) -> usize {
    // SAFETY: the caller guarantees the control buffer is valid; the CMSG
    // macros stay inside `msg_controllen`.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_UDP && (*c).cmsg_type == libc::UDP_GRO {
                let v = libc::CMSG_DATA(c).cast::<libc::c_int>().read_unaligned();
                return usize::try_from(v).unwrap_or(0);
            }
            c = libc::CMSG_NXTHDR(msg, c);
        }
    }
    0
}

/// Fills up to all of `ring`'s slots with one `recvmmsg` (or one `recvmsg`
/// when `mmsg` is false); returns how many it filled (at least one).
pub(crate) fn recv_mmsg(fd: RawFd, ring: &mut RxRing, mmsg: bool) -> io::Result<usize> {
    let slots = if mmsg { ring.meta.len() } else { 1 };
    // SAFETY: all-zero headers, vectors and addresses are valid empty ones.
    let mut msgs: [libc::mmsghdr; RX_SLOTS_MAX] = unsafe { mem::zeroed() };
    let mut iovs: [libc::iovec; RX_SLOTS_MAX] = unsafe { mem::zeroed() };
    let mut addrs: [libc::sockaddr_storage; RX_SLOTS_MAX] = unsafe { mem::zeroed() };
    let mut cmsgs = [CmsgBuf([0; 32]); RX_SLOTS_MAX];
    let base = ring.buf.as_mut_ptr();
    for i in 0..slots {
        iovs[i] = libc::iovec {
            // SAFETY: slot i lies inside the ring's buffer.
            iov_base: unsafe { base.add(i * RX_SLOT_BYTES) }.cast(),
            iov_len: RX_SLOT_BYTES,
        };
        let hdr = &mut msgs[i].msg_hdr;
        hdr.msg_name = (&raw mut addrs[i]).cast();
        hdr.msg_namelen = mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        hdr.msg_iov = &raw mut iovs[i];
        hdr.msg_iovlen = 1;
        hdr.msg_control = cmsgs[i].0.as_mut_ptr().cast();
        hdr.msg_controllen = cmsgs[i].0.len() as _;
    }
    let filled = if mmsg {
        // SAFETY: the first `slots` headers point to live buffers, addresses
        // and control buffers of the stated sizes.
        let rc = unsafe {
            libc::recvmmsg(
                fd,
                msgs.as_mut_ptr(),
                slots as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        check(rc as isize)?
    } else {
        // SAFETY: as above, for the first header alone.
        let rc = unsafe { libc::recvmsg(fd, &raw mut msgs[0].msg_hdr, libc::MSG_DONTWAIT) };
        msgs[0].msg_len = check(rc)? as libc::c_uint;
        1
    };
    for i in 0..filled {
        let hdr = &msgs[i].msg_hdr;
        let from = socket_addr(&addrs[i], hdr.msg_namelen);
        ring.meta[i] = RxMeta {
            len: (msgs[i].msg_len as usize).min(RX_SLOT_BYTES),
            // SAFETY: the kernel just filled this header; its control buffer lives.
            stride: unsafe { gro_stride(hdr) },
            from,
            truncated: hdr.msg_flags & libc::MSG_TRUNC != 0,
        };
    }
    Ok(filled)
}
