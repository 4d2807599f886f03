//! A freestanding program (no std, no libc, no heap, panic=abort) that links nvbare-core and
//! exercises it on static memory only. Built and run by the test script: if core ever pulls in
//! `std`, `alloc` or libc, this stops linking.
//!
//! What it runs:
//! * chip identification from static fake register windows (`chips`, exit codes 10-39);
//! * the GSP message queues over a static DMA buffer: shared-memory layout and page table,
//!   command records written by `MsgQueue::send` (checksum, sequence, doorbell), looped back
//!   as GSP-RM would and parsed by `MsgQueue::receive`, ring wrap-around, a corrupt record,
//!   a full ring (`msgq`, 40-69);
//! * GPU page tables: `Mapper` over GMMU v2 tables in a static `PageTableMemory` and v3
//!   tables in `DmaTables` over a static buffer, TLB invalidates through `MmuInvalidate`:
//!   map, translate back, reject bad requests, unmap (`mm`, 70-99).
//!
//! Exit code 0 means every check passed; otherwise the code says which failed (101: a panic).
//! x86_64 Linux only (the entry point and exit are raw syscalls).
#![no_std]
#![no_main]

mod chips;
mod hw;
mod mm;
mod msgq;

use core::panic::PanicInfo;

fn run() -> i32 {
    let checks: [fn() -> Result<(), i32>; 3] = [chips::check, msgq::check, mm::check];
    for check in checks {
        if let Err(code) = check() {
            return code;
        }
    }
    0
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
mod rt {
    // The kernel enters `_start` with a 16-byte aligned stack and no return address; align
    // explicitly and call into Rust.
    core::arch::global_asm!(
        ".globl _start",
        "_start:",
        "xor ebp, ebp",
        "and rsp, -16",
        "call {main}",
        "ud2",
        main = sym super::freestanding_main,
    );

    pub fn exit(code: i32) -> ! {
        // SAFETY: exit_group (231) takes one integer argument and never returns.
        unsafe {
            core::arch::asm!("syscall", in("rax") 231, in("rdi") code, options(noreturn, nostack))
        }
    }

    // Without libc the compiler's calls to these must be satisfied here. Byte loops through
    // volatile accesses so the optimizer cannot turn them back into calls to themselves.

    /// # Safety
    /// Standard `memcpy` contract.
    #[unsafe(no_mangle)]
    pub unsafe extern "C" fn memcpy(dst: *mut u8, src: *const u8, n: usize) -> *mut u8 {
        for i in 0..n {
            // SAFETY: the caller guarantees both ranges are valid for n bytes.
            unsafe { dst.add(i).write_volatile(src.add(i).read_volatile()) };
        }
        dst
    }

    /// # Safety
    /// Standard `memmove` contract.
    #[unsafe(no_mangle)]
    pub unsafe extern "C" fn memmove(dst: *mut u8, src: *const u8, n: usize) -> *mut u8 {
        if (dst as usize) < (src as usize) {
            for i in 0..n {
                // SAFETY: the caller guarantees both ranges are valid for n bytes.
                unsafe { dst.add(i).write_volatile(src.add(i).read_volatile()) };
            }
        } else {
            for i in (0..n).rev() {
                // SAFETY: as above.
                unsafe { dst.add(i).write_volatile(src.add(i).read_volatile()) };
            }
        }
        dst
    }

    /// # Safety
    /// Standard `memset` contract.
    #[unsafe(no_mangle)]
    pub unsafe extern "C" fn memset(dst: *mut u8, c: i32, n: usize) -> *mut u8 {
        for i in 0..n {
            // SAFETY: the caller guarantees the range is valid for n bytes.
            unsafe { dst.add(i).write_volatile(c as u8) };
        }
        dst
    }

    /// # Safety
    /// Standard `memcmp` contract.
    #[unsafe(no_mangle)]
    pub unsafe extern "C" fn memcmp(a: *const u8, b: *const u8, n: usize) -> i32 {
        for i in 0..n {
            // SAFETY: the caller guarantees both ranges are valid for n bytes.
            let (x, y) = unsafe { (a.add(i).read_volatile(), b.add(i).read_volatile()) };
            if x != y {
                return x as i32 - y as i32;
            }
        }
        0
    }

    /// The prebuilt `core` references the unwinding personality routine even with
    /// panic=abort; nothing ever unwinds here, so it is never called.
    #[unsafe(no_mangle)]
    pub extern "C" fn rust_eh_personality() {}

    /// # Safety
    /// Standard `bcmp` contract.
    #[unsafe(no_mangle)]
    pub unsafe extern "C" fn bcmp(a: *const u8, b: *const u8, n: usize) -> i32 {
        // SAFETY: same contract as memcmp.
        unsafe { memcmp(a, b, n) }
    }
}

extern "C" fn freestanding_main() -> ! {
    rt::exit(run())
}

#[panic_handler]
fn panic(_: &PanicInfo<'_>) -> ! {
    rt::exit(101)
}
