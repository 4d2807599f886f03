//! Modules (cubins, fatbins, PTX through the JIT) and their functions.

use std::ffi::{c_char, c_int, c_uint, c_void};
use std::sync::{Arc, Mutex};

use nvbare::Module;

use super::{cstr, handle, host, id, put};
use crate::abi::*;
use crate::entry;
use crate::error::{CuError, CuResult, err, null};
use crate::image::{self, Chosen, Kind};
use crate::state::{self, Context, FuncObj, ModuleObj};

/// Dynamic shared memory a launch may use without `CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES`
/// (48 KiB, less the kernel's static shared memory).
const DEFAULT_SHARED: u32 = 48 * 1024;

/// The image the caller passed, its size read from its own header.
///
/// # Safety
///
/// `p` is null or points at a whole cubin, fatbin, `__fatBinC_Wrapper_t` or NUL-terminated
/// PTX (what cuModuleLoadData accepts).
unsafe fn image_at<'a>(p: *const c_void, depth: u32) -> CuResult<(Kind, &'a [u8])> {
    if p.is_null() {
        return Err(null("image"));
    }
    let b = p.cast::<u8>();
    let (mut prefix, mut n) = ([0u8; 4], 0usize);
    while n < 4 {
        // SAFETY: every accepted image is at least 4 bytes long or ends at a NUL sooner, and
        // reading stops at the first NUL.
        let c = unsafe { b.add(n).read() };
        if c == 0 {
            break;
        }
        prefix[n] = c;
        n += 1;
    }
    let k = image::kind(&prefix[..n]);
    // The header sizes below are those of the kind the magic names; the sizes read from them
    // are bounded by `image::MAX_IMAGE`; the caller's image is that long (cuModuleLoadData's
    // contract).
    let bytes = match k {
        Kind::Elf => {
            // SAFETY: an ELF image holds its 64-byte header.
            let h = unsafe { host(p, 64, "image")? };
            let (off, len) = image::elf_section_table(h)?;
            // SAFETY: and its section header table, where the header says.
            let sh = unsafe { host(b.add(off).cast(), len, "image")? };
            let size = image::elf_size(h, sh)?;
            // SAFETY: and every section the table names.
            unsafe { host(p, size, "image")? }
        }
        Kind::Fatbin => {
            // SAFETY: a fatbin holds its 16-byte header...
            let size = image::fatbin_size(unsafe { host(p, 16, "image")? })?;
            // SAFETY: ...and the entries it counts.
            unsafe { host(p, size, "image")? }
        }
        Kind::Wrapper if depth == 0 => {
            // SAFETY: a `__fatBinC_Wrapper_t` is 24 bytes; its pointer is at 8.
            let w = unsafe { host(p, 16, "image")? };
            let data = u64::from_le_bytes(w[8..16].try_into().unwrap_or_default());
            // SAFETY: the wrapper's data pointer points at the fatbin.
            return unsafe { image_at(data as usize as *const c_void, 1) };
        }
        Kind::Wrapper => return Err(err(CUDA_ERROR_INVALID_IMAGE, "a wrapper inside a wrapper")),
        // SAFETY: anything else must be NUL-terminated text.
        Kind::Text => unsafe { super::cstr(p.cast(), "image") }
            .map(str::as_bytes)
            .map_err(|_| {
                err(
                    CUDA_ERROR_INVALID_IMAGE,
                    "neither a cubin, a fatbin nor PTX text",
                )
            })?,
    };
    Ok((k, bytes))
}

/// Loads an image of kind `k` in context `ctx`.
fn load(ctx: &Context, k: Kind, bytes: &[u8]) -> CuResult<Module> {
    let sm = ctx.gpu.info().sm;
    let cubin = match k {
        Kind::Elf => return Ok(ctx.gpu.load_cubin(bytes)?),
        Kind::Fatbin => match image::choose(bytes, sm)? {
            Chosen::Cubin(c) => return Ok(ctx.gpu.load_cubin(c)?),
            Chosen::Ptx(p) => {
                let end = p.iter().rposition(|&c| c != 0).map_or(0, |e| e + 1);
                crate::jit::compile(&p[..end], sm)?
            }
        },
        Kind::Text if image::is_ptx(bytes) => crate::jit::compile(bytes, sm)?,
        _ => {
            return Err(err(
                CUDA_ERROR_INVALID_IMAGE,
                "neither a cubin, a fatbin nor PTX",
            ));
        }
    };
    Ok(ctx.gpu.load_cubin(&cubin)?)
}

