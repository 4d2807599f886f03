//! Typed GPU registers, named as in NVIDIA's `dev_*.h` headers.
//!
//! Each register is a `bitfield-struct` newtype over `u32`, declared with [`register!`](crate::register!) and one
//! of three placements:
//!
//! * fixed: `NV_PMC_BOOT_0 @ 0x0000_0000`, read with [`Register::read`];
//! * relative to an engine or block base: `NV_PFALCON_FALCON_MAILBOX0 @ PFalconBase + 0x40`,
//!   read with [`RelativeRegister::read_of`] and a marker type naming the instance (GSP, SEC2...);
//! * arrays: `NV_PGC6_AON_SECURE_SCRATCH_GROUP_05 @ 0x0011_8234 [4; 4]` (count, stride), read
//!   with [`RegisterArray::try_read`], which checks the index.
//!
//! Field layouts follow the header's `hi:lo` ranges, written as widths from bit 0 upwards with
//! `__` padding; each field's doc comment repeats the header range so the definitions can be
//! checked against the open driver by eye. Adding a register is one declaration in the module of
//! its hardware block; semantic helpers (e.g. [`pfb::NV_PFB_PRI_MMU_WPR2_ADDR_HI::address`]) go on
//! the register type.

use crate::hal::{HalError, Mmio};

pub mod falcon;
pub mod fsp;
pub mod fuse;
pub mod gsp;
#[cfg(test)]
mod headers;
pub mod mmu;
pub mod pbus;
pub mod pfb;
pub mod pgc6;
pub mod pmc;
pub mod usermode;

/// A register at a fixed BAR0 offset.
pub trait Register: Copy + From<u32> + Into<u32> {
    /// Byte offset in BAR0.
    const OFFSET: u32;
    /// NVIDIA's name, for logs and error reports.
    const NAME: &'static str;

    /// Reads the register.
    fn read<M: Mmio + ?Sized>(bar: &M) -> Self {
        Self::from(bar.read32(Self::OFFSET as usize))
    }

    /// Writes the register.
    fn write<M: Mmio + ?Sized>(self, bar: &M) {
        bar.write32(Self::OFFSET as usize, self.into())
    }

    /// Read-modify-write.
    fn update<M: Mmio + ?Sized>(bar: &M, f: impl FnOnce(Self) -> Self) {
        f(Self::read(bar)).write(bar)
    }
}

/// A family of register blocks that exist once per engine instance (e.g. every falcon).
pub trait RegisterFamily {
    /// Family name, for logs.
    const NAME: &'static str;
}

/// An engine instance: gives the base of its block in family `F`.
pub trait RegisterBase<F: RegisterFamily> {
    /// Byte offset of the block in BAR0 (or in the window the block is read through).
    const BASE: u32;
}

/// A register at an offset inside a block of family [`RelativeRegister::Family`].
pub trait RelativeRegister: Copy + From<u32> + Into<u32> {
    /// The family of blocks this register belongs to.
    type Family: RegisterFamily;
    /// Byte offset inside the block.
    const OFFSET: u32;
    /// NVIDIA's name (with the family prefix), for logs.
    const NAME: &'static str;

    /// Absolute offset of this register in instance `E`.
    fn offset_of<E: RegisterBase<Self::Family>>() -> usize {
        (E::BASE + Self::OFFSET) as usize
    }

    /// Reads the register of instance `E`.
    fn read_of<E: RegisterBase<Self::Family>, M: Mmio + ?Sized>(bar: &M) -> Self {
        Self::from(bar.read32(Self::offset_of::<E>()))
    }

    /// Writes the register of instance `E`.
    fn write_of<E: RegisterBase<Self::Family>, M: Mmio + ?Sized>(self, bar: &M) {
        bar.write32(Self::offset_of::<E>(), self.into())
    }

    /// Read-modify-write of the register of instance `E`.
    fn update_of<E: RegisterBase<Self::Family>, M: Mmio + ?Sized>(
        bar: &M,
        f: impl FnOnce(Self) -> Self,
    ) {
        f(Self::read_of::<E, M>(bar)).write_of::<E, M>(bar)
    }

    /// Reads the register in a block whose base is only known at run time.
    fn read_at<M: Mmio + ?Sized>(bar: &M, base: u32) -> Self {
        Self::from(bar.read32(base.wrapping_add(Self::OFFSET) as usize))
    }

    /// Writes the register in a block whose base is only known at run time.
    fn write_at<M: Mmio + ?Sized>(self, bar: &M, base: u32) {
        bar.write32(base.wrapping_add(Self::OFFSET) as usize, self.into())
    }
}

/// A register repeated `COUNT` times at `STRIDE` bytes (NVIDIA's `NAME(i)` macros).
pub trait RegisterArray: Copy + From<u32> + Into<u32> {
    /// Offset of element 0 in BAR0.
    const BASE: u32;
    /// Bytes between elements.
    const STRIDE: u32;
    /// Number of elements.
    const COUNT: u32;
    /// NVIDIA's name, for logs.
    const NAME: &'static str;

    /// Offset of element `i`, or an error naming the register if `i` is out of range.
    fn offset(i: u32) -> Result<usize, HalError> {
        if i < Self::COUNT {
            Ok((Self::BASE + i * Self::STRIDE) as usize)
        } else {
            Err(HalError::OutOfRange {
                offset: i as u64,
                len: 1,
                limit: Self::COUNT as u64,
            })
        }
    }

    /// Reads element `i`.
    fn try_read<M: Mmio + ?Sized>(bar: &M, i: u32) -> Result<Self, HalError> {
        Ok(Self::from(bar.read32(Self::offset(i)?)))
    }

