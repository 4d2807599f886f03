//! The driver's state: the devices cuInit opened, and every handle given out (contexts,
//! streams, events, modules, functions, allocations). Handles are ids, never addresses of our
//! objects, so a stale or forged one is `CUDA_ERROR_INVALID_HANDLE`, not a crash.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use nvbare::{DeviceBuffer, DeviceSlice, Gpu, Module, Stream, VaWindow};

use crate::abi::*;
use crate::error::{CuResult, err};

/// Most streams each device is opened with (the default stream included); more CUDA streams
/// share them (`cuStreamCreate`).
pub const STREAMS_PER_DEVICE: u32 = 8;

/// One device behind a CUDA ordinal.
#[derive(Debug)]
pub struct DeviceSlot {
    /// The `NVBARE_DEVICE` entry it was opened from.
    pub spec: String,
    /// The open device.
    pub gpu: Gpu,
    /// The GPU VAs its memory gets: its slice of the default window ([`device_window`]).
    pub window: VaWindow,
    /// Its primary context and how many retains it has (`cuDevicePrimaryCtxRetain`).
    pub primary: Mutex<Option<(usize, u32)>>,
}

/// What cuInit opened.
#[derive(Debug)]
pub struct Driver {
    /// By CUDA ordinal.
    pub devices: Vec<DeviceSlot>,
}

static DRIVER: OnceLock<Result<Driver, (CUresult, String)>> = OnceLock::new();

/// Opens the devices once (`NVBARE_DEVICE`, else every GPU bound to vfio-pci); later calls
/// answer as the first did, as CUDA's cuInit does.
pub fn init() -> CuResult<&'static Driver> {
    let first = DRIVER.get().is_none();
    match DRIVER.get_or_init(open_devices) {
        Ok(d) => Ok(d),
        Err((code, why)) => Err(crate::error::CuError {
            quiet: !first,
            ..err(*code, why.clone())
        }),
    }
}

/// The driver, if cuInit succeeded.
pub fn driver() -> CuResult<&'static Driver> {
    match DRIVER.get() {
        Some(Ok(d)) => Ok(d),
        Some(Err((code, why))) => Err(crate::error::CuError {
            quiet: true,
            ..err(*code, format!("cuInit failed: {why}"))
        }),
        None => Err(err(
            CUDA_ERROR_NOT_INITIALIZED,
            "cuInit has not been called",
        )),
    }
}

/// The device with ordinal `dev`.
pub fn device(dev: CUdevice) -> CuResult<&'static DeviceSlot> {
    let d = driver()?;
    usize::try_from(dev)
        .ok()
        .and_then(|i| d.devices.get(i))
        .ok_or_else(|| {
            err(
                CUDA_ERROR_INVALID_DEVICE,
                format!("device {dev} (there are {})", d.devices.len()),
            )
        })
}

/// The device specs to open: `NVBARE_DEVICE`, else the GPUs bound to vfio-pci.
fn specs() -> Result<Vec<String>, String> {
    if let Ok(v) = std::env::var("NVBARE_DEVICE") {
        let specs: Vec<String> = v
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect();
        if specs.is_empty() {
            return Err("NVBARE_DEVICE is empty; set it to SPEC[,SPEC...] (e.g. sim:gh100)".into());
        }
        return Ok(specs);
    }
    let sysfs = nvbare_pci_host::Sysfs::from_env();
    let fns = sysfs
        .list_nvidia()
        .map_err(|e| format!("listing PCI devices: {e}"))?;
    let specs: Vec<String> = fns
        .iter()
        .filter(|f| f.is_gpu() && f.driver.as_deref() == Some("vfio-pci"))
        .map(|f| format!("vfio:{}", f.bdf))
        .collect();
    if specs.is_empty() {
        return Err(
            "no NVIDIA GPU is bound to vfio-pci; bind one (nvbare bind BDF) or set \
                    NVBARE_DEVICE=SPEC[,SPEC...] (e.g. sim:gh100, nvidia:0)"
                .into(),
        );
    }
    Ok(specs)
}