/// Writes `e`'s reason to the caller's `CU_JIT_ERROR_LOG_BUFFER`, if it gave one.
///
/// # Safety
///
/// `options` and `values` are null or hold `n` entries, as cuModuleLoadDataEx takes them.
unsafe fn error_log(n: c_uint, options: *const c_int, values: *const *mut c_void, e: &CuError) {
    if options.is_null() || values.is_null() || n == 0 || n > 64 {
        return;
    }
    // SAFETY: `n` options and values by this function's contract.
    let (o, v) = unsafe {
        (
            std::slice::from_raw_parts(options, n as usize),
            std::slice::from_raw_parts(values, n as usize),
        )
    };
    let find = |k| o.iter().position(|&x| x == k).map(|i| v[i]);
    let (Some(buf), Some(size)) = (
        find(CU_JIT_ERROR_LOG_BUFFER),
        find(CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES),
    ) else {
        return;
    };
    let size = (size as usize).min(1 << 20);
    if buf.is_null() || size == 0 {
        return;
    }
    // SAFETY: the caller's log buffer of `size` bytes (CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES).
    if let Ok(out) = unsafe { super::host_mut(buf, size, "log") } {
        let n = e.why.len().min(size - 1);
        out[..n].copy_from_slice(&e.why.as_bytes()[..n]);
        out[n] = 0;
    }
}

fn module_of(m: CUmodule) -> CuResult<Arc<ModuleObj>> {
    state::get(|o| &o.modules, id(m), "module")
}

/// The function behind a `CUfunction`.
pub(crate) fn function_of(f: CUfunction) -> CuResult<Arc<FuncObj>> {
    state::get(|o| &o.functions, id(f), "function")
}

/// # Safety
///
/// As [`image_at`], and `module` null or valid for a write.
unsafe fn load_data(
    module: *mut CUmodule,
    image: *const c_void,
    n: c_uint,
    options: *const c_int,
    values: *const *mut c_void,
) -> CuResult<()> {
    let (ch, ctx) = state::current()?;
    if module.is_null() {
        return Err(null("module"));
    }
    // SAFETY: the caller's image (cuModuleLoadData's contract).
    let r = unsafe { image_at(image, 0) }.and_then(|(k, bytes)| load(&ctx, k, bytes));
    let m = match r {
        Ok(m) => m,
        Err(e) => {
            // SAFETY: the caller's option arrays.
            unsafe { error_log(n, options, values, &e) };
            return Err(e);
        }
    };
    let mut o = state::objects();
    let h = o.handle();
    o.modules.insert(
        h,
        Arc::new(ModuleObj {
            ctx: ch,
            sm: ctx.gpu.info().sm,
            module: m,
            functions: Mutex::default(),
        }),
    );
    drop(o);
    // SAFETY: the caller's out-pointer (checked non-null above).
    unsafe { put(module, handle(h), "module") }
}

