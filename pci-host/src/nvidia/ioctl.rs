//! The two ioctl calls everything in the adapter goes through: nvidia escapes (`_IOWR('F', nr,
//! size)`, with the XFER escape for large arguments) and UVM commands (bare numbers).

use core::ffi::c_void;
use core::mem::size_of;

use rustix::fd::BorrowedFd;
use rustix::io::Errno;
use rustix::ioctl::{Ioctl, IoctlOutput, Opcode};
use zerocopy::{FromBytes, IntoBytes};

use super::abi::{
    NV_ABSOLUTE_MAX_IOCTL_SIZE, NV_ESC_IOCTL_XFER_CMD, NV_IOC_SIZE_MAX, nv_ioctl_xfer_t, nv_iowr,
};

/// An ioctl with a runtime opcode and an argument the kernel may read and write.
struct RawIoctl {
    opcode: Opcode,
    arg: *mut c_void,
}

// SAFETY: `RawIoctl` is only built by the functions below, whose callers guarantee that `arg`
// points to a live, writable buffer of the size the opcode (or the XFER header) announces.
// The ioctl may write to it, so it is declared mutating.
unsafe impl Ioctl for RawIoctl {
    type Output = IoctlOutput;
    const IS_MUTATING: bool = true;

    fn opcode(&self) -> Opcode {
        self.opcode
    }

    fn as_ptr(&mut self) -> *mut c_void {
        self.arg
    }

    // SAFETY: the argument pointer is not touched; the output is the integer the syscall
    // returned, so nothing the caller must uphold for `output_from_ptr` is relied on.
    unsafe fn output_from_ptr(
        out: IoctlOutput,
        _arg: *mut c_void,
    ) -> rustix::io::Result<Self::Output> {
        Ok(out)
    }
}

/// Issues nvidia escape `nr` with `arg` as its argument.
///
/// Arguments larger than `_IOC_SIZE` can describe go through `NV_ESC_IOCTL_XFER_CMD`, as
/// `nvidia_ioctl` expects.
///
/// # Safety
///
/// Every pointer embedded in `arg` (e.g. `pAllocParms`, `params`) must be valid for the
/// reads and writes this escape performs through it (the driver copies the class's or command's
/// param size in and out).
pub(crate) unsafe fn nv_escape<T: IntoBytes + FromBytes>(
    fd: BorrowedFd<'_>,
    nr: u8,
    arg: &mut T,
) -> Result<(), Errno> {
    let size = size_of::<T>();
    if size > NV_ABSOLUTE_MAX_IOCTL_SIZE {
        return Err(Errno::INVAL);
    }
    let arg_ptr = (arg as *mut T).cast::<c_void>();
    if size <= NV_IOC_SIZE_MAX {
        let call = RawIoctl {
            opcode: nv_iowr(nr, size) as Opcode,
            arg: arg_ptr,
        };
        // SAFETY: `arg_ptr` comes from `&mut T`, so it is valid for `size` bytes of reads and
        // writes for the duration of the call, and any byte pattern the driver writes back is a
        // valid `T` (`T: FromBytes`). Embedded pointers are the caller's obligation (above).
        unsafe { rustix::ioctl::ioctl(fd, call)? };
    } else {
        let mut xfer = nv_ioctl_xfer_t {
            cmd: nr as u32,
            size: size as u32,
            ptr: arg_ptr as u64,
        };
        let call = RawIoctl {
            opcode: nv_iowr(NV_ESC_IOCTL_XFER_CMD, size_of::<nv_ioctl_xfer_t>()) as Opcode,
            arg: (&mut xfer as *mut nv_ioctl_xfer_t).cast(),
        };
        // SAFETY: the XFER header is a live local of the announced size; it points at `arg`,
        // valid for `size` bytes as above, which the driver copies in and out.
        unsafe { rustix::ioctl::ioctl(fd, call)? };
    }
    Ok(())
}

/// Issues nvidia escape `nr` with an argument that embeds no pointers.
pub(crate) fn nv_escape_plain<T: IntoBytes + FromBytes + NoPointers>(
    fd: BorrowedFd<'_>,
    nr: u8,
    arg: &mut T,
) -> Result<(), Errno> {
    // SAFETY: `T: NoPointers`, so there are no embedded pointers for the driver to follow.
    unsafe { nv_escape(fd, nr, arg) }
}