/// The GPU VA window of device `ordinal` of `count`: CUDA's address space is unified (no two
/// devices' pointers overlap), and each nvbare device has an address space of its own, so each
/// gets an equal, disjoint slice of [`VaWindow::DEFAULT`] (960 GiB: 480 GiB each for two
/// devices, 120 GiB for eight; at most 240 devices, each slice at least
/// `nvbare_core::device::VA_SLICE_MIN`).
pub fn device_window(ordinal: usize, count: usize) -> Result<VaWindow, String> {
    VaWindow::DEFAULT
        .slice(ordinal as u64, count as u64)
        .map_err(|e| format!("the GPU VA window of device {ordinal}: {e}"))
}

fn open_devices() -> Result<Driver, (CUresult, String)> {
    let specs = specs().map_err(|why| (CUDA_ERROR_NO_DEVICE, why))?;
    let count = specs.len();
    let mut devices = Vec::with_capacity(count);
    for (i, spec) in specs.into_iter().enumerate() {
        let window = device_window(i, count).map_err(|why| (CUDA_ERROR_NO_DEVICE, why))?;
        let opts = nvbare::Options::default()
            .streams(STREAMS_PER_DEVICE)
            .va_window(window);
        match nvbare::open_with(&spec, opts) {
            Ok(gpu) => {
                if crate::verbose() {
                    eprintln!("nvbare libcuda: device {i} is {spec}, memory at {window}");
                }
                devices.push(DeviceSlot {
                    spec,
                    gpu,
                    window,
                    primary: Mutex::new(None),
                })
            }
            Err(e) => {
                let ce = crate::error::CuError::from(e);
                return Err((ce.code, format!("opening {spec}: {}", ce.why)));
            }
        }
    }
    crate::at_exit(close_at_exit);
    Ok(Driver { devices })
}

/// Closes every device (registered by cuInit): a bare-metal GPU's GSP-RM is shut down.
extern "C" fn close_at_exit() {
    let _ = std::panic::catch_unwind(|| {
        if let Some(Ok(d)) = DRIVER.get() {
            for s in &d.devices {
                match s.gpu.clone().close() {
                    Err(e) => eprintln!("nvbare libcuda: closing {} at exit: {e}", s.spec),
                    Ok(()) if crate::verbose() => eprintln!("nvbare libcuda: {} closed", s.spec),
                    Ok(()) => {}
                }
            }
        }
    });
}

/// A context: a device and its default stream.
#[derive(Debug)]
pub struct Context {
    /// The device's ordinal.
    pub device: usize,
    /// The device.
    pub gpu: Gpu,
    /// Where work on the null stream goes.
    pub stream: Stream,
    /// Whether it is the device's primary context (destroyed only by its last release).
    pub primary: bool,
}

/// A CUDA stream: one of its device's nvbare streams (shared when there are more CUDA streams
/// than nvbare ones).
#[derive(Debug)]
pub struct StreamObj {
    /// The context it belongs to.
    pub ctx: usize,
    /// Where its work goes.
    pub stream: Stream,
    /// Its capture into a graph, if one is in progress (api/capture.rs).
    pub capture: Mutex<crate::api::Capture>,
}

/// A CUDA event.
#[derive(Debug)]
pub struct EventObj {
    /// `CU_EVENT_*` flags.
    pub flags: u32,
    /// The last record, if any: timed (a GPU time noted) unless made with
    /// `CU_EVENT_DISABLE_TIMING`.
    pub rec: Mutex<Option<nvbare::Event>>,
    /// Where it was last recorded in a stream capture, if it was (a stream that waits for it
    /// joins the capture: api/capture.rs).
    pub capture: Mutex<Option<crate::api::CaptureMark>>,
}

/// A loaded module.
#[derive(Debug)]
pub struct ModuleObj {
    /// The context it was loaded in.
    pub ctx: usize,
    /// Its device's shader model.
    pub sm: u32,
    /// The loaded image.
    pub module: Module,
    /// Functions handed out, by name (one handle per name, as CUDA's).
    pub functions: Mutex<HashMap<String, usize>>,
}

