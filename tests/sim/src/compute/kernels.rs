//! Kernel models: host functions that do what the fixture kernels do, found by the exact bytes
//! of their machine code.
//!
//! The simulator cannot execute SASS. Instead it knows the fixture cubins
//! (`tests/fixtures/cubins/kernels_sm*_cuda*.cubin`, built from `src/kernels.ptx`, and the
//! device layer's own `runtime_sm*_cuda*.cubin` from `src/runtime.ptx`): the registry
//! parses them with the cubin loader, and for every kernel it has a model of records the code
//! bytes, the bytes a relocation may change (found by loading the image at two addresses), the
//! parameter layout in constant bank 0, and the register and shared-memory needs. A launch
//! whose program bytes match an entry runs the model; anything else is "illegal instruction".
//!
//! Models read their parameters from constant bank 0 and do every load and store through
//! `gpu_mem` in the launching channel's address space, thread by thread as the PTX does, so
//! wrong arguments, unbound constant banks and unmapped buffers fail the way they would on a
//! GPU.

use nvbare_gsp_firmware::cubin::{Cubin, Kernel, KernelParam};

/// What a model does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Behavior {
    /// `empty()`: nothing.
    Empty,
    /// `add1(u32 *buf, u32 n)`: `buf[i] += 1` for `i < n`, `i = ctaid.x * ntid.x + tid.x`.
    Add1,
    /// `vector_add(f32 *a, f32 *b, f32 *c, u32 n)`: `c[i] = a[i] + b[i]` for `i < n`.
    VectorAdd,
    /// `oob_write(u32 *buf)`: stores 0xdeadbeef at `buf + 2^40` bytes.
    OobWrite,
    /// `spin_forever()`: loads the global `spin_forever_release` (its address is in constant
    /// bank `bank` at `offset`, put there by an `R_CUDA_64` relocation) until it is non-zero.
    SpinForever {
        /// Constant bank holding the global's address.
        bank: u32,
        /// Offset of the address in that bank.
        offset: u64,
    },
    /// `nvbare_copy(u8 *dst, u8 *src, u64 bytes)` (`runtime.ptx`): a grid-stride copy over
    /// `T = %nctaid.x * %ntid.x` threads; byte head up to src's 16-byte boundary, 16-byte
    /// vectors, byte tail; bytes throughout when dst and src differ modulo 16.
    Copy,
}

impl Behavior {
    fn for_kernel(cubin: &Cubin, k: &Kernel) -> Option<Behavior> {
        Some(match k.name.as_str() {
            "empty" => Behavior::Empty,
            "add1" => Behavior::Add1,
            "vector_add" => Behavior::VectorAdd,
            "oob_write" => Behavior::OobWrite,
            "nvbare_copy" => Behavior::Copy,
            "spin_forever" => {
                // The relocation that stores the global's address into a constant bank.
                let r = cubin
                    .relocations
                    .iter()
                    .find(|r| r.symbol == "spin_forever_release")?;
                let bank_sec = cubin.sections.iter().find(|s| s.name == r.section)?;
                let cb = k
                    .const_banks
                    .iter()
                    .find(|b| b.image_offset == bank_sec.image_offset)?;
                Behavior::SpinForever {
                    bank: cb.bank,
                    offset: r.image_offset.checked_sub(cb.image_offset)?,
                }
            }
            _ => return None,
        })
    }
}

/// A known kernel.
#[derive(Debug, Clone)]
pub struct KernelModel {
    /// Kernel name.
    pub name: String,
    /// Which fixture it came from, e.g. `kernels_sm90_cuda12`.
    pub source: &'static str,
    /// SM of the cubin.
    pub sm: u32,
    /// Code bytes (from a load at a fixed address).
    pub code: Vec<u8>,
    /// `true` where a relocation may change the byte (those bytes are not compared).
    pub reloc_mask: Vec<bool>,
    /// Byte offset of the parameters in constant bank 0.
    pub param_base: u32,
    /// Parameters.
    pub params: Vec<KernelParam>,
    /// Registers per thread the code needs.
    pub regcount: u32,
    /// Static shared memory.
    pub shared_size: u32,
    /// The model.
    pub behavior: Behavior,
}

