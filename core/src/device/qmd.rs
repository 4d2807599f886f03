//! The QMD of a launch: built from the layout's base image with a few dozen typed stores
//! ([`QmdLayout`]) for every launch.
//!
//! An earlier design kept a built QMD per kernel and patched grid, block, bank 0 and the
//! release into a copy; with typed layouts a build costs ~0.2 µs of CPU against ~0.05 µs for
//! the patch, and on the H200 launches with and without the cache took the same time
//! (docs/performance.md, "QMD templates"), so the cache went. What the latency machinery
//! still patches in place is only the release payload of a QMD it repeats ([`QmdPatch`]).

use crate::channel::qmd::{LaunchDesc, Qmd, QmdError, QmdLayout, ReleaseMembar, with_layout};
use crate::chip::QmdVersion;

/// The in-place patch of a built QMD, for one layout.
#[derive(Debug, Clone, Copy)]
pub(super) struct QmdPatch {
    version: QmdVersion,
}

impl QmdPatch {
    /// The patch for layout `v` (V03_00, V04_00 or V05_00).
    pub(super) fn new(v: QmdVersion) -> Result<Self, QmdError> {
        with_layout!(v, L => Ok(QmdPatch { version: L::VERSION }))
    }

    /// Sets only the release payload of `q` (QMDs that differ in nothing else).
    pub(super) fn set_payload(&self, q: &mut Qmd, payload: u64) -> Result<(), QmdError> {
        with_layout!(self.version, L => L::set_release_payload(q, 0, payload))
    }
}

/// [`Qmd::build`] with the release semaphore's `MEMBAR_TYPE` `NONE` instead of
/// `FE_SYSMEMBAR`, as tinygrad leaves it: every CTA already ends with a system-scope membar
/// (`CWD_MEMBAR_TYPE` = `L1_SYSMEMBAR`), so the grid's stores are visible before the release is
/// written, and the front-end membar cost a launch + sync 0.7 µs on the H200
/// (docs/performance.md, "The release without `FE_SYSMEMBAR`").
pub(super) fn build(v: QmdVersion, d: &LaunchDesc) -> Result<Qmd, QmdError> {
    with_layout!(v, L => {
        let mut q = L::build(d)?;
        if d.release[0].is_some() {
            L::set_release_membar(&mut q, 0, ReleaseMembar::FeNone)?;
        }
        Ok(q)
    })
}

/// Which kernel setup a launch is (module slot and its generation, kernel, dynamic shared
/// memory): what a repeated launch is compared by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct LaunchKey {
    pub slot: usize,
    pub generation: u32,
    pub kernel: usize,
    pub dynamic_shared: u32,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::channel::qmd::SmSharedConfig;

    fn desc(grid: [u32; 3], block: [u32; 3], cb0: u64, payload: u64) -> LaunchDesc {
        let mut d = LaunchDesc {
            program_address: 0x10_0000_1000,
            register_count: 24,
            shared_memory_size: 1024,
            block,
            grid,
            shader_local_memory_high_size: 0x240,
            barrier_count: 1,
            sass_version: 0x90,
            sm_config: SmSharedConfig {
                min: 3,
                max: 0x1a,
                target: 3,
            },
            ..LaunchDesc::default()
        };
        d.cbufs[0] = Some((cb0, 0x300));
        d.cbufs[4] = Some((0x10_0000_8000, 0x10));
        d.release[0] = Some((0x10_0000_0000, payload));
        d
    }

    #[test]
    fn the_release_has_no_front_end_membar_and_the_rest_is_a_plain_build() {
        for v in [QmdVersion::V03_00, QmdVersion::V04_00, QmdVersion::V05_00] {
            let d = desc([3, 1, 1], [64, 1, 1], 0x10_0000_2000, 9);
            let plain = Qmd::build(v, &d).unwrap();
            let q = build(v, &d).unwrap();
            let field = match v {
                QmdVersion::V03_00 => "RELEASE0_MEMBAR_TYPE",
                _ => "RELEASE_MEMBAR_TYPE(0)",
            };
            assert_eq!(
                plain.get(field).unwrap(),
                1,
                "{v:?}: FE_SYSMEMBAR by default"
            );
            assert_eq!(q.get(field).unwrap(), 0, "{v:?}");
            // The CTA-end membar that makes the grid's stores visible stays system-scope.
            assert_eq!(q.get("CWD_MEMBAR_TYPE").unwrap(), 1, "{v:?}");
            let mut back = q.clone();
            back.set(field, 1).unwrap();
            assert_eq!(back, plain, "{v:?}: nothing else differs");
        }
    }

    #[test]
    fn setting_only_the_payload_equals_a_fresh_build_with_that_payload() {
        for v in [QmdVersion::V03_00, QmdVersion::V04_00, QmdVersion::V05_00] {
            let p = QmdPatch::new(v).unwrap();
            let mut q = build(v, &desc([9, 2, 1], [64, 2, 1], 0x10_0000_4000, 7)).unwrap();
            for payload in [8, 0x1_0000_0000, u64::MAX] {
                p.set_payload(&mut q, payload).unwrap();
                let want = build(v, &desc([9, 2, 1], [64, 2, 1], 0x10_0000_4000, payload));
                assert_eq!(q, want.unwrap(), "{v:?} {payload:#x}");
            }
        }
    }
}
