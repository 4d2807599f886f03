//! A freestanding program (no std, no libc, no heap, panic=abort) that links nvbare-core and
//! identifies chips from static fake register windows. Built and run by the test script:
//! if core ever pulls in `std`, `alloc` or libc, this stops linking.
//!
//! Exit code 0 means every chip was identified as expected; otherwise the code says which check
//! failed. x86_64 Linux only (the entry point and exit are raw syscalls).
#![no_std]
#![no_main]

use core::panic::PanicInfo;

use nvbare_core::Mmio;
use nvbare_core::chip::{self, ChipError, Chipset, MmuVersion, QmdVersion};

/// A register window holding just the two identification registers.
struct FakeBar0 {
    boot0: u32,
    boot42: u32,
}

impl Mmio for FakeBar0 {
    fn size(&self) -> usize {
        16 << 20
    }
    fn read32(&self, offset: usize) -> u32 {
        match offset {
            0x0 => self.boot0,
            0xa00 => self.boot42,
            _ => 0,
        }
    }
    fn write32(&self, _offset: usize, _value: u32) {}
}

static WINDOWS: [(FakeBar0, Chipset, MmuVersion, QmdVersion); 3] = [
    (
        FakeBar0 {
            boot0: 0x1920_00a1,
            boot42: 0x192a_1000,
        },
        Chipset::AD102,
        MmuVersion::V2,
        QmdVersion::V03_00,
    ),
    (
        FakeBar0 {
            boot0: 0x1800_00a1,
            boot42: 0x180a_1000,
        },
        Chipset::GH100,
        MmuVersion::V3,
        QmdVersion::V04_00,
    ),
    (
        FakeBar0 {
            boot0: 0x1b20_00a1,
            boot42: 0x1b2a_1000,
        },
        Chipset::GB202,
        MmuVersion::V3,
        QmdVersion::V05_00,
    ),
];

fn run() -> i32 {
    for (i, (bar, chipset, mmu, qmd)) in WINDOWS.iter().enumerate() {
        let Ok(chip) = chip::identify_mmio(bar) else {
            return 10 + i as i32;
        };
        if chip.chipset() != *chipset || chip.info.mmu != *mmu || chip.info.qmd != *qmd {
            return 20 + i as i32;
        }
    }
    let dead = FakeBar0 {
        boot0: u32::MAX,
        boot42: u32::MAX,
    };
    if !matches!(
        chip::identify_mmio(&dead),
        Err(ChipError::NoResponse { .. })
    ) {
        return 30;
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