/// A kernel of a module.
#[derive(Debug)]
pub struct FuncObj {
    /// The module's handle.
    pub module: usize,
    /// Its device's shader model.
    pub sm: u32,
    /// The kernel.
    pub func: nvbare::Function,
    /// `CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES` as set.
    pub max_dynamic_shared: Mutex<u32>,
}

/// A device allocation (`cuMemAlloc`).
#[derive(Debug)]
pub struct Alloc {
    /// The device's ordinal.
    pub device: usize,
    /// The memory.
    pub buf: DeviceBuffer<u8>,
}

/// Host memory from `cuMemHostAlloc`.
#[derive(Debug)]
pub enum HostAlloc {
    /// A host-memory buffer of the context's device that this process reaches directly
    /// ([`nvbare::DeviceBuffer::host_ptr`]): copies between it and that device's memory run on
    /// the GPU, without staging, as NVIDIA's pinned memory does.
    Pinned(Arc<Alloc>),
    /// Plain page-aligned memory, where the device's host memory is not this process's
    /// (`remote:`) or could not be had: copies stage it like any host pointer. The pages are
    /// never touched by us while the caller owns them.
    Pages {
        /// The memory, kept until cuMemFreeHost.
        _pages: Vec<Page>,
    },
}

/// One page of host memory, for the alignment `cuMemHostAlloc` promises.
#[repr(C, align(4096))]
#[derive(Debug, Clone, Copy)]
pub struct Page(pub [u8; 4096]);

/// Every live handle.
#[derive(Debug, Default)]
pub struct Objects {
    next: usize,
    /// Contexts.
    pub contexts: HashMap<usize, Arc<Context>>,
    /// Streams.
    pub streams: HashMap<usize, Arc<StreamObj>>,
    /// Events.
    pub events: HashMap<usize, Arc<EventObj>>,
    /// Modules.
    pub modules: HashMap<usize, Arc<ModuleObj>>,
    /// Functions.
    pub functions: HashMap<usize, Arc<FuncObj>>,
    /// Device allocations by GPU VA.
    pub allocs: BTreeMap<u64, Arc<Alloc>>,
    /// Device variables of loaded modules by GPU VA, with their module's handle
    /// (cuModuleGetGlobal_v2; copies and memsets find them as they find allocations).
    pub globals: BTreeMap<u64, (usize, Arc<Alloc>)>,
    /// Host allocations by address.
    pub host: BTreeMap<usize, HostAlloc>,
    /// Graphs.
    pub graphs: HashMap<usize, Arc<crate::api::GraphObj>>,
    /// Instantiated graphs.
    pub execs: HashMap<usize, Arc<crate::api::GraphObj>>,
}

impl Objects {
    /// Why `len` bytes at `va` of device `device` cannot be recorded: outside the device's
    /// window, or overlapping memory already recorded (an allocation or module variable of any
    /// device). `None` when they can. Both mean an address was handed out twice, which would
    /// make a pointer of one device resolve to another's memory: refused, never overwritten.
    fn clash(&self, device: usize, va: u64, len: usize) -> Option<String> {
        let end = va.saturating_add((len as u64).max(1));
        if let Ok(slot) = self::device(device as CUdevice)
            && (va < slot.window.base() || end > slot.window.end())
        {
            return Some(format!(
                "{len} bytes at {va:#x} on device {device} ({}) are outside its {}",
                slot.spec, slot.window
            ));
        }
        // Recorded ranges never overlap one another, so only the nearest one starting below
        // `end` can overlap `[va, end)`.
        let near = |m: &BTreeMap<u64, Arc<Alloc>>| {
            m.range(..end).next_back().map(|(&b, a)| (b, a.clone()))
        };
        let alloc = near(&self.allocs);
        let global = self
            .globals
            .range(..end)
            .next_back()
            .map(|(&b, (_, a))| (b, a.clone()));
        [alloc, global].into_iter().flatten().find_map(|(b, a)| {
            let a_end = b.saturating_add((a.buf.len() as u64).max(1));
            (a_end > va).then(|| {
                format!(
                    "{len} bytes at {va:#x} on device {device} overlap {} bytes at {b:#x} on \
                     device {}: device addresses were handed out twice (each device has its own \
                     window; report this with NVBARE_CUDA_LOG=1's output)",
                    a.buf.len(),
                    a.device
                )
            })
        })
    }