/// Issues UVM command `cmd` (a bare number on Linux) with `arg`.
///
/// # Safety
///
/// `T` must be exactly the struct UVM's handler for `cmd` copies (UVM copies `sizeof` of its
/// own struct in and out, whatever we pass), and embedded pointers must be valid.
pub(crate) unsafe fn uvm_command<T: IntoBytes + FromBytes>(
    fd: BorrowedFd<'_>,
    cmd: u32,
    arg: &mut T,
) -> Result<(), Errno> {
    let call = RawIoctl {
        opcode: cmd as Opcode,
        arg: (arg as *mut T).cast(),
    };
    // SAFETY: `arg` is a live `&mut T` of the size UVM copies (caller's obligation), and any
    // bytes written back form a valid `T` (`T: FromBytes`).
    unsafe { rustix::ioctl::ioctl(fd, call)? };
    Ok(())
}

/// Marker for escape arguments without embedded pointers, which are safe to pass as they are
/// ([`nv_escape_plain`]).
///
/// # Safety
/// No field of the type may be a pointer that the driver reads or writes through for the
/// escapes it is passed to: every field must be a handle, a size, a flag word, a status, an
/// fd, a device or GPU address, or an address the driver only stores, returns or compares
/// (never dereferences). A wrong impl lets safe code make the kernel write through a garbage
/// user pointer.
pub(crate) unsafe trait NoPointers {}

// SAFETY: one fd number (`ctl_fd`); NV_ESC_REGISTER_FD looks the fd up, it follows no pointer.
unsafe impl NoPointers for super::abi::nv_ioctl_register_fd_t {}
// SAFETY: two u32s and an inline string buffer that the driver fills in place.
unsafe impl NoPointers for super::abi::nv_ioctl_rm_api_version_t {}
// SAFETY: an errno and an NV_STATUS, both written by the driver.
unsafe impl NoPointers for super::abi::nv_ioctl_wait_open_complete_t {}
// SAFETY: each entry holds PCI ids, bus addresses and sizes of the GPU's BARs (physical
// addresses, not pointers into this process), a minor number and an inline name.
unsafe impl<const N: usize> NoPointers for [super::abi::nv_ioctl_card_info_t; N] {}
// SAFETY: three RM handles and a status (RM_FREE).
unsafe impl NoPointers for super::abi::NVOS00_PARAMETERS {}
// SAFETY: handles, flags and a status; `pLinearAddress` is the cookie RM_MAP_MEMORY returned,
// which RM_UNMAP_MEMORY uses only to find the mapping (the caller munmaps it itself).
unsafe impl NoPointers for super::abi::NVOS34_PARAMETERS {}
// SAFETY: handles, an offset and length within the memory object, flags, a kind, and a GPU
// virtual address (`dmaOffset`): nothing in this process's address space.
unsafe impl NoPointers for super::abi::NVOS46_PARAMETERS {}
// SAFETY: handles, flags, and a GPU virtual address and size (`dmaOffset`, `size`).
unsafe impl NoPointers for super::abi::NVOS47_PARAMETERS {}
// SAFETY: handles, offset, length, flags, a status and an fd; `pLinearAddress` is an output
// (the cookie of the mmap context RM creates on `fd`), which the driver writes, never follows.
unsafe impl NoPointers for super::abi::nv_ioctl_nvos33_parameters_with_fd {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nvidia::abi::{NV_ESC_CARD_INFO, nv_ioctl_card_info_t};
    use std::fs::File;
    use std::os::fd::AsFd;

    #[test]
    fn escapes_on_a_regular_file_fail_with_enotty() {
        let f = File::open("/proc/self/status").expect("open a regular file");
        let mut cards = [nv_ioctl_card_info_t::default(); 4];
        let e = nv_escape_plain(f.as_fd(), NV_ESC_CARD_INFO, &mut cards).unwrap_err();
        assert_eq!(e, Errno::NOTTY);
    }

    #[test]
    fn oversized_arguments_are_refused_before_the_kernel() {
        let f = File::open("/proc/self/status").expect("open a regular file");
        let mut big = [0u8; NV_ABSOLUTE_MAX_IOCTL_SIZE + 1];
        // SAFETY: a byte array embeds no pointers.
        let e = unsafe { nv_escape(f.as_fd(), NV_ESC_CARD_INFO, &mut big) }.unwrap_err();
        assert_eq!(e, Errno::INVAL);
    }

    #[test]
    fn xfer_path_reaches_the_kernel() {
        // 16384 bytes does not fit the 14-bit _IOC_SIZE, so it goes through the XFER escape; a
        // regular file answers that with ENOTTY, which shows the call was made.
        let f = File::open("/proc/self/status").expect("open a regular file");
        let mut big = [0u8; NV_ABSOLUTE_MAX_IOCTL_SIZE];
        // SAFETY: a byte array embeds no pointers.
        let e = unsafe { nv_escape(f.as_fd(), NV_ESC_CARD_INFO, &mut big) }.unwrap_err();
        assert_eq!(e, Errno::NOTTY);
    }
}
