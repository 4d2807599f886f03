//! # nvbare embedder skeleton (x86_64-unknown-none)
//!
//! What an OS or unikernel writes to run nvbare's bare-metal driver: the `hal` traits over the
//! addresses the OS provides ([`platform`]), a heap for the `device` feature ([`heap`]), a
//! console ([`console`]), and the calls that boot GSP-RM and open a [`Device`]
//! ([`nvbare_embedder_main`]). docs/embedding.md explains each requirement.
//!
//! **This is a skeleton. It builds (CI builds it for `x86_64-unknown-none`) but cannot run
//! here**: there is no GPU, and nothing fills in [`PlatformInfo`]. Its MMIO, DMA, PCI and
//! clock implementations are volatile accesses to addresses that the embedder's OS must map
//! and hand over (BARs, ECAM, one DMA range, the TSC rate, the firmware files); the OS also
//! owns everything this file does not do: PCI enumeration, BAR placement, page tables,
//! IOMMU programming, interrupts (nvbare polls), a scheduler. The bare-metal path as a whole
//! has run only on nvbare's simulated GPU, never on a real GPU (docs/vfio.md, docs/boot.md).
//!
//! Entry: a loader jumps to `_start` with a pointer to a [`PlatformInfo`] in `rdi` (the
//! System V convention) and a stack; a kernel that links this code in calls
//! [`nvbare_embedder_main`] instead.
#![no_std]
#![no_main]

extern crate alloc;

pub mod console;
pub mod heap;
pub mod platform;

use core::panic::PanicInfo;

use nvbare_core::chip::identify_mmio;
use nvbare_core::device::baremetal::{BareHw, BareMetalBackend, BareMetalOptions};
use nvbare_core::device::{Device, DeviceOptions};
use nvbare_core::gsp::boot::{BootHw, BootOptions, RunningGsp, SystemAddrs, boot};
use nvbare_gsp_firmware::FirmwareSet;
use nvbare_gsp_firmware::boot::ReadError;

use console::{ConsoleObserver, println};
use platform::{ArenaDma, EcamConfig, Embedder, PhysMmio, PlatformInfo, TscClock};

/// Exit codes of [`nvbare_embedder_main`].
mod code {
    pub const OK: i32 = 0;
    pub const NO_INFO: i32 = 1;
    pub const DMA_RANGE: i32 = 2;
    pub const NOT_A_GPU: i32 = 3;
    pub const FIRMWARE: i32 = 4;
    pub const BOOT: i32 = 5;
    pub const UNLOAD: i32 = 6;
    pub const BACKEND: i32 = 7;
    pub const DEVICE: i32 = 8;
    pub const COPY: i32 = 9;
}

