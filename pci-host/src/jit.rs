//! PTX to cubin through NVIDIA's redistributable JIT linker, nvJitLink, loaded at run time:
//! `$NVBARE_NVJITLINK` (a path to `libnvJitLink.so*`, used alone when set), else
//! `libnvJitLink.so{,.13,.12}` on the loader's path, under `$CUDA_HOME/lib64` and
//! `/usr/local/cuda/lib64`, and in the `nvidia-nvjitlink` Python wheels. Results are cached
//! in memory by PTX text and target.
//!
//! The entry points and their `NVJITLINK_INPUT_PTX` value are nvJitLink.h's; that header maps
//! each name to a versioned symbol (`__nvJitLinkCreate_12_0`, ...), so each is looked up
//! plain first, then versioned.
//!
//! Feature `jit`. The library (`nvbare`, feature `jit`: `Gpu::load_ptx`) and libcuda
//! (`cuModuleLoadData` with PTX) both compile through [`compile`].

use std::collections::HashMap;
use std::ffi::{CString, c_char, c_void};
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

/// Largest cubin accepted from the JIT (as the cubin parser's image limit).
const MAX_CUBIN: usize = 1 << 30;

/// Why PTX was not compiled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JitError {
    /// nvJitLink was not found or does not load: the message says how to install it.
    #[error("{0}")]
    NotFound(String),
    /// The PTX does not compile (`log` is nvJitLink's error log), or nvJitLink failed.
    #[error("the PTX does not compile for sm_{sm}: {log}")]
    Compile {
        /// The target shader model.
        sm: u32,
        /// nvJitLink's log, or which call failed.
        log: String,
    },
}

/// `NVJITLINK_SUCCESS`.
const NVJITLINK_SUCCESS: i32 = 0;
/// `NVJITLINK_INPUT_PTX` (`nvJitLinkInputType`).
const NVJITLINK_INPUT_PTX: i32 = 2;

/// Compiled cubins by (PTX text, SM).
type Cache = HashMap<(Vec<u8>, u32), Vec<u8>>;

type Handle = *mut c_void;
type Create = unsafe extern "C" fn(*mut Handle, u32, *const *const c_char) -> i32;
type AddData = unsafe extern "C" fn(Handle, i32, *const c_void, usize, *const c_char) -> i32;
type Complete = unsafe extern "C" fn(Handle) -> i32;
type GetSize = unsafe extern "C" fn(Handle, *mut usize) -> i32;
type GetBytes = unsafe extern "C" fn(Handle, *mut c_void) -> i32;
type Destroy = unsafe extern "C" fn(*mut Handle) -> i32;

/// nvJitLink, loaded.
struct NvJitLink {
    _lib: libloading::Library,
    path: PathBuf,
    create: Create,
    add_data: AddData,
    complete: Complete,
    cubin_size: GetSize,
    cubin: GetBytes,
    log_size: GetSize,
    log: GetBytes,
    destroy: Destroy,
}

/// Where to look, in order.
fn candidates() -> Vec<PathBuf> {
    if let Some(p) = std::env::var_os("NVBARE_NVJITLINK") {
        return vec![PathBuf::from(p)];
    }
    let names = [
        "libnvJitLink.so",
        "libnvJitLink.so.13",
        "libnvJitLink.so.12",
    ];
    let mut out: Vec<PathBuf> = names.iter().map(PathBuf::from).collect();
    let mut dirs: Vec<PathBuf> = Vec::new();
    if let Some(h) = std::env::var_os("CUDA_HOME") {
        dirs.push(PathBuf::from(h).join("lib64"));
    }
    dirs.push("/usr/local/cuda/lib64".into());
    for py in python_dirs() {
        dirs.push(py.join("nvidia/cu13/lib"));
        dirs.push(py.join("nvidia/nvjitlink/lib"));
    }
    for d in dirs {
        for n in names {
            out.push(d.join(n));
        }
    }
    out
}

/// Python `site-packages` and `dist-packages` directories the wheels may be in.
fn python_dirs() -> Vec<PathBuf> {
    let mut roots: Vec<PathBuf> = vec!["/usr/lib".into(), "/usr/local/lib".into()];
    if let Some(h) = std::env::var_os("HOME") {
        roots.push(PathBuf::from(h).join(".local/lib"));
    }
    if let Some(v) = std::env::var_os("VIRTUAL_ENV") {
        roots.push(PathBuf::from(v).join("lib"));
    }
    let mut out = Vec::new();
    for r in roots {
        let Ok(entries) = std::fs::read_dir(&r) else {
            continue;
        };
        for e in entries.flatten() {
            if e.file_name().to_string_lossy().starts_with("python3") {
                out.push(e.path().join("site-packages"));
                out.push(e.path().join("dist-packages"));
            }
        }
    }
    out
}

/// `name`'s function in `lib`: plain, else versioned (`__name_13_0` ... `__name_12_0`).
fn symbol<T: Copy>(lib: &libloading::Library, name: &str) -> Option<T> {
    let mut names = vec![name.to_string()];
    for major in [13, 12] {
        for minor in (0..10).rev() {
            names.push(format!("__{name}_{major}_{minor}"));
        }
    }
    names.iter().find_map(|n| {
        // SAFETY: `T` is the function type nvJitLink.h declares for `name`.
        unsafe { lib.get::<T>(n.as_bytes()).ok().map(|s| *s) }
    })
}

