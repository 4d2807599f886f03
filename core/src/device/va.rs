//! The GPU virtual-address window a backend hands device addresses out of.
//!
//! Every backend allocates the GPU VAs of its memory from one window ([`VaWindow`],
//! [`DeviceOptions::va_window`](super::DeviceOptions::va_window)). Devices opened with the
//! same window hand out the same addresses: that is fine for one device, but a program that
//! keeps device pointers of several devices in one table (a CUDA driver, whose address space
//! is unified) gives each device its own part of the window, [`VaWindow::slice`].

use core::fmt;

use crate::channel::gpfifo::GP_ADDRESS_LIMIT;

/// What a window's base and size are multiples of: 2 MiB, the big page size (and the
/// alignment the nvidia kernel driver's UVM ranges want).
pub const VA_WINDOW_ALIGN: u64 = 2 << 20;

/// Smallest part [`VaWindow::slice`] hands out: a device takes its command memory, staging
/// memory and the local memory for its stack (0.44 GiB on the H200 at the default stack size)
/// from its window before the program allocates anything.
pub const VA_SLICE_MIN: u64 = 4 << 30;

/// A range of GPU virtual addresses `[base, base + size)`: non-empty, both ends multiples of
/// [`VA_WINDOW_ALIGN`], ending at or below 2^40 (GP entries and semaphore addresses are
/// 40-bit). A backend may allow less (the kernel-driver adapter: the range it reserves for
/// UVM).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct VaWindow {
    base: u64,
    size: u64,
}

/// Why a [`VaWindow`] is not one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VaWindowError {
    /// Size 0.
    Empty,
    /// Base or size not a multiple of [`VA_WINDOW_ALIGN`].
    Unaligned {
        /// The base asked for.
        base: u64,
        /// The size asked for.
        size: u64,
    },
    /// The window ends above what the device layer or backend can use.
    OutOfRange {
        /// The base asked for.
        base: u64,
        /// The size asked for.
        size: u64,
        /// The range allowed.
        allowed: VaWindow,
    },
    /// Slice `index` of `count`, which does not exist.
    NoSuchSlice {
        /// The slice asked for.
        index: u64,
        /// Slices.
        count: u64,
    },
    /// `count` slices of `window` would each be smaller than [`VA_SLICE_MIN`].
    SlicesTooSmall {
        /// The window split.
        window: VaWindow,
        /// Slices.
        count: u64,
    },
}

impl fmt::Display for VaWindowError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VaWindowError::Empty => f.write_str("the GPU VA window is empty: give it a size"),
            VaWindowError::Unaligned { base, size } => write!(
                f,
                "the GPU VA window {base:#x}+{size:#x} is not 2 MiB-aligned: round its base and \
                 size to multiples of {VA_WINDOW_ALIGN:#x}"
            ),
            VaWindowError::OutOfRange {
                base,
                size,
                allowed,
            } => write!(
                f,
                "the GPU VA window {base:#x}+{size:#x} is not inside {allowed}, the addresses \
                 this device can use: choose a window inside it"
            ),
            VaWindowError::NoSuchSlice { index, count } => write!(
                f,
                "slice {index} of a GPU VA window split {count} ways does not exist: index from \
                 0 to {}",
                count.saturating_sub(1)
            ),
            VaWindowError::SlicesTooSmall { window, count } => write!(
                f,
                "{window} split {count} ways leaves each device less than {} GiB of GPU VA: \
                 open fewer devices in this process",
                VA_SLICE_MIN >> 30
            ),
        }
    }
}

impl core::error::Error for VaWindowError {}

impl VaWindow {
    /// What every backend uses unless told otherwise: 64 GiB (tinygrad's low range, clear of
    /// the low addresses RM and the CPU use) up to 2^40, 960 GiB.
    pub const DEFAULT: VaWindow = VaWindow {
        base: 0x10_0000_0000,
        size: 0xf0_0000_0000,
    };

    /// The most any window may cover: everything below 2^40.
    pub const LIMIT: VaWindow = VaWindow {
        base: 0,
        size: GP_ADDRESS_LIMIT,
    };

    /// `[base, base + size)`, if it is a window (see [`VaWindow`]).
    pub const fn new(base: u64, size: u64) -> Result<VaWindow, VaWindowError> {
        if size == 0 {
            return Err(VaWindowError::Empty);
        }
        if !base.is_multiple_of(VA_WINDOW_ALIGN) || !size.is_multiple_of(VA_WINDOW_ALIGN) {
            return Err(VaWindowError::Unaligned { base, size });
        }
        match base.checked_add(size) {
            Some(end) if end <= GP_ADDRESS_LIMIT => Ok(VaWindow { base, size }),
            _ => Err(VaWindowError::OutOfRange {
                base,
                size,
                allowed: Self::LIMIT,
            }),
        }
    }

    /// The first address.
    pub const fn base(&self) -> u64 {
        self.base
    }

    /// Bytes.
    pub const fn size(&self) -> u64 {
        self.size
    }

    /// One past the last address.
    pub const fn end(&self) -> u64 {
        // No overflow: checked when made.
        self.base + self.size
    }

    /// Whether every address of `other` is in this window.
    pub const fn contains(&self, other: &VaWindow) -> bool {
        other.base >= self.base && other.end() <= self.end()
    }

