//! QMD templates: a launch copies a prebuilt QMD and patches the few fields that change.
//!
//! The fields that differ between launches of one kernel are only the grid, the block, the
//! address of constant bank 0 and the release payload. So the first launch of a kernel with
//! a given dynamic shared-memory size builds the QMD fully and keeps it, and later launches
//! patch those fields through the layout's typed setters ([`QmdLayout`]). A build is itself
//! only the layout's base image and a few dozen stores; `Tuning::qmd_templates` = false builds
//! every launch's QMD from scratch, to measure what the cache still earns.

use alloc::vec::Vec;

use crate::channel::qmd::{
    LaunchDesc, Qmd, QmdError, QmdLayout, ReleaseMembar, SmSharedConfig, with_layout,
};
use crate::chip::QmdVersion;

/// The per-launch patch of a template, for one layout.
#[derive(Debug, Clone, Copy)]
pub(super) struct QmdPatch {
    version: QmdVersion,
}

impl QmdPatch {
    /// The patch for layout `v` (V03_00, V04_00 or V05_00).
    pub(super) fn new(v: QmdVersion) -> Result<Self, QmdError> {
        with_layout!(v, L => Ok(QmdPatch { version: L::VERSION }))
    }

    /// Sets the per-launch fields of `q`.
    pub(super) fn apply(
        &self,
        q: &mut Qmd,
        grid: [u32; 3],
        block: [u32; 3],
        cb0: u64,
        payload: u64,
    ) -> Result<(), QmdError> {
        with_layout!(self.version, L => {
            L::set_grid(q, grid)?;
            L::set_block(q, block)?;
            L::set_constant_bank_address(q, 0, cb0)?;
            L::set_release_payload(q, 0, payload)
        })
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

/// What makes two launches share a template.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct TemplateKey {
    pub slot: usize,
    pub generation: u32,
    pub kernel: usize,
    pub dynamic_shared: u32,
}

/// Most templates kept (oldest evicted).
const CACHE: usize = 16;

/// Recently built QMDs, each with the shared-memory carveout it was built with (it depends
/// on the block size, which launches of one key may change; see
/// [`crate::channel::launch::sm_shared_config`]) and the release semaphore's address (each
/// stream's compute channel releases its own timeline).
#[derive(Debug)]
pub(super) struct Templates {
    entries: Vec<(TemplateKey, SmSharedConfig, u64, Qmd)>,
    /// Off: every QMD is built from scratch (`Tuning::qmd_templates`).
    enabled: bool,
}

impl Default for Templates {
    fn default() -> Self {
        Templates::new(true)
    }
}

impl Templates {
    /// No templates yet; `enabled` false keeps none.
    pub(super) fn new(enabled: bool) -> Self {
        Templates {
            entries: Vec::new(),
            enabled,
        }
    }

    /// The QMD for `d`: a cached template patched, or a fresh build ([`build`]) cached for
    /// next time; with templates off, always a fresh build.
    pub(super) fn qmd(
        &mut self,
        v: QmdVersion,
        patch: &QmdPatch,
        key: TemplateKey,
        d: &LaunchDesc,
    ) -> Result<Qmd, QmdError> {
        if !self.enabled {
            return build(v, d);
        }
        let (cb0, _) = d.cbufs[0].unwrap_or((0, 0));
        let (release, payload) = d.release[0].unwrap_or((0, 0));
        if let Some((_, _, _, t)) = self
            .entries
            .iter()
            .find(|(k, c, r, _)| *k == key && *c == d.sm_config && *r == release)
        {
            let mut q = t.clone();
            patch.apply(&mut q, d.grid, d.block, cb0, payload)?;
            return Ok(q);
        }
        let q = build(v, d)?;
        if self.entries.len() >= CACHE {
            self.entries.remove(0);
        }
        self.entries.push((key, d.sm_config, release, q.clone()));
        Ok(q)
    }

    /// Forgets the templates of a freed module slot.
    pub(super) fn forget_slot(&mut self, slot: usize) {
        self.entries.retain(|(k, _, _, _)| k.slot != slot);
    }
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

