//! Where the GSP firmware comes from for bare-metal devices.

use crate::gpu::Options;
use crate::{Error, Result};
use nvbare_tools::DeviceSpec;

/// Checks what [`Options`] says about the firmware before the open path looks for it.
pub(crate) fn check(spec: &DeviceSpec, options: &Options) -> Result<()> {
    if let Some(dir) = &options.firmware_dir
        && spec.is_bare_metal()
        && !dir.is_dir()
    {
        return Err(Error::Open(format!(
            "the firmware directory {} does not exist; create it, or leave \
             Options::firmware_dir unset to use the cache",
            dir.display()
        )));
    }
    Ok(())
}