impl KernelModel {
    /// Whether `prefix` agrees with the start of this kernel's code (a quick filter).
    pub fn matches_prefix(&self, prefix: &[u8]) -> bool {
        self.code
            .iter()
            .zip(prefix)
            .zip(&self.reloc_mask)
            .all(|((a, b), &skip)| skip || a == b)
    }

    /// Whether `bytes` (at least `code.len()` long) are this kernel's code.
    pub fn matches(&self, bytes: &[u8]) -> bool {
        bytes.len() >= self.code.len()
            && self
                .code
                .iter()
                .zip(bytes)
                .zip(&self.reloc_mask)
                .all(|((a, b), &skip)| skip || a == b)
    }
}

/// The fixture cubins the registry is built from (compiled into the simulator).
pub const FIXTURES: &[(&str, &[u8])] = &[
    (
        "kernels_sm75_cuda12",
        include_bytes!("../../cubins/kernels_sm75_cuda12.cubin"),
    ),
    (
        "kernels_sm75_cuda13",
        include_bytes!("../../cubins/kernels_sm75_cuda13.cubin"),
    ),
    (
        "kernels_sm80_cuda12",
        include_bytes!("../../cubins/kernels_sm80_cuda12.cubin"),
    ),
    (
        "kernels_sm80_cuda13",
        include_bytes!("../../cubins/kernels_sm80_cuda13.cubin"),
    ),
    (
        "kernels_sm89_cuda12",
        include_bytes!("../../cubins/kernels_sm89_cuda12.cubin"),
    ),
    (
        "kernels_sm89_cuda13",
        include_bytes!("../../cubins/kernels_sm89_cuda13.cubin"),
    ),
    (
        "kernels_sm90_cuda12",
        include_bytes!("../../cubins/kernels_sm90_cuda12.cubin"),
    ),
    (
        "kernels_sm90_cuda13",
        include_bytes!("../../cubins/kernels_sm90_cuda13.cubin"),
    ),
    (
        "kernels_sm100_cuda12",
        include_bytes!("../../cubins/kernels_sm100_cuda12.cubin"),
    ),
    (
        "kernels_sm100_cuda13",
        include_bytes!("../../cubins/kernels_sm100_cuda13.cubin"),
    ),
    (
        "kernels_sm120_cuda12",
        include_bytes!("../../cubins/kernels_sm120_cuda12.cubin"),
    ),
    (
        "kernels_sm120_cuda13",
        include_bytes!("../../cubins/kernels_sm120_cuda13.cubin"),
    ),
    (
        "runtime_sm75_cuda12",
        include_bytes!("../../cubins/runtime_sm75_cuda12.cubin"),
    ),
    (
        "runtime_sm75_cuda13",
        include_bytes!("../../cubins/runtime_sm75_cuda13.cubin"),
    ),
    (
        "runtime_sm80_cuda12",
        include_bytes!("../../cubins/runtime_sm80_cuda12.cubin"),
    ),
    (
        "runtime_sm80_cuda13",
        include_bytes!("../../cubins/runtime_sm80_cuda13.cubin"),
    ),
    (
        "runtime_sm89_cuda12",
        include_bytes!("../../cubins/runtime_sm89_cuda12.cubin"),
    ),
    (
        "runtime_sm89_cuda13",
        include_bytes!("../../cubins/runtime_sm89_cuda13.cubin"),
    ),
    (
        "runtime_sm90_cuda12",
        include_bytes!("../../cubins/runtime_sm90_cuda12.cubin"),
    ),
    (
        "runtime_sm90_cuda13",
        include_bytes!("../../cubins/runtime_sm90_cuda13.cubin"),
    ),
    (
        "runtime_sm100_cuda12",
        include_bytes!("../../cubins/runtime_sm100_cuda12.cubin"),
    ),
    (
        "runtime_sm100_cuda13",
        include_bytes!("../../cubins/runtime_sm100_cuda13.cubin"),
    ),
    (
        "runtime_sm120_cuda12",
        include_bytes!("../../cubins/runtime_sm120_cuda12.cubin"),
    ),
    (
        "runtime_sm120_cuda13",
        include_bytes!("../../cubins/runtime_sm120_cuda13.cubin"),
    ),
];

/// Two load addresses whose every byte above the low 12 bits differs, so every relocated byte
/// of the code differs between the two loads.
const BASE_A: u64 = 0x0000_5555_5555_5000;
const BASE_B: u64 = 0x0000_2aaa_aaaa_a000;

