//! QMD templates: a launch copies a prebuilt QMD and patches the few fields that change.
//!
//! Building a QMD from a [`LaunchDesc`] looks every field up by name (several microseconds);
//! the fields that differ between launches of one kernel are only the grid, the block, the
//! address of constant bank 0 and the release payload. So the first launch of a kernel with
//! a given dynamic shared-memory size builds the QMD fully and keeps it, and later launches
//! patch those fields through field handles resolved once per layout.

use alloc::vec::Vec;

use crate::channel::qmd::{LaunchDesc, Qmd, QmdError, QmdField, SmSharedConfig};
use crate::chip::QmdVersion;

/// Field handles for the per-launch fields of one layout.
#[derive(Debug, Clone, Copy)]
pub(super) struct QmdPatch {
    grid: [&'static QmdField; 3],
    block: [&'static QmdField; 3],
    cb0_lo: &'static QmdField,
    cb0_hi: &'static QmdField,
    cb0_shift: u32,
    release_lo: &'static QmdField,
    release_hi: &'static QmdField,
    /// Dependent QMD 0: pointer (shifted 8), enable, action, prefetch.
    dependent: [&'static QmdField; 4],
    /// `RELEASE_ENABLE` of release 0.
    release_enable: &'static QmdField,
    /// `CWD_MEMBAR_TYPE`, and `CWD_MEMBAR_TASK_CHASING_ENABLE` where the layout has it (V04+).
    cwd_membar: &'static QmdField,
    task_chasing: Option<&'static QmdField>,
}

fn field(v: QmdVersion, name: &'static str) -> Result<&'static QmdField, QmdError> {
    v.field(name)
        .ok_or(QmdError::UnsupportedVersion { version: v })
}

impl QmdPatch {
    /// Resolves the handles for layout `v` (names as in `clc6c0qmd.h` / `clcbc0qmd.h` /
    /// `clcec0qmd.h`).
    pub(super) fn new(v: QmdVersion) -> Result<Self, QmdError> {
        let dependent = match v {
            QmdVersion::V04_00 => [
                "DEPENDENT_QMD0_POINTER",
                "DEPENDENT_QMD_ENABLE(0)",
                "DEPENDENT_QMD_ACTION(0)",
                "DEPENDENT_QMD_PREFETCH(0)",
            ],
            _ => [
                "DEPENDENT_QMD0_POINTER",
                "DEPENDENT_QMD0_ENABLE",
                "DEPENDENT_QMD0_ACTION",
                "DEPENDENT_QMD0_PREFETCH",
            ],
        };
        let release_enable = match v {
            QmdVersion::V03_00 => "RELEASE0_ENABLE",
            _ => "RELEASE_ENABLE(0)",
        };
        let (grid, cb_lo, cb_hi, shift, rel_lo, rel_hi) = match v {
            QmdVersion::V03_00 => (
                ["CTA_RASTER_WIDTH", "CTA_RASTER_HEIGHT", "CTA_RASTER_DEPTH"],
                "CONSTANT_BUFFER_ADDR_LOWER(0)",
                "CONSTANT_BUFFER_ADDR_UPPER(0)",
                0,
                "RELEASE0_PAYLOAD_LOWER",
                "RELEASE0_PAYLOAD_UPPER",
            ),
            QmdVersion::V04_00 | QmdVersion::V05_00 => (
                ["GRID_WIDTH", "GRID_HEIGHT", "GRID_DEPTH"],
                "CONSTANT_BUFFER_ADDR_LOWER_SHIFTED6(0)",
                "CONSTANT_BUFFER_ADDR_UPPER_SHIFTED6(0)",
                6,
                "RELEASE_SEMAPHORE0_PAYLOAD_LOWER",
                "RELEASE_SEMAPHORE0_PAYLOAD_UPPER",
            ),
            QmdVersion::V02_02 => return Err(QmdError::UnsupportedVersion { version: v }),
        };
        Ok(QmdPatch {
            grid: [field(v, grid[0])?, field(v, grid[1])?, field(v, grid[2])?],
            block: [
                field(v, "CTA_THREAD_DIMENSION0")?,
                field(v, "CTA_THREAD_DIMENSION1")?,
                field(v, "CTA_THREAD_DIMENSION2")?,
            ],
            cb0_lo: field(v, cb_lo)?,
            cb0_hi: field(v, cb_hi)?,
            cb0_shift: shift,
            release_lo: field(v, rel_lo)?,
            release_hi: field(v, rel_hi)?,
            dependent: [
                field(v, dependent[0])?,
                field(v, dependent[1])?,
                field(v, dependent[2])?,
                field(v, dependent[3])?,
            ],
            release_enable: field(v, release_enable)?,
            cwd_membar: field(v, "CWD_MEMBAR_TYPE")?,
            task_chasing: v.field("CWD_MEMBAR_TASK_CHASING_ENABLE"),
        })
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
        for i in 0..3 {
            q.set_field(self.grid[i], grid[i].into())?;
            q.set_field(self.block[i], block[i].into())?;
        }
        let a = cb0 >> self.cb0_shift;
        q.set_field(self.cb0_lo, a & 0xffff_ffff)?;
        q.set_field(self.cb0_hi, a >> 32)?;
        self.set_payload(q, payload)
    }

    /// [`Qmd::schedule_after`] through the resolved handles (a launch chains QMDs at the
    /// rate it launches them; looking the four fields up by name cost ~1 µs on the H200's
    /// CPU).
    pub(super) fn schedule_after(&self, q: &mut Qmd, next: u64) -> Result<(), QmdError> {
        if !next.is_multiple_of(256) {
            return Err(QmdError::Misaligned {
                field: self.dependent[0].name,
                value: next,
                align: 256,
            });
        }
        let [ptr, en, act, pf] = self.dependent;
        q.set_field(ptr, next >> 8)?;
        q.set_field(en, 1)?;
        // DEPENDENT_QMD_ACTION_QMD_SCHEDULE.
        q.set_field(act, 1)?;
        q.set_field(pf, 1)
    }

    /// Turns `q`, the last QMD of a chain so far, into an inner one whose grid the QMD at
    /// `next` follows: it schedules `next` ([`QmdPatch::schedule_after`]), releases nothing
    /// (the chain's last QMD releases its timeline value, which covers this one's) and, unless
    /// `keep_membar`, ends its CTAs with a GPU-scope membar and task chasing instead of the
    /// system-scope one (what a CUDA graph gives all but its last kernel: the next grid sees
    /// this one's stores; the last QMD's system-scope membar makes them visible to the host
    /// before its release).
    pub(super) fn make_inner(
        &self,
        q: &mut Qmd,
        next: u64,
        keep_membar: bool,
    ) -> Result<(), QmdError> {
        self.schedule_after(q, next)?;
        q.set_field(self.release_enable, 0)?;
        if !keep_membar {
            q.set_field(self.cwd_membar, CWD_MEMBAR_TYPE_L1_MEMBAR)?;
            if let Some(f) = self.task_chasing {
                q.set_field(f, 1)?;
            }
        }
        Ok(())
    }

    /// Sets only the release payload of `q` (QMDs that differ in nothing else).
    pub(super) fn set_payload(&self, q: &mut Qmd, payload: u64) -> Result<(), QmdError> {
        q.set_field(self.release_lo, payload & 0xffff_ffff)?;
        q.set_field(self.release_hi, payload >> 32)
    }
}

/// `CWD_MEMBAR_TYPE_L1_MEMBAR` (`clc6c0qmd.h` / `clcbc0qmd.h`): a GPU-scope membar at CTA end.
const CWD_MEMBAR_TYPE_L1_MEMBAR: u64 = 3;

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
/// [`crate::channel::launch::sm_shared_config`]).
#[derive(Debug, Default)]
pub(super) struct Templates {
    entries: Vec<(TemplateKey, SmSharedConfig, Qmd)>,
}

impl Templates {
    /// The QMD for `d`: a cached template patched, or a fresh build cached for next time.
    /// `sysmembar` false builds the release semaphore with `MEMBAR_TYPE` = `NONE` instead of
    /// `FE_SYSMEMBAR` ([`super::DeviceOptions::release_sysmembar`]); the template keeps it.
    pub(super) fn qmd(
        &mut self,
        v: QmdVersion,
        patch: &QmdPatch,
        key: TemplateKey,
        d: &LaunchDesc,
        sysmembar: bool,
        overrides: &[Option<(&'static str, u64)>],
    ) -> Result<Qmd, QmdError> {
        let (cb0, _) = d.cbufs[0].unwrap_or((0, 0));
        let payload = d.release[0].map_or(0, |r| r.1);
        if let Some((_, _, t)) = self
            .entries
            .iter()
            .find(|(k, c, _)| *k == key && *c == d.sm_config)
        {
            let mut q = t.clone();
            patch.apply(&mut q, d.grid, d.block, cb0, payload)?;
            return Ok(q);
        }
        let mut q = Qmd::build(v, d)?;
        if !sysmembar && d.release[0].is_some() {
            let field = match v {
                QmdVersion::V03_00 => "RELEASE0_MEMBAR_TYPE",
                _ => "RELEASE_MEMBAR_TYPE(0)",
            };
            q.set(field, 0)?;
        }
        for (field, value) in overrides.iter().flatten() {
            q.set(field, *value)?;
        }
        if self.entries.len() >= CACHE {
            self.entries.remove(0);
        }
        self.entries.push((key, d.sm_config, q.clone()));
        Ok(q)
    }

    /// Forgets the templates of a freed module slot.
    pub(super) fn forget_slot(&mut self, slot: usize) {
        self.entries.retain(|(k, _, _)| k.slot != slot);
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

    /// The template key both tests launch under.
    const KEY: TemplateKey = TemplateKey {
        slot: 1,
        generation: 1,
        kernel: 0,
        dynamic_shared: 0,
    };

    #[test]
    fn chaining_through_handles_equals_chaining_by_name() {
        for v in [QmdVersion::V03_00, QmdVersion::V04_00, QmdVersion::V05_00] {
            let p = QmdPatch::new(v).unwrap();
            let d = desc([3, 1, 1], [64, 1, 1], 0x10_0000_2000, 9);
            let mut by_handle = Qmd::build(v, &d).unwrap();
            let mut by_name = by_handle.clone();
            p.schedule_after(&mut by_handle, 0x20_0000_1200).unwrap();
            by_name.schedule_after(0x20_0000_1200).unwrap();
            assert_eq!(by_handle, by_name, "{v:?}");
            assert_ne!(
                by_handle,
                Qmd::build(v, &d).unwrap(),
                "{v:?}: it changed something"
            );
            let mut chained = d;
            chained.dependent_qmd = Some(0x20_0000_1200);
            assert_eq!(by_handle, Qmd::build(v, &chained).unwrap(), "{v:?}");
            assert_eq!(
                by_handle.launch_desc().unwrap().dependent_qmd,
                Some(0x20_0000_1200)
            );
            assert!(
                p.schedule_after(&mut by_handle, 0x20_0000_1280).is_err(),
                "misaligned"
            );
        }
    }

    #[test]
    fn an_inner_chain_qmd_schedules_the_next_releases_nothing_and_keeps_the_rest() {
        for v in [QmdVersion::V03_00, QmdVersion::V04_00, QmdVersion::V05_00] {
            let p = QmdPatch::new(v).unwrap();
            let d = desc([3, 1, 1], [64, 1, 1], 0x10_0000_2000, 9);
            let last = Qmd::build(v, &d).unwrap();
            let mut inner = last.clone();
            p.make_inner(&mut inner, 0x20_0000_1200, false).unwrap();
            let got = inner.launch_desc().unwrap();
            assert_eq!(got.dependent_qmd, Some(0x20_0000_1200), "{v:?}");
            assert_eq!(got.release, [None, None], "{v:?}");
            assert_eq!(inner.get("CWD_MEMBAR_TYPE").unwrap(), 3, "{v:?}");
            if v != QmdVersion::V03_00 {
                assert_eq!(inner.get("CWD_MEMBAR_TASK_CHASING_ENABLE").unwrap(), 1);
            }
            // Nothing else changed: the launch itself is the same.
            let mut want = d;
            want.release = [None, None];
            want.dependent_qmd = Some(0x20_0000_1200);
            let mut back = got;
            back.program_size = want.program_size;
            assert_eq!(back, want, "{v:?}");
            let mut kept = last.clone();
            p.make_inner(&mut kept, 0x20_0000_1200, true).unwrap();
            assert_eq!(kept.get("CWD_MEMBAR_TYPE"), last.get("CWD_MEMBAR_TYPE"));
        }
    }

    #[test]
    fn a_patched_template_equals_a_fresh_build() {
        for v in [QmdVersion::V03_00, QmdVersion::V04_00, QmdVersion::V05_00] {
            let p = QmdPatch::new(v).unwrap();
            let mut t = Templates::default();
            let first = desc([1, 1, 1], [32, 1, 1], 0x10_0000_2000, 1);
            assert_eq!(
                t.qmd(v, &p, KEY, &first, true, &[]).unwrap(),
                Qmd::build(v, &first).unwrap()
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
                let patched = t.qmd(v, &p, KEY, &d, true, &[]).unwrap();
                assert_eq!(patched, Qmd::build(v, &d).unwrap(), "{v:?} {grid:?}");
                assert_eq!(patched.launch_desc().unwrap().grid, grid);
            }
        }
    }

    #[test]
    fn a_launch_whose_carveout_differs_gets_its_own_template() {
        for v in [QmdVersion::V03_00, QmdVersion::V04_00, QmdVersion::V05_00] {
            let p = QmdPatch::new(v).unwrap();
            let mut t = Templates::default();
            let big_blocks = desc([8, 1, 1], [1024, 1, 1], 0x10_0000_2000, 1);
            t.qmd(v, &p, KEY, &big_blocks, true, &[]).unwrap();
            // Smaller blocks of the same kernel: more resident, a larger carveout.
            let mut small_blocks = desc([8, 1, 1], [64, 1, 1], 0x10_0000_2000, 2);
            small_blocks.sm_config.target = 17;
            let q = t.qmd(v, &p, KEY, &small_blocks, true, &[]).unwrap();
            assert_eq!(q, Qmd::build(v, &small_blocks).unwrap(), "{v:?}");
            assert_eq!(q.get("TARGET_SM_CONFIG_SHARED_MEM_SIZE").unwrap(), 17);
            // And the first one's template is still there, unchanged.
            let again = desc([9, 1, 1], [1024, 1, 1], 0x10_0000_2000, 3);
            let q = t.qmd(v, &p, KEY, &again, true, &[]).unwrap();
            assert_eq!(q, Qmd::build(v, &again).unwrap(), "{v:?}");
            assert_eq!(q.get("TARGET_SM_CONFIG_SHARED_MEM_SIZE").unwrap(), 3);
        }
    }

    #[test]
    fn setting_only_the_payload_equals_a_fresh_build_with_that_payload() {
        for v in [QmdVersion::V03_00, QmdVersion::V04_00, QmdVersion::V05_00] {
            let p = QmdPatch::new(v).unwrap();
            let mut q = Qmd::build(v, &desc([9, 2, 1], [64, 2, 1], 0x10_0000_4000, 7)).unwrap();
            for payload in [8, 0x1_0000_0000, u64::MAX] {
                p.set_payload(&mut q, payload).unwrap();
                let want = Qmd::build(v, &desc([9, 2, 1], [64, 2, 1], 0x10_0000_4000, payload));
                assert_eq!(q, want.unwrap(), "{v:?} {payload:#x}");
            }
        }
    }

    #[test]
    fn overrides_are_applied_to_the_template_and_unknown_fields_fail() {
        for v in [QmdVersion::V03_00, QmdVersion::V04_00, QmdVersion::V05_00] {
            let p = QmdPatch::new(v).unwrap();
            let mut t = Templates::default();
            let d = desc([1, 1, 1], [32, 1, 1], 0x10_0000_2000, 1);
            let fresh = Qmd::build(v, &d).unwrap();
            assert_eq!(fresh.get("CWD_MEMBAR_TYPE").unwrap(), 1);
            assert_eq!(fresh.get("INVALIDATE_TEXTURE_DATA_CACHE").unwrap(), 1);
            let ov = [
                Some(("CWD_MEMBAR_TYPE", 0)),
                None,
                Some(("INVALIDATE_TEXTURE_DATA_CACHE", 0)),
            ];
            let q = t.qmd(v, &p, KEY, &d, true, &ov).unwrap();
            assert_eq!(q.get("CWD_MEMBAR_TYPE").unwrap(), 0, "{v:?}");
            assert_eq!(q.get("INVALIDATE_TEXTURE_DATA_CACHE").unwrap(), 0);
            // The cached template keeps them; the next launch patches only the grid.
            let d2 = desc([9, 1, 1], [32, 1, 1], 0x10_0000_2000, 2);
            let q2 = t.qmd(v, &p, KEY, &d2, true, &ov).unwrap();
            assert_eq!(q2.get("CWD_MEMBAR_TYPE").unwrap(), 0);
            assert_eq!(q2.launch_desc().unwrap().grid, [9, 1, 1]);

            let mut t = Templates::default();
            assert!(
                t.qmd(v, &p, KEY, &d, true, &[Some(("NO_SUCH_FIELD", 1))])
                    .is_err()
            );
            assert!(
                t.qmd(v, &p, KEY, &d, true, &[Some(("CWD_MEMBAR_TYPE", 4))])
                    .is_err()
            );
        }
    }
}