    /// A new handle value: never 0 (null), 1 or 2 (`CU_STREAM_LEGACY`, `_PER_THREAD`).
    pub fn handle(&mut self) -> usize {
        self.next += 1;
        0x1000 + self.next * 0x10
    }
}

static OBJECTS: OnceLock<Mutex<Objects>> = OnceLock::new();

/// Records the device allocation `alloc` (`cuMemAlloc`) and returns its address, or refuses
/// it with `CUDA_ERROR_UNKNOWN` (always logged) when its range is outside its device's window
/// or overlaps recorded memory ([`Objects::clash`]); a refused allocation is freed.
pub fn record_alloc(alloc: Alloc) -> CuResult<CUdeviceptr> {
    let va = alloc.buf.gpu_va();
    let mut o = objects();
    if let Some(why) = o.clash(alloc.device, va, alloc.buf.len()) {
        // Freed after the table lock is let go (freeing may wait for the GPU).
        drop(o);
        drop(alloc);
        return Err(err(CUDA_ERROR_UNKNOWN, why));
    }
    o.allocs.insert(va, Arc::new(alloc));
    Ok(va)
}

/// Records the variable `alloc` of module `module` (`cuModuleGetGlobal`) unless it already
/// is, with the checks of [`record_alloc`].
pub fn record_global(module: usize, alloc: Alloc) -> CuResult<()> {
    let va = alloc.buf.gpu_va();
    let mut o = objects();
    if let Some((m, a)) = o.globals.get(&va)
        && *m == module
        && a.device == alloc.device
    {
        return Ok(());
    }
    if let Some(why) = o.clash(alloc.device, va, alloc.buf.len()) {
        drop(o);
        drop(alloc);
        return Err(err(CUDA_ERROR_UNKNOWN, why));
    }
    o.globals.insert(va, (module, Arc::new(alloc)));
    Ok(())
}

/// The handles, locked (briefly: nothing waits on the device while holding this).
pub fn objects() -> MutexGuard<'static, Objects> {
    OBJECTS
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

/// Looks `h` up in one of [`Objects`]' maps.
pub fn get<T>(
    map: impl FnOnce(&Objects) -> &HashMap<usize, Arc<T>>,
    h: usize,
    what: &str,
) -> CuResult<Arc<T>> {
    let o = objects();
    map(&o)
        .get(&h)
        .cloned()
        .ok_or_else(|| err(CUDA_ERROR_INVALID_HANDLE, format!("{what} {h:#x}")))
}

thread_local! {
    /// This thread's context stack (handles), top last.
    static CURRENT: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
}

/// The calling thread's current context handle, if any.
pub fn current_handle() -> Option<usize> {
    CURRENT.with(|c| c.borrow().last().copied())
}

/// Replaces the top of the stack (`None`: pops it).
pub fn set_current(h: Option<usize>) {
    CURRENT.with(|c| {
        let mut c = c.borrow_mut();
        c.pop();
        if let Some(h) = h {
            c.push(h);
        }
    });
}

/// Pushes `h`.
pub fn push_current(h: usize) {
    CURRENT.with(|c| c.borrow_mut().push(h));
}

/// Pops the top.
pub fn pop_current() -> Option<usize> {
    CURRENT.with(|c| c.borrow_mut().pop())
}

