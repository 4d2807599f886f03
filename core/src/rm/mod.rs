//! The Resource Manager API as data.
//!
//! GSP-RM (bare metal, over the message queue) and the nvidia kernel driver (through ioctls)
//! speak the same object model: a client owns a tree of objects, each created with
//! `alloc(parent, class, params)`, driven with `control(object, cmd, params)` and destroyed
//! with `free`. The [`Rm`] trait is that model; param structs are raw bytes in the layout of
//! the RM on the other side, which [`RmAbi`] names (layouts differ between r570 and r580).

use core::fmt;

pub mod alloc;
pub mod class;
pub mod ctrl;
pub mod describe;
mod status_consts;
mod status_table;

/// An RM object handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Handle(pub u32);

impl fmt::Display for Handle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#010x}", self.0)
    }
}

/// Which RM release's struct layouts an [`Rm`] speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RmAbi {
    /// GSP-RM firmware r570.144 (linux-firmware), the bare-metal path.
    R570,
    /// The nvidia kernel driver r580 (tested: open module 580.159.04).
    R580,
}

/// An `NV_STATUS` value returned by RM.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct RmStatus(pub u32);

impl RmStatus {
    /// `NV_OK`.
    pub const OK: RmStatus = RmStatus(0);

    /// NVIDIA's name, e.g. `NV_ERR_INVALID_ARGUMENT`, when the code is known.
    pub fn name(self) -> Option<&'static str> {
        self.lookup().map(|(_, n, _)| n)
    }

    /// NVIDIA's one-line description, when the code is known.
    pub fn description(self) -> Option<&'static str> {
        self.lookup().map(|(_, _, d)| d)
    }

    fn lookup(self) -> Option<(u32, &'static str, &'static str)> {
        let t = status_table::STATUS_CODES;
        t.binary_search_by_key(&self.0, |e| e.0).ok().map(|i| t[i])
    }

    /// Whether this is `NV_OK`.
    pub fn is_ok(self) -> bool {
        self.0 == 0
    }
}

impl fmt::Debug for RmStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => write!(f, "{n}({:#x})", self.0),
            None => write!(f, "RmStatus({:#x})", self.0),
        }
    }
}

impl fmt::Display for RmStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.lookup() {
            Some((_, n, d)) => write!(f, "{n} ({:#x}: {d})", self.0),
            None => write!(f, "unknown RM status {:#x}", self.0),
        }
    }
}

/// The RM call that failed, for error messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RmOp {
    /// `alloc(parent, class)`.
    Alloc {
        /// Parent object.
        parent: Handle,
        /// Class id.
        class: u32,
    },
    /// `control(object, cmd)`.
    Control {
        /// Target object.
        object: Handle,
        /// Control command.
        cmd: u32,
    },
    /// `free(object)`.
    Free {
        /// Object freed.
        object: Handle,
    },
}

impl fmt::Display for RmOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            RmOp::Alloc { parent, class } => match class::class_name(class) {
                Some(n) => write!(f, "alloc {n} ({class:#x}) under {parent}"),
                None => write!(f, "alloc class {class:#x} under {parent}"),
            },
            RmOp::Control { object, cmd } => write!(f, "control {cmd:#010x} on {object}"),
            RmOp::Free { object } => write!(f, "free {object}"),
        }
    }
}

/// Why an RM call failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RmError {
    /// RM ran the call and returned a failure status.
    Status {
        /// The call.
        op: RmOp,
        /// RM's status.
        status: RmStatus,
    },
    /// The transport to RM failed (ioctl error, message-queue failure).
    Transport {
        /// The call.
        op: RmOp,
        /// What failed, in words.
        what: &'static str,
        /// An OS error number, if the transport is a system call.
        errno: Option<i32>,
    },
    /// RM did not answer in time.
    Timeout {
        /// The call.
        op: RmOp,
    },
    /// A param buffer had the wrong size for this RM's layout.
    ParamSize {
        /// The call.
        op: RmOp,
        /// Bytes given.
        got: usize,
        /// Bytes this RM's layout needs.
        expected: usize,
    },
}

impl RmError {
    /// The RM status, if RM itself reported the failure.
    pub fn status(&self) -> Option<RmStatus> {
        match self {
            RmError::Status { status, .. } => Some(*status),
            _ => None,
        }
    }
}

impl fmt::Display for RmError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RmError::Status { op, status } => write!(f, "RM {op} failed: {status}"),
            RmError::Transport {
                op,
                what,
                errno: Some(e),
            } => {
                write!(f, "RM {op}: {what} (os error {e})")
            }
            RmError::Transport {
                op,
                what,
                errno: None,
            } => write!(f, "RM {op}: {what}"),
            RmError::Timeout { op } => write!(
                f,
                "RM {op}: no reply in time (the GPU or its firmware may be hung; check the \
                 GSP log and consider a reset)"
            ),
            RmError::ParamSize { op, got, expected } => write!(
                f,
                "RM {op}: param struct is {got} bytes, this RM expects {expected} (driver \
                 version mismatch)"
            ),
        }
    }
}

impl core::error::Error for RmError {}

/// The Resource Manager: allocate, control and free objects in one client's tree.
///
/// `params` are the class's or command's param struct as bytes, in the layout of [`Rm::abi`];
/// RM may write results back into them.
pub trait Rm {
    /// The client (root) handle that owns every object this `Rm` creates.
    fn client(&self) -> Handle;

    /// Which struct layouts this RM expects.
    fn abi(&self) -> RmAbi;

    /// Allocates an object of `class` under `parent` and returns its handle.
    fn alloc(&mut self, parent: Handle, class: u32, params: &mut [u8]) -> Result<Handle, RmError>;

    /// Runs control command `cmd` on `object`.
    fn control(&mut self, object: Handle, cmd: u32, params: &mut [u8]) -> Result<(), RmError>;

    /// Frees `object` and everything under it.
    fn free(&mut self, object: Handle) -> Result<(), RmError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_table_is_sorted_and_named() {
        let t = status_table::STATUS_CODES;
        assert!(t.windows(2).all(|w| w[0].0 < w[1].0));
        assert_eq!(RmStatus(0x1f).name(), Some("NV_ERR_INVALID_ARGUMENT"));
        assert_eq!(
            RmStatus(0x1b).name(),
            Some("NV_ERR_INSUFFICIENT_PERMISSIONS")
        );
        assert_eq!(RmStatus(0x56).name(), Some("NV_ERR_NOT_SUPPORTED"));
        assert_eq!(RmStatus(0xdead).name(), None);
        assert!(RmStatus::OK.is_ok());
        assert_eq!(
            RmStatus::NV_ERR_INVALID_CLASS.name(),
            Some("NV_ERR_INVALID_CLASS")
        );
        assert_eq!(RmStatus::NV_ERR_NOT_SUPPORTED, RmStatus(0x56));
        assert_eq!(RmStatus::NV_OK, RmStatus::OK);
    }
}