fn open(path: PathBuf) -> Result<NvJitLink, String> {
    // SAFETY: loading NVIDIA's nvJitLink runs its initializers, which are NVIDIA's; the
    // library is the one the user installed or named.
    let lib = unsafe { libloading::Library::new(&path) }.map_err(|e| e.to_string())?;
    let missing = |n: &str| format!("{} has no {n}", path.display());
    Ok(NvJitLink {
        create: symbol(&lib, "nvJitLinkCreate").ok_or_else(|| missing("nvJitLinkCreate"))?,
        add_data: symbol(&lib, "nvJitLinkAddData").ok_or_else(|| missing("nvJitLinkAddData"))?,
        complete: symbol(&lib, "nvJitLinkComplete").ok_or_else(|| missing("nvJitLinkComplete"))?,
        cubin_size: symbol(&lib, "nvJitLinkGetLinkedCubinSize")
            .ok_or_else(|| missing("nvJitLinkGetLinkedCubinSize"))?,
        cubin: symbol(&lib, "nvJitLinkGetLinkedCubin")
            .ok_or_else(|| missing("nvJitLinkGetLinkedCubin"))?,
        log_size: symbol(&lib, "nvJitLinkGetErrorLogSize")
            .ok_or_else(|| missing("nvJitLinkGetErrorLogSize"))?,
        log: symbol(&lib, "nvJitLinkGetErrorLog").ok_or_else(|| missing("nvJitLinkGetErrorLog"))?,
        destroy: symbol(&lib, "nvJitLinkDestroy").ok_or_else(|| missing("nvJitLinkDestroy"))?,
        _lib: lib,
        path,
    })
}

fn load() -> Result<&'static NvJitLink, String> {
    static JIT: OnceLock<Result<NvJitLink, String>> = OnceLock::new();
    JIT.get_or_init(|| {
        let mut tried = Vec::new();
        for c in candidates() {
            match open(c.clone()) {
                Ok(j) => return Ok(j),
                Err(e) => tried.push(format!("{}: {e}", c.display())),
            }
        }
        Err(format!(
            "no PTX JIT: nvJitLink was not found (pip install nvidia-nvjitlink, install the CUDA \
             toolkit, or set \
             NVBARE_NVJITLINK=/path/to/libnvJitLink.so); tried {}",
            tried.len()
        ))
    })
    .as_ref()
    .map_err(|e| e.clone())
}

/// Where the JIT was loaded from, or why it was not.
pub fn location() -> Result<PathBuf, String> {
    load().map(|j| j.path.clone())
}

/// `ptx` (text, without a trailing NUL) compiled for `sm_<sm>`: [`JitError::NotFound`] without
/// nvJitLink, [`JitError::Compile`] with the JIT's log when it does not compile.
pub fn compile(ptx: &[u8], sm: u32) -> Result<Vec<u8>, JitError> {
    static CACHE: OnceLock<Mutex<Cache>> = OnceLock::new();
    let cache = CACHE.get_or_init(Mutex::default);
    let key = (ptx.to_vec(), sm);
    if let Some(c) = cache.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
        return Ok(c.clone());
    }
    let jit = load().map_err(JitError::NotFound)?;
    let cubin = link(jit, ptx, sm)?;
    cache
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(key, cubin.clone());
    Ok(cubin)
}

fn link(jit: &NvJitLink, ptx: &[u8], sm: u32) -> Result<Vec<u8>, JitError> {
    let arch = CString::new(format!("-arch=sm_{sm}")).map_err(|_| JitError::Compile {
        sm,
        log: "the target name".into(),
    })?;
    let opts = [arch.as_ptr()];
    let mut h: Handle = std::ptr::null_mut();
    let fail = |what: &str, r: i32| JitError::Compile {
        sm,
        log: format!("nvJitLink {what}: error {r}"),
    };
    // SAFETY: nvJitLink's C API used as nvJitLink.h documents: an out-handle, one option.
    let r = unsafe { (jit.create)(&mut h, 1, opts.as_ptr()) };
    if r != NVJITLINK_SUCCESS {
        return Err(fail("create", r));
    }
    let name = c"ptx";
    // SAFETY: `h` was created above; `ptx` is valid for `ptx.len()` bytes.
    let mut r = unsafe {
        (jit.add_data)(
            h,
            NVJITLINK_INPUT_PTX,
            ptx.as_ptr().cast(),
            ptx.len(),
            name.as_ptr(),
        )
    };
    if r == NVJITLINK_SUCCESS {
        // SAFETY: a live handle.
        r = unsafe { (jit.complete)(h) };
    }
    let out = if r == NVJITLINK_SUCCESS {
        let mut n = 0usize;
        // SAFETY: a live handle and an out-pointer to a `size_t`.
        let r = unsafe { (jit.cubin_size)(h, &mut n) };
        if r != NVJITLINK_SUCCESS || n == 0 || n > MAX_CUBIN {
            Err(fail("sizing the cubin", r))
        } else {
            let mut v = vec![0u8; n];
            // SAFETY: `v` holds the `n` bytes nvJitLink said the cubin has.
            let r = unsafe { (jit.cubin)(h, v.as_mut_ptr().cast()) };
            if r == NVJITLINK_SUCCESS {
                Ok(v)
            } else {
                Err(fail("getting the cubin", r))
            }
        }
    } else {
        let mut n = 0usize;
        // SAFETY: a live handle and an out-pointer to a `size_t`.
        unsafe { (jit.log_size)(h, &mut n) };
        let mut log = vec![0u8; n.min(1 << 20) + 1];
        if n > 0 && n < 1 << 20 {
            // SAFETY: `log` holds the `n` bytes (and a NUL) the log has.
            unsafe { (jit.log)(h, log.as_mut_ptr().cast()) };
        }
        let text = String::from_utf8_lossy(&log)
            .trim_end_matches('\0')
            .trim()
            .to_string();
        Err(JitError::Compile { sm, log: text })
    };
    // SAFETY: the handle created above, destroyed once.
    unsafe { (jit.destroy)(&mut h) };
    out
}
