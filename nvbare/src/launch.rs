//! Typed launches: each argument checked against the cubin's parameter table.

use std::sync::Arc;

use nvbare_core::device::{Arg, LaunchConfig};

use crate::buffer::{DeviceRange, Memory};
use crate::module::Function;
use crate::stream::Stream;
use crate::{DeviceBuffer, DeviceRepr, DeviceSlice, Error, Result};

/// One argument as the builder keeps it.
#[derive(Debug, Clone)]
pub(crate) enum ArgValue {
    /// A scalar of its size (at most 8 bytes), little-endian.
    Scalar {
        bytes: [u8; 8],
        size: usize,
        align: usize,
        what: &'static str,
    },
    /// A device pointer into `mem`.
    Pointer { mem: Arc<Memory>, offset: u64 },
    /// A struct passed by value.
    Bytes {
        bytes: Vec<u8>,
        align: usize,
        what: &'static str,
    },
}

impl ArgValue {
    fn size(&self) -> usize {
        match self {
            ArgValue::Scalar { size, .. } => *size,
            ArgValue::Pointer { .. } => 8,
            ArgValue::Bytes { bytes, .. } => bytes.len(),
        }
    }

    fn align(&self) -> usize {
        match self {
            ArgValue::Scalar { align, .. } | ArgValue::Bytes { align, .. } => *align,
            ArgValue::Pointer { .. } => 8,
        }
    }

    fn describe(&self) -> String {
        match self {
            ArgValue::Scalar { what, .. } => (*what).to_string(),
            ArgValue::Pointer { .. } => "a device pointer".to_string(),
            ArgValue::Bytes { bytes, what, .. } => format!("{what} ({} bytes)", bytes.len()),
        }
    }
}

/// What [`LaunchBuilder::arg`] takes: scalars (`u8`..`u64`, `i8`..`i64`, `f32`, `f64`),
/// device buffers and slices (passed as pointers), and [`ByValue`] structs.
pub trait KernelArg {
    #[doc(hidden)]
    fn value(&self) -> ArgValueRef;
}

/// An argument, captured (opaque).
#[doc(hidden)]
#[derive(Debug)]
pub struct ArgValueRef(pub(crate) ArgValue);

macro_rules! scalar_arg {
    ($($t:ty),*) => {$(
        impl KernelArg for $t {
            fn value(&self) -> ArgValueRef {
                let mut bytes = [0u8; 8];
                let b = self.to_le_bytes();
                bytes[..b.len()].copy_from_slice(&b);
                ArgValueRef(ArgValue::Scalar {
                    bytes,
                    size: b.len(),
                    align: align_of::<$t>(),
                    what: stringify!($t),
                })
            }
        }
    )*};
}
scalar_arg!(u8, u16, u32, u64, i8, i16, i32, i64, f32, f64);

impl<T: DeviceRepr> KernelArg for DeviceBuffer<T> {
    fn value(&self) -> ArgValueRef {
        let s = self.span().0;
        ArgValueRef(ArgValue::Pointer {
            mem: s.mem.clone(),
            offset: s.offset,
        })
    }
}

impl<T: DeviceRepr> KernelArg for DeviceSlice<T> {
    fn value(&self) -> ArgValueRef {
        let s = self.span().0;
        ArgValueRef(ArgValue::Pointer {
            mem: s.mem.clone(),
            offset: s.offset,
        })
    }
}

/// A struct passed to a kernel by value: its bytes as Rust lays them out, which must match
/// the kernel's (`#[repr(C)]`); its size and alignment are checked against the parameter.
#[derive(Debug, Clone, Copy)]
pub struct ByValue<T: DeviceRepr>(pub T);

impl<T: DeviceRepr> KernelArg for ByValue<T> {
    fn value(&self) -> ArgValueRef {
        ArgValueRef(ArgValue::Bytes {
            bytes: zerocopy::IntoBytes::as_bytes(&self.0).to_vec(),
            align: align_of::<T>(),
            what: std::any::type_name::<T>(),
        })
    }
}

/// A launch being put together: [`Stream::launch_builder`], then one [`LaunchBuilder::arg`]
/// per kernel parameter, then [`LaunchBuilder::launch`].
#[derive(Debug)]
#[must_use = "a launch builder does nothing until .launch(cfg)"]
pub struct LaunchBuilder<'a> {
    stream: &'a Stream,
    f: &'a Function,
    args: Vec<ArgValue>,
}

impl<'a> LaunchBuilder<'a> {
    pub(crate) fn new(stream: &'a Stream, f: &'a Function) -> Self {
        LaunchBuilder {
            stream,
            f,
            args: Vec::with_capacity(f.info().params.len()),
        }
    }

    /// The next argument.
    pub fn arg<A: KernelArg + ?Sized>(mut self, a: &A) -> Self {
        self.args.push(a.value().0);
        self
    }

    /// Checks the arguments against the kernel's parameters (count, each one's size, and that
    /// the parameter's offset suits the argument's alignment) and launches over `cfg`. Returns
    /// once the work is queued; the kernel's own errors surface at the next wait.
    pub fn launch(self, cfg: LaunchConfig) -> Result<()> {
        let k = self.f.info();
        let gpu = &self.stream.gpu;
        if !Arc::ptr_eq(&self.f.loaded.gpu, gpu) {
            return Err(Error::ForeignObject(format!(
                "kernel `{}` is loaded on {}, not on {}: load the cubin there too",
                k.name, self.f.loaded.gpu.name, gpu.name
            )));
        }
        check_args(k, &self.args, Some(gpu))?;
        let args: Vec<Arg<'_>> = self
            .args
            .iter()
            .map(|a| match a {
                ArgValue::Scalar { bytes, size, .. } => scalar(bytes, *size),
                ArgValue::Pointer { mem, offset } => mem.raw.arg_at(*offset),
                ArgValue::Bytes { bytes, .. } => Arg::Bytes(bytes),
            })
            .collect();
        self.stream.launch_raw(self.f, cfg, &args)
    }
}