/// All kernels the simulator can run.
#[derive(Debug, Clone, Default)]
pub struct KernelRegistry {
    models: Vec<KernelModel>,
}

impl KernelRegistry {
    /// An empty registry (every launch is an illegal instruction).
    pub fn empty() -> Self {
        KernelRegistry { models: Vec::new() }
    }

    /// The registry built from the compiled-in fixture cubins.
    pub fn fixtures() -> Result<Self, String> {
        let mut r = KernelRegistry::empty();
        for (name, bytes) in FIXTURES {
            r.add_cubin(name, bytes)
                .map_err(|e| format!("fixture {name}: {e}"))?;
        }
        Ok(r)
    }

    /// Adds every kernel of `cubin` that has a model.
    pub fn add_cubin(&mut self, source: &'static str, bytes: &[u8]) -> Result<usize, String> {
        let cubin = Cubin::parse(bytes).map_err(|e| e.to_string())?;
        let a = cubin.load_image(BASE_A).map_err(|e| e.to_string())?;
        let b = cubin.load_image(BASE_B).map_err(|e| e.to_string())?;
        let mut added = 0;
        for k in &cubin.kernels {
            let Some(behavior) = Behavior::for_kernel(&cubin, k) else {
                continue;
            };
            let ca = cubin.code(k, &a);
            let cb = cubin.code(k, &b);
            if ca.is_empty() || ca.len() != cb.len() {
                return Err(format!("kernel {} has no code in the image", k.name));
            }
            let reloc_mask = ca.iter().zip(cb).map(|(x, y)| x != y).collect();
            self.models.push(KernelModel {
                name: k.name.clone(),
                source,
                sm: cubin.sm,
                code: ca.to_vec(),
                reloc_mask,
                param_base: k.param_base,
                params: k.params.clone(),
                regcount: k.regcount,
                shared_size: k.shared_size,
                behavior,
            });
            added += 1;
        }
        Ok(added)
    }

    /// Every model.
    pub fn models(&self) -> &[KernelModel] {
        &self.models
    }

    /// Number of models.
    pub fn len(&self) -> usize {
        self.models.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.models.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_fixture_kernel_has_a_model() {
        let r = KernelRegistry::fixtures().unwrap();
        // 5 kernels x 12 `kernels` cubins, 1 x 12 `runtime` cubins (sm_75 to sm_120).
        assert_eq!(
            r.len(),
            72,
            "{:?}",
            r.models().iter().map(|m| &m.name).collect::<Vec<_>>()
        );
        for m in r.models() {
            // Code differs between kernels of the same cubin.
            let same = r
                .models()
                .iter()
                .filter(|o| o.source == m.source && o.name != m.name)
                .any(|o| o.matches(&m.code));
            assert!(!same, "{} in {} is not distinguishable", m.name, m.source);
            if let Behavior::SpinForever { bank, .. } = m.behavior {
                assert_ne!(
                    bank, 0,
                    "the global's address lives in a bank the driver binds"
                );
            }
        }
        // The sm_75 (Turing) kernels are told apart from the others by their code.
        for source in ["kernels_sm75_cuda12", "kernels_sm75_cuda13"] {
            let add1 = r
                .models()
                .iter()
                .find(|m| m.source == source && m.name == "add1")
                .unwrap();
            assert_eq!(add1.sm, 75);
            let others = r.models().iter().filter(|o| o.sm != 75);
            assert!(others.clone().all(|o| !o.matches(&add1.code)), "{source}");
        }
        let add1 = r.models().iter().find(|m| m.name == "add1").unwrap();
        assert_eq!(add1.params.len(), 2);
        assert_eq!((add1.params[0].size, add1.params[1].size), (8, 4));
    }

    #[test]
    fn a_flipped_byte_does_not_match() {
        let r = KernelRegistry::fixtures().unwrap();
        let m = &r.models()[0];
        let mut code = m.code.clone();
        let i = m.reloc_mask.iter().position(|&s| !s).unwrap();
        code[i] ^= 0x40;
        assert!(!m.matches(&code));
        assert!(m.matches(&m.code));
        assert!(!m.matches(&m.code[..m.code.len() - 1]));
    }
}
