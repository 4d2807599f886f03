//! Opens a GPU bound to vfio-pci and prints what it is, then unloads GSP-RM so the next boot
//! needs no reset:
//!
//! ```sh
//! nvbare bind 0000:01:00.0                         # hand the GPU to vfio-pci (docs/vfio.md)
//! cargo run --example vfio -- vfio:0000:01:00.0
//! ```
//!
//! Opening boots GSP-RM with the r570.144 firmware (fetched into the cache on first use) and
//! brings the device up bare metal; without VFIO (no IOMMU group, no permission) the error
//! says what to set up.

fn main() -> Result<(), nvbare::Error> {
    let Some(spec) = std::env::args().nth(1) else {
        eprintln!("usage: vfio vfio:DOMAIN:BUS:DEV.FN (e.g. vfio:0000:01:00.0)");
        std::process::exit(2);
    };
    let gpu = nvbare::open(&spec)?;
    let info = gpu.info();
    println!(
        "{}: {} (sm_{}), {} SMs, driver {}",
        gpu.name(),
        info.chip.name,
        info.sm,
        info.gr.sm_count(),
        info.driver_version.as_deref().unwrap_or("unknown")
    );
    gpu.close()
}