    /// Writes element `i`.
    fn try_write<M: Mmio + ?Sized>(self, bar: &M, i: u32) -> Result<(), HalError> {
        bar.write32(Self::offset(i)?, self.into());
        Ok(())
    }
}

/// Declares registers. See the [module documentation](self) for the three placements.
///
/// ```
/// use nvbare_core::register;
/// use nvbare_core::regs::Register;
///
/// register! {
///     /// A demo register.
///     pub NV_DEMO @ 0x0000_0100 {
///         /// 3:0
///         #[bits(4)] pub low: u8,
///         #[bits(28)] __: u32,
///     }
/// }
/// assert_eq!(NV_DEMO::OFFSET, 0x100);
/// assert_eq!(NV_DEMO::from(0x1234_5678).low(), 8);
/// ```
#[macro_export]
macro_rules! register {
    () => {};
    // Fixed offset.
    (
        $(#[$meta:meta])* $vis:vis $name:ident @ $offset:literal { $($fields:tt)* }
        $($rest:tt)*
    ) => {
        #[$crate::regs::__bitfield(u32)]
        #[allow(non_camel_case_types)]
        $(#[$meta])*
        $vis struct $name { $($fields)* }

        impl $crate::regs::Register for $name {
            const OFFSET: u32 = $offset;
            const NAME: &'static str = stringify!($name);
        }
        $crate::register!($($rest)*);
    };
    // Relative to the base of a register family.
    (
        $(#[$meta:meta])* $vis:vis $name:ident @ $family:ident + $offset:literal { $($fields:tt)* }
        $($rest:tt)*
    ) => {
        #[$crate::regs::__bitfield(u32)]
        #[allow(non_camel_case_types)]
        $(#[$meta])*
        $vis struct $name { $($fields)* }

        impl $crate::regs::RelativeRegister for $name {
            type Family = $family;
            const OFFSET: u32 = $offset;
            const NAME: &'static str = stringify!($name);
        }
        $crate::register!($($rest)*);
    };
    // Array: [count; stride].
    (
        $(#[$meta:meta])* $vis:vis $name:ident @ $base:literal [$count:literal; $stride:literal]
        { $($fields:tt)* }
        $($rest:tt)*
    ) => {
        #[$crate::regs::__bitfield(u32)]
        #[allow(non_camel_case_types)]
        $(#[$meta])*
        $vis struct $name { $($fields)* }

        impl $crate::regs::RegisterArray for $name {
            const BASE: u32 = $base;
            const STRIDE: u32 = $stride;
            const COUNT: u32 = $count;
            const NAME: &'static str = stringify!($name);
        }
        $crate::register!($($rest)*);
    };
}

#[doc(hidden)]
pub use bitfield_struct::bitfield as __bitfield;

#[cfg(test)]
mod tests {
    use super::*;
    use core::cell::RefCell;

    /// A 16 MiB-addressable register file backed by a small map, for layout tests.
    pub(crate) struct Regs(RefCell<heapless::Vec<(usize, u32), 64>>);
    impl Regs {
        pub(crate) fn new() -> Self {
            Regs(RefCell::new(heapless::Vec::new()))
        }
    }
    impl Mmio for Regs {
        fn size(&self) -> usize {
            16 << 20
        }
        fn read32(&self, offset: usize) -> u32 {
            self.0
                .borrow()
                .iter()
                .find(|(o, _)| *o == offset)
                .map_or(0, |(_, v)| *v)
        }
        fn write32(&self, offset: usize, value: u32) {
            let mut v = self.0.borrow_mut();
            if let Some(e) = v.iter_mut().find(|(o, _)| *o == offset) {
                e.1 = value;
            } else {
                v.push((offset, value)).expect("test register file full");
            }
        }
    }

    pub(crate) struct DemoFamily;
    impl RegisterFamily for DemoFamily {
        const NAME: &'static str = "DEMO";
    }
    struct Inst1;
    impl RegisterBase<DemoFamily> for Inst1 {
        const BASE: u32 = 0x1000;
    }

    register! {
        /// Fixed.
        NV_TEST_FIXED @ 0x0000_0010 {
            #[bits(8)] a: u8,
            #[bits(24)] b: u32,
        }
        /// Relative.
        NV_TEST_REL @ DemoFamily + 0x40 {
            #[bits(32)] value: u32,
        }
        /// Array.
        NV_TEST_ARR @ 0x0000_0200 [3; 8] {
            #[bits(32)] value: u32,
        }
    }

    #[test]
    fn fixed_register_roundtrip() {
        let r = Regs::new();
        NV_TEST_FIXED::new().with_a(0x12).with_b(0x345678).write(&r);
        assert_eq!(r.read32(0x10), 0x3456_7812);
        NV_TEST_FIXED::update(&r, |v| v.with_a(1));
        assert_eq!(NV_TEST_FIXED::read(&r).a(), 1);
        assert_eq!(NV_TEST_FIXED::NAME, "NV_TEST_FIXED");
    }

    #[test]
    fn relative_register_uses_instance_base() {
        let r = Regs::new();
        NV_TEST_REL::new().with_value(7).write_of::<Inst1, _>(&r);
        assert_eq!(r.read32(0x1040), 7);
        assert_eq!(NV_TEST_REL::read_at(&r, 0x1000).value(), 7);
    }

    #[test]
    fn array_register_checks_index() {
        let r = Regs::new();
        NV_TEST_ARR::new().with_value(9).try_write(&r, 2).unwrap();
        assert_eq!(r.read32(0x210), 9);
        assert!(NV_TEST_ARR::try_read(&r, 3).is_err());
    }
}