entry! {
    /// A cubin, a fatbin (the cubin for the device's SM, else its PTX) or PTX.
    fn cuModuleLoadData(module: *mut CUmodule, image: *const c_void) {
        // SAFETY: the caller's arguments.
        unsafe { load_data(module, image, 0, std::ptr::null(), std::ptr::null()) }
    }

    /// As cuModuleLoadData; of the JIT options only the error log buffer is used.
    fn cuModuleLoadDataEx(
        module: *mut CUmodule,
        image: *const c_void,
        num_options: c_uint,
        options: *const c_int,
        values: *const *mut c_void,
    ) {
        // SAFETY: the caller's arguments.
        unsafe { load_data(module, image, num_options, options, values) }
    }

    fn cuModuleLoadFatBinary(module: *mut CUmodule, fat: *const c_void) {
        // SAFETY: the caller's arguments.
        unsafe { load_data(module, fat, 0, std::ptr::null(), std::ptr::null()) }
    }

    /// A cubin, fatbin or PTX file.
    fn cuModuleLoad(module: *mut CUmodule, fname: *const c_char) {
        // SAFETY: the caller's NUL-terminated file name.
        let path = unsafe { cstr(fname, "fname")? };
        let mut bytes = std::fs::read(path)
            .map_err(|e| err(CUDA_ERROR_FILE_NOT_FOUND, format!("{path}: {e}")))?;
        bytes.push(0);
        // SAFETY: the whole file, NUL-terminated, lives until the call returns.
        unsafe { load_data(module, bytes.as_ptr().cast(), 0, std::ptr::null(), std::ptr::null()) }
    }

    fn cuModuleUnload(module: CUmodule) {
        state::driver()?;
        let mut o = state::objects();
        let h = id(module);
        let m = o.modules
            .remove(&h)
            .ok_or_else(|| err(CUDA_ERROR_INVALID_HANDLE, format!("module {h:#x}")))?;
        let functions: Vec<_> = o.functions.extract_if(|_, f| f.module == h).collect();
        let globals: Vec<_> = o.globals.extract_if(.., |_, (gm, _)| *gm == h).collect();
        // The image is freed (which may wait for the GPU) after the table lock is let go.
        drop(o);
        drop((functions, globals, m));
        Ok(())
    }

    fn cuModuleGetFunction(hfunc: *mut CUfunction, module: CUmodule, name: *const c_char) {
        state::driver()?;
        let m = module_of(module)?;
        // SAFETY: the caller's NUL-terminated kernel name.
        let name = unsafe { cstr(name, "name")? };
        if hfunc.is_null() {
            return Err(null("hfunc"));
        }
        let mut fns = m.functions.lock().unwrap_or_else(|e| e.into_inner());
        let h = match fns.get(name) {
            Some(&h) => h,
            None => {
                let func = m.module.function(name)?;
                let static_shared = func.info().shared_size;
                let mut o = state::objects();
                let h = o.handle();
                o.functions.insert(
                    h,
                    Arc::new(FuncObj {
                        module: id(module),
                        sm: m.sm,
                        func,
                        max_dynamic_shared: Mutex::new(DEFAULT_SHARED.saturating_sub(static_shared)),
                    }),
                );
                fns.insert(name.to_string(), h);
                h
            }
        };
        // SAFETY: the caller's out-pointer (checked non-null above).
        unsafe { put(hfunc, handle(h), "hfunc") }
    }

    /// The device variable `name` of `module`: its address and size (either out-pointer may
    /// be null). The address works with every copy and memset while the module is loaded.
    fn cuModuleGetGlobal_v2(
        dptr: *mut CUdeviceptr,
        bytes: *mut usize,
        module: CUmodule,
        name: *const c_char,
    ) {
        state::driver()?;
        let m = module_of(module)?;
        // SAFETY: the caller's NUL-terminated variable name.
        let name = unsafe { cstr(name, "name")? };
        let buf = m.module.global::<u8>(name)?;
        let (va, len) = (buf.gpu_va(), buf.len());
        let device = state::get(|o| &o.contexts, m.ctx, "context")?.device;
        state::objects()
            .globals
            .entry(va)
            .or_insert_with(|| (id(module), Arc::new(state::Alloc { device, buf })));
        if !dptr.is_null() {
            // SAFETY: the caller's out-pointer (non-null).
            unsafe { put(dptr, va as CUdeviceptr, "dptr")? };
        }
        if !bytes.is_null() {
            // SAFETY: the caller's out-pointer (non-null).
            unsafe { put(bytes, len, "bytes")? };
        }
        Ok(())
    }

    fn cuFuncGetAttribute(pi: *mut c_int, attrib: c_int, hfunc: CUfunction) {
        let f = function_of(hfunc)?;
        let k = f.func.info();
        let sm = f.sm as c_int;
        let v = match attrib {
            CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK => k.max_threads.unwrap_or(1024).min(1024) as c_int,
            CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES => k.shared_size as c_int,
            CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES => {
                k.const_banks.iter().map(|b| b.size).sum::<u64>().min(i32::MAX as u64) as c_int
            }
            CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES => k.local_size as c_int,
            CU_FUNC_ATTRIBUTE_NUM_REGS => k.regcount as c_int,
            CU_FUNC_ATTRIBUTE_PTX_VERSION | CU_FUNC_ATTRIBUTE_BINARY_VERSION => sm,
            CU_FUNC_ATTRIBUTE_CACHE_MODE_CA => 0,
            CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES => {
                *f.max_dynamic_shared.lock().unwrap_or_else(|e| e.into_inner()) as c_int
            }
            CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT => -1,
            _ => return Err(err(CUDA_ERROR_INVALID_VALUE, format!("function attribute {attrib}"))),
        };
        // SAFETY: the caller's out-pointer.
        unsafe { put(pi, v, "pi") }
    }

    /// `CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES` (up to the device's opt-in limit
    /// less the kernel's static shared memory) and the carveout hint.
    fn cuFuncSetAttribute(hfunc: CUfunction, attrib: c_int, value: c_int) {
        let f = function_of(hfunc)?;
        match attrib {
            CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES => {
                let (_, ctx) = state::current()?;
                let optin = super::device::attribute(
                    ctx.gpu.info(),
                    CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                )
                .unwrap_or(0);
                let limit = optin.saturating_sub(f.func.info().shared_size as c_int);
                if value < 0 || value > limit {
                    return Err(err(CUDA_ERROR_INVALID_VALUE, format!("{value} bytes (at most {limit})")));
                }
                *f.max_dynamic_shared.lock().unwrap_or_else(|e| e.into_inner()) = value as u32;
                Ok(())
            }
            CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT if (-1..=100).contains(&value) => Ok(()),
            _ => Err(err(CUDA_ERROR_INVALID_VALUE, format!("attribute {attrib} = {value}"))),
        }
    }

    /// A hint: the device layer sizes the SM's shared memory for each launch.
    fn cuFuncSetCacheConfig(hfunc: CUfunction, config: c_int) {
        let _ = config;
        function_of(hfunc).map(|_| ())
    }
}