/// The current context.
pub fn current() -> CuResult<(usize, Arc<Context>)> {
    driver()?;
    let h =
        current_handle().ok_or_else(|| err(CUDA_ERROR_INVALID_CONTEXT, "no context is current"))?;
    let c = get(|o| &o.contexts, h, "context").map_err(|_| {
        err(
            CUDA_ERROR_CONTEXT_IS_DESTROYED,
            format!("the current context {h:#x} was destroyed"),
        )
    })?;
    Ok((h, c))
}

/// The nvbare stream a CUDA stream handle stands for (null, `CU_STREAM_LEGACY` and
/// `CU_STREAM_PER_THREAD`: the current context's default stream).
pub fn stream_of(h: CUstream) -> CuResult<Stream> {
    let h = h as usize;
    if h == 0 || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD {
        return Ok(current()?.1.stream.clone());
    }
    Ok(get(|o| &o.streams, h, "stream")?.stream.clone())
}

/// A byte range of device memory: the allocation holding `[ptr, ptr + len)`.
#[derive(Debug)]
pub struct DevRange {
    /// The allocation.
    pub alloc: Arc<Alloc>,
    /// Byte offset of `ptr` in it.
    pub offset: usize,
    /// Bytes.
    pub len: usize,
}

impl DevRange {
    /// The range as a slice of the buffer (copies and memsets take slices).
    pub fn slice(&self) -> CuResult<DeviceSlice<u8>> {
        Ok(self.alloc.buf.slice(self.offset..self.offset + self.len)?)
    }
}

/// The pinned host memory (`cuMemHostAlloc` on a device that gave a CPU pointer) holding
/// `[ptr, ptr + len)`, as a range of its device buffer; `None` for any other host memory.
pub fn pinned(ptr: usize, len: usize) -> Option<DevRange> {
    let o = objects();
    let (&base, h) = o.host.range(..=ptr).next_back()?;
    let HostAlloc::Pinned(a) = h else {
        return None;
    };
    let offset = ptr - base;
    let end = offset.checked_add(len)?;
    (end <= a.buf.len()).then(|| DevRange {
        alloc: a.clone(),
        offset,
        len,
    })
}

/// The allocation holding `[ptr, ptr + len)`: an address inside one resolves to a slice of
/// it, so pointer arithmetic works as on CUDA.
pub fn resolve(ptr: CUdeviceptr, len: usize) -> CuResult<DevRange> {
    let o = objects();
    let bad = || {
        err(
            CUDA_ERROR_INVALID_VALUE,
            format!(
                "{len} bytes at {ptr:#x} are not inside one allocation (cuMemAlloc) or module \
                 variable"
            ),
        )
    };
    let alloc = o.allocs.range(..=ptr).next_back();
    let global = o
        .globals
        .range(..=ptr)
        .next_back()
        .map(|(b, (_, a))| (b, a));
    // The nearer of the two below `ptr` is the only one that can hold it.
    let (base, a) = match (alloc, global) {
        (Some(x), Some(g)) => {
            if g.0 > x.0 {
                g
            } else {
                x
            }
        }
        (x, g) => x.or(g).ok_or_else(bad)?,
    };
    let offset = usize::try_from(ptr - base).map_err(|_| bad())?;
    let end = offset.checked_add(len).ok_or_else(bad)?;
    if end > a.buf.len() || (len == 0 && offset >= a.buf.len()) {
        return Err(bad());
    }
    Ok(DevRange {
        alloc: a.clone(),
        offset,
        len,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_windows_are_disjoint_slices_of_the_default() {
        for count in [1, 2, 3, 8] {
            let w: Vec<VaWindow> = (0..count)
                .map(|i| device_window(i, count).unwrap())
                .collect();
            for (i, a) in w.iter().enumerate() {
                assert!(VaWindow::DEFAULT.contains(a), "{a}");
                for b in &w[i + 1..] {
                    assert!(!a.overlaps(b), "{a} and {b}");
                }
            }
        }
        assert_eq!(device_window(0, 1).unwrap(), VaWindow::DEFAULT);
        let e = device_window(0, 241).unwrap_err();
        assert!(e.contains("open fewer devices"), "{e}");
    }
}