/// Boots GSP-RM on the GPU `info` describes, unloads it, then opens the bare-metal backend and
/// a [`Device`] on it, copies data through the GPU and closes everything again. Returns 0 or
/// a code saying which step failed (the console says why).
///
/// # Safety
///
/// `info` must point at a [`PlatformInfo`] whose addresses are mapped as its fields describe,
/// and whose DMA range and BARs nothing else uses while this runs.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvbare_embedder_main(info: *const PlatformInfo) -> i32 {
    // SAFETY: the caller's contract.
    let Some(info) = (unsafe { info.as_ref() }) else {
        return code::NO_INFO;
    };
    console::init_logger();

    // The hal view of the GPU. Both BARs uncached here; pass `true` for a write-combined BAR1.
    // SAFETY: the caller's contract on `info` (BAR0 mapped uncached).
    let bar0 = unsafe { PhysMmio::new(info.bar0_virt, info.bar0_size, false) };
    // SAFETY: as above (BAR1 mapped uncached).
    let bar1 = unsafe { PhysMmio::new(info.bar1_virt, info.bar1_size, false) };
    // SAFETY: as above (the function's ECAM page).
    let pci = unsafe { EcamConfig::new(info.config_virt) };
    // SAFETY: as above (a DMA range used by nothing else).
    let Ok(dma) = (unsafe { ArenaDma::init(info.dma_virt, info.dma_bus, info.dma_size) }) else {
        return code::DMA_RANGE;
    };
    let clock = TscClock::new(info.tsc_hz);
    let hw: BareHw<Embedder> = BootHw {
        bar0,
        dma,
        clock,
        pci,
    };

    // Which chip, and its r570.144 firmware (checked against the pinned SHA-256 and parsed).
    let chip = match identify_mmio(&hw.bar0) {
        Ok(c) => c,
        Err(e) => {
            println(format_args!("not a supported NVIDIA GPU: {e}"));
            return code::NOT_A_GPU;
        }
    };
    println(format_args!("found {chip}"));
    let fw = match FirmwareSet::load(chip.chipset(), |path| {
        // SAFETY: the caller's contract on `info`.
        match unsafe { info.firmware_file(path) } {
            Some(bytes) => Ok(bytes.to_vec()),
            None => Err(ReadError::NotFound),
        }
    }) {
        Ok(f) => f,
        Err(e) => {
            println(format_args!("firmware: {e}"));
            return code::FIRMWARE;
        }
    };

    // What GSP-RM is told about the system (GspSystemInfo): bus addresses and the BDF.
    let boot_opts = BootOptions {
        addrs: SystemAddrs {
            bar0: info.bar0_bus,
            bar1: info.bar1_bus,
            bar3: info.bar3_bus,
            bdf: (info.bus as u64) << 8 | (info.device as u64) << 3 | info.function as u64,
        },
        // A GSP left running by an earlier boot is refused (`Reset` needs
        // `PciConfig::reset_function`, which this skeleton does not implement).
        running_gsp: RunningGsp::Refuse,
        ..BootOptions::default()
    };
    let mut obs = ConsoleObserver;

    // 1. GSP-RM on its own: boot, talk to it over RPC, unload. (A real embedder does 1 or 2;
    // this skeleton shows both, which boots twice: a second boot without a reset is what
    // docs/boot.md calls unverified on Hopper and Blackwell.)
    match boot(&hw, &fw, &boot_opts, &mut obs) {
        Ok(mut gsp) => {
            let si = gsp.static_info();
            println(format_args!(
                "GSP-RM up: internal client {:#x}, {} FB regions",
                si.hInternalClient, si.fbRegionInfoParams.numFBRegions
            ));
            // gsp.rpc() is the transport: rm_alloc / rm_control / events (docs/gsp-rpc.md).
            let _rpc = gsp.rpc();
            if let Err(e) = gsp.unload(&hw, &mut obs, None) {
                println(format_args!("unload: {e}"));
                return code::UNLOAD;
            }
        }
        Err(e) => {
            // The observer already printed the report (registers, GSP log lines).
            println(format_args!("boot: {e}"));
            return code::BOOT;
        }
    }

    // 2. The whole driver: the bare-metal backend (boot, BAR1 in physical mode, our page
    // tables, RM client, golden context) and the device layer over it.
    let opts = BareMetalOptions {
        label: alloc::format!(
            "pci:{:02x}:{:02x}.{} ({}, bare metal)",
            info.bus,
            info.device,
            info.function,
            chip.info.name
        ),
        ..BareMetalOptions::default()
    };
    let backend =
        match BareMetalBackend::<Embedder>::open(hw, bar1, &fw, &boot_opts, &mut obs, opts) {
            Ok(b) => b,
            Err(e) => {
                println(format_args!("bare-metal backend: {e}"));
                return code::BACKEND;
            }
        };
    let dev = match Device::open(backend, DeviceOptions::default()) {
        Ok(d) => d,
        Err(e) => {
            println(format_args!("device: {e}"));
            return code::DEVICE;
        }
    };
    let data: [u32; 1024] = core::array::from_fn(|i| i as u32 * 3);
    let ok = dev
        .htod_copy(&data)
        .and_then(|buf| dev.dtoh_copy(&buf))
        .map(|back| back[..] == data[..]);
    println(format_args!("copy through the GPU: {ok:?}"));
    // Closing the device hands the backend back; unloading it shuts GSP-RM down so the next
    // boot needs no reset (dropping the backend does the same).
    let result = match dev.close() {
        Ok(backend) => match backend.unload(&mut obs) {
            Ok(_) => code::OK,
            Err(e) => {
                println(format_args!("unload: {e}"));
                code::UNLOAD
            }
        },
        Err(e) => {
            println(format_args!("close: {e}"));
            code::DEVICE
        }
    };
    match ok {
        Ok(true) => result,
        _ => code::COPY,
    }
}

/// The loader's entry point: `rdi` holds the [`PlatformInfo`] pointer.
///
/// # Safety
///
/// As [`nvbare_embedder_main`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn _start(info: *const PlatformInfo) -> ! {
    // SAFETY: the loader's contract is ours.
    let code = unsafe { nvbare_embedder_main(info) };
    println(format_args!("nvbare embedder skeleton: exit code {code}"));
    halt()
}

fn halt() -> ! {
    loop {
        // SAFETY: `hlt` waits for an interrupt; nothing else.
        unsafe { core::arch::asm!("hlt", options(nomem, nostack)) };
    }
}

#[panic_handler]
fn panic(info: &PanicInfo<'_>) -> ! {
    println(format_args!("panic: {info}"));
    halt()
}