    /// Whether the two share an address.
    pub const fn overlaps(&self, other: &VaWindow) -> bool {
        self.base < other.end() && other.base < self.end()
    }

    /// This window, if it lies inside `allowed` (what a backend can use).
    pub const fn inside(self, allowed: VaWindow) -> Result<VaWindow, VaWindowError> {
        if allowed.contains(&self) {
            Ok(self)
        } else {
            Err(VaWindowError::OutOfRange {
                base: self.base,
                size: self.size,
                allowed,
            })
        }
    }

    /// Part `index` of this window split `count` ways: equal parts, each a multiple of
    /// [`VA_WINDOW_ALIGN`] and at least [`VA_SLICE_MIN`], in order from the base, pairwise
    /// disjoint (the rounding leaves any remainder at the end unused).
    pub const fn slice(self, index: u64, count: u64) -> Result<VaWindow, VaWindowError> {
        if index >= count {
            return Err(VaWindowError::NoSuchSlice { index, count });
        }
        let part = (self.size / count) & !(VA_WINDOW_ALIGN - 1);
        if part < VA_SLICE_MIN {
            return Err(VaWindowError::SlicesTooSmall {
                window: self,
                count,
            });
        }
        // index < count and part * count <= size: no overflow, inside this window.
        Ok(VaWindow {
            base: self.base + index * part,
            size: part,
        })
    }
}

impl Default for VaWindow {
    fn default() -> Self {
        VaWindow::DEFAULT
    }
}

impl fmt::Display for VaWindow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "GPU VA {:#x}..{:#x}", self.base, self.end())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: u64 = 1 << 30;

    #[test]
    fn new_checks_size_alignment_and_range() {
        assert_eq!(VaWindow::new(0x10_0000_0000, 0), Err(VaWindowError::Empty));
        assert!(matches!(
            VaWindow::new(0x10_0000_1000, G),
            Err(VaWindowError::Unaligned { .. })
        ));
        assert!(matches!(
            VaWindow::new(0x10_0000_0000, G + 4096),
            Err(VaWindowError::Unaligned { .. })
        ));
        // Ends exactly at 2^40: allowed; one big page more: not.
        let w = VaWindow::new((1 << 40) - G, G).unwrap();
        assert_eq!(w.end(), 1 << 40);
        assert!(matches!(
            VaWindow::new((1 << 40) - G, G + VA_WINDOW_ALIGN),
            Err(VaWindowError::OutOfRange { .. })
        ));
        // Overflow of base + size is out of range, not a wrap.
        assert!(matches!(
            VaWindow::new(u64::MAX - (VA_WINDOW_ALIGN - 1), VA_WINDOW_ALIGN),
            Err(VaWindowError::OutOfRange { .. })
        ));
        let d = VaWindow::DEFAULT;
        assert_eq!(VaWindow::new(d.base(), d.size()), Ok(d));
        assert!(VaWindow::LIMIT.contains(&d));
    }

    #[test]
    fn inside_and_overlaps() {
        let d = VaWindow::DEFAULT;
        let low = VaWindow::new(0, d.base()).unwrap();
        assert!(!low.overlaps(&d) && !d.overlaps(&low));
        assert!(matches!(
            low.inside(d),
            Err(VaWindowError::OutOfRange { allowed, .. }) if allowed == d
        ));
        let straddle = VaWindow::new(d.base() - VA_WINDOW_ALIGN, 2 * VA_WINDOW_ALIGN).unwrap();
        assert!(straddle.overlaps(&d) && straddle.inside(d).is_err());
        let part = VaWindow::new(d.base() + G, G).unwrap();
        assert_eq!(part.inside(d), Ok(part));
    }

    #[test]
    fn slices_are_disjoint_aligned_equal_and_inside() {
        for window in [
            VaWindow::DEFAULT,
            VaWindow::new(0x20_0000_0000, 13 * G + 6 * VA_WINDOW_ALIGN).unwrap(),
        ] {
            let max = window.size() / VA_SLICE_MIN;
            for count in [1, 2, 3, 7, max].into_iter().filter(|&c| c <= max) {
                let parts: alloc::vec::Vec<VaWindow> = (0..count)
                    .map(|i| window.slice(i, count).unwrap())
                    .collect();
                for (i, p) in parts.iter().enumerate() {
                    assert!(window.contains(p), "{p} outside {window}");
                    assert_eq!(p.base() % VA_WINDOW_ALIGN, 0);
                    assert_eq!(p.size(), parts[0].size());
                    assert!(p.size() >= VA_SLICE_MIN);
                    // Nothing of the window is lost but the rounding remainder.
                    assert!(window.size() - p.size() * count < count * VA_WINDOW_ALIGN);
                    for q in &parts[i + 1..] {
                        assert!(!p.overlaps(q), "{p} overlaps {q}");
                    }
                }
            }
            assert!(matches!(
                window.slice(0, max + 1),
                Err(VaWindowError::SlicesTooSmall { .. })
            ));
        }
        assert_eq!(VaWindow::DEFAULT.slice(0, 1), Ok(VaWindow::DEFAULT));
        assert!(matches!(
            VaWindow::DEFAULT.slice(2, 2),
            Err(VaWindowError::NoSuchSlice { index: 2, count: 2 })
        ));
        assert!(matches!(
            VaWindow::DEFAULT.slice(0, 0),
            Err(VaWindowError::NoSuchSlice { .. })
        ));
    }
}