    /// The template key the tests launch under.
    const KEY: TemplateKey = TemplateKey {
        slot: 1,
        generation: 1,
        kernel: 0,
        dynamic_shared: 0,
    };

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
    fn a_patched_template_equals_a_fresh_build() {
        for v in [QmdVersion::V03_00, QmdVersion::V04_00, QmdVersion::V05_00] {
            let p = QmdPatch::new(v).unwrap();
            let mut t = Templates::default();
            let first = desc([1, 1, 1], [32, 1, 1], 0x10_0000_2000, 1);
            assert_eq!(
                t.qmd(v, &p, KEY, &first).unwrap(),
                build(v, &first).unwrap()
            );
            for (grid, block, cb0, payload) in [
                ([4096, 1, 1], [256, 1, 1], 0x10_0004_0000, 2),
                ([7, 300, 5], [8, 8, 16], 0xff_ffff_ff00, 0x1_0000_0003),
                (
                    [0x7fff_ffff, 65535, 65535],
                    [1024, 1, 1],
                    0x10_0000_2040,
                    u64::MAX,
                ),
            ] {
                let d = desc(grid, block, cb0, payload);
                let patched = t.qmd(v, &p, KEY, &d).unwrap();
                assert_eq!(patched, build(v, &d).unwrap(), "{v:?} {grid:?}");
                let mut off = Templates::new(false);
                assert_eq!(off.qmd(v, &p, KEY, &d).unwrap(), patched, "{v:?} {grid:?}");
                assert!(off.entries.is_empty());
                assert_eq!(patched.launch_desc().unwrap().grid, grid);
            }
        }
    }

    #[test]
    fn a_launch_releasing_another_semaphore_gets_its_own_template() {
        for v in [QmdVersion::V03_00, QmdVersion::V04_00, QmdVersion::V05_00] {
            let p = QmdPatch::new(v).unwrap();
            let mut t = Templates::default();
            let first = desc([1, 1, 1], [32, 1, 1], 0x10_0000_2000, 1);
            t.qmd(v, &p, KEY, &first).unwrap();
            // Another stream's compute channel: the same kernel, its own timeline.
            let mut other = first;
            other.release[0] = Some((0x10_0000_0080, 2));
            let q = t.qmd(v, &p, KEY, &other).unwrap();
            assert_eq!(q, build(v, &other).unwrap(), "{v:?}");
            assert_eq!(
                q.launch_desc().unwrap().release[0],
                other.release[0],
                "{v:?}"
            );
        }
    }

    #[test]
    fn a_launch_whose_carveout_differs_gets_its_own_template() {
        for v in [QmdVersion::V03_00, QmdVersion::V04_00, QmdVersion::V05_00] {
            let p = QmdPatch::new(v).unwrap();
            let mut t = Templates::default();
            let big_blocks = desc([8, 1, 1], [1024, 1, 1], 0x10_0000_2000, 1);
            t.qmd(v, &p, KEY, &big_blocks).unwrap();
            // Smaller blocks of the same kernel: more resident, a larger carveout.
            let mut small_blocks = desc([8, 1, 1], [64, 1, 1], 0x10_0000_2000, 2);
            small_blocks.sm_config.target = 17;
            let q = t.qmd(v, &p, KEY, &small_blocks).unwrap();
            assert_eq!(q, build(v, &small_blocks).unwrap(), "{v:?}");
            assert_eq!(q.get("TARGET_SM_CONFIG_SHARED_MEM_SIZE").unwrap(), 17);
            // And the first one's template is still there, unchanged.
            let again = desc([9, 1, 1], [1024, 1, 1], 0x10_0000_2000, 3);
            let q = t.qmd(v, &p, KEY, &again).unwrap();
            assert_eq!(q, build(v, &again).unwrap(), "{v:?}");
            assert_eq!(q.get("TARGET_SM_CONFIG_SHARED_MEM_SIZE").unwrap(), 3);
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
