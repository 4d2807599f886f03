//! Opening a `--device`: the library's code path ([`nvbare::backend::open`]), and what the
//! CLI needs from a backend beyond it ([`CliBackend`]).

use nvbare::backend::baremetal::{RemoteBareMetal, VfioBareMetal};
use nvbare_core::device::Backend;
use nvbare_core::rm::Handle;
use nvbare_sim::baremetal::SimBareMetal;

pub use nvbare::backend::open::*;

/// What the CLI needs from a backend beyond [`Backend`].
pub trait CliBackend: Backend {
    /// Pauses the GPU side of channel `channel`, so that launches can be timed without any GPU
    /// work in between (the simulator can; real hardware cannot and returns `false`).
    fn pause_channel(&self, channel: Handle) -> bool {
        let _ = channel;
        false
    }

    /// Undoes [`CliBackend::pause_channel`].
    fn resume_channel(&self, channel: Handle) {
        let _ = channel;
    }

    /// Whether this is real hardware (timings mean something).
    fn is_hardware(&self) -> bool {
        false
    }

    /// What a bare-metal backend set up (GSP-RM, page tables, memory), for `nvbare demo`.
    fn bare_metal_summary(&self) -> Vec<String> {
        Vec::new()
    }

    /// The page-table counters of a bare-metal backend.
    fn page_table_stats(&self) -> Option<String> {
        None
    }
}

#[cfg(feature = "nvidia-kmod")]
impl CliBackend for nvbare_pci_host::nvidia::KernelBackend {
    fn is_hardware(&self) -> bool {
        true
    }
}

impl CliBackend for SimBareMetal {
    fn bare_metal_summary(&self) -> Vec<String> {
        nvbare::backend::baremetal::summary(self)
    }
    fn page_table_stats(&self) -> Option<String> {
        Some(nvbare::backend::baremetal::page_table_stats(self))
    }
}

impl CliBackend for VfioBareMetal {
    fn is_hardware(&self) -> bool {
        true
    }
    fn bare_metal_summary(&self) -> Vec<String> {
        nvbare::backend::baremetal::summary(self)
    }
    fn page_table_stats(&self) -> Option<String> {
        Some(nvbare::backend::baremetal::page_table_stats(self))
    }
}

// The server may be a simulator (`nvbare serve --device sim:CHIP`) or a real GPU; nothing in
// the protocol tells them apart, so timings are not taken to mean anything.
impl CliBackend for RemoteBareMetal {
    fn bare_metal_summary(&self) -> Vec<String> {
        nvbare::backend::baremetal::summary(self)
    }
    fn page_table_stats(&self) -> Option<String> {
        Some(nvbare::backend::baremetal::page_table_stats(self))
    }
}