/// The arguments against kernel `k`'s parameters: count, sizes, alignment, and pointers into
/// `gpu`'s memory (when given).
fn check_args(
    k: &nvbare_core::device::KernelInfo,
    args: &[ArgValue],
    gpu: Option<&Arc<crate::gpu::GpuShared>>,
) -> Result<()> {
    if args.len() != k.params.len() {
        return Err(Error::Arguments(format!(
            "kernel `{}` takes {} parameters, {} were given",
            k.name,
            k.params.len(),
            args.len()
        )));
    }
    for (i, (p, a)) in k.params.iter().zip(args).enumerate() {
        if a.size() != p.size as usize {
            return Err(Error::Arguments(format!(
                "parameter {i} of `{}` is {} bytes, the argument is {}",
                k.name,
                p.size,
                a.describe()
            )));
        }
        if !(p.offset as usize).is_multiple_of(a.align()) {
            return Err(Error::Arguments(format!(
                "parameter {i} of `{}` sits at offset {}, which {} (aligned to {}) cannot: \
                     the kernel declares another type",
                k.name,
                p.offset,
                a.describe(),
                a.align()
            )));
        }
        if let (ArgValue::Pointer { mem, .. }, Some(gpu)) = (a, gpu)
            && !Arc::ptr_eq(&mem.gpu, gpu)
        {
            return Err(Error::ForeignObject(format!(
                "parameter {i} of `{}` points into a buffer of {}, not of {}",
                k.name, mem.gpu.name, gpu.name
            )));
        }
    }
    Ok(())
}

fn scalar(b: &[u8; 8], size: usize) -> Arg<'static> {
    let u = u64::from_le_bytes(*b);
    match size {
        1 => Arg::U8(u as u8),
        2 => Arg::U16(u as u16),
        4 => Arg::U32(u as u32),
        _ => Arg::U64(u),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvbare_core::device::{Kernel, KernelInfo, KernelParam};

    fn kernel(params: &[(u32, u32)]) -> KernelInfo {
        KernelInfo {
            program_address: 0,
            kernel: Kernel {
                name: "k".into(),
                param_base: 0x210,
                param_size: params.iter().map(|(o, s)| o + s).max().unwrap_or(0),
                params: params
                    .iter()
                    .enumerate()
                    .map(|(i, &(offset, size))| KernelParam {
                        ordinal: i as u32,
                        offset,
                        size,
                    })
                    .collect(),
                ..Kernel::default()
            },
        }
    }

    #[derive(
        Clone,
        Copy,
        zerocopy::FromBytes,
        zerocopy::IntoBytes,
        zerocopy::Immutable,
        zerocopy::KnownLayout,
    )]
    #[repr(C)]
    struct Pair {
        a: u32,
        b: u32,
    }

    fn vals(a: &[&dyn KernelArg]) -> Vec<ArgValue> {
        a.iter().map(|a| a.value().0).collect()
    }

    #[test]
    fn arguments_are_checked_by_count_size_and_alignment() {
        // (u8 at 0, u64 at 8, u16 at 16), as the fixture kernel `maxntid` takes them.
        let k = kernel(&[(0, 1), (8, 8), (16, 2)]);
        assert!(check_args(&k, &vals(&[&1u8, &2u64, &3u16]), None).is_ok());
        let e = check_args(&k, &vals(&[&1u8, &2u64]), None).unwrap_err();
        assert!(
            e.to_string().contains("takes 3 parameters, 2 were given"),
            "{e}"
        );
        let e = check_args(&k, &vals(&[&1u8, &2u32, &3u16]), None).unwrap_err();
        assert!(
            e.to_string()
                .contains("parameter 1 of `k` is 8 bytes, the argument is u32"),
            "{e}"
        );
        // A by-value struct of the right size is fine where its alignment divides the offset.
        let p = ByValue(Pair { a: 1, b: 2 });
        assert!(check_args(&k, &vals(&[&1u8, &p, &3u16]), None).is_ok());
        // An 8-byte parameter at offset 4 (a struct of u32s) takes the struct, not a u64.
        let k = kernel(&[(0, 4), (4, 8)]);
        assert!(check_args(&k, &vals(&[&1u32, &p]), None).is_ok());
        let e = check_args(&k, &vals(&[&1u32, &2u64]), None).unwrap_err();
        assert!(
            e.to_string()
                .contains("sits at offset 4, which u64 (aligned to 8) cannot"),
            "{e}"
        );
        let e = check_args(&k, &vals(&[&1u32, &2.0f64]), None).unwrap_err();
        assert!(matches!(e, Error::Arguments(_)), "{e}");
    }

    #[test]
    fn scalars_keep_their_bytes() {
        for (v, want) in [
            (&7u8 as &dyn KernelArg, Arg::U8(7)),
            (&0xbeefu16, Arg::U16(0xbeef)),
            (&-2i32, Arg::U32((-2i32) as u32)),
            (&1.5f32, Arg::U32(1.5f32.to_bits())),
            (&u64::MAX, Arg::U64(u64::MAX)),
            (&-3i64, Arg::U64((-3i64) as u64)),
        ] {
            let ArgValue::Scalar { bytes, size, .. } = v.value().0 else {
                panic!("not a scalar")
            };
            assert_eq!(scalar(&bytes, size), want);
        }
    }
}
