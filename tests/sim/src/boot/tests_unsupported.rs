//! `boot` refuses every chip `chip::identify` knows but the simulator does not model, before it
//! touches anything but the identity registers, with an error that names the chip.

use nvbare_core::chip::CHIPS;
use nvbare_core::gsp::boot::{
    BARE_METAL_CHIPS, BootErrorKind, BootOptions, BootPhase, NoObserver, boot,
};

use super::boot_hw;
use super::firmware::pinned_firmware;
use crate::models::{self, ChipModel, MODELS};
use crate::{SimConfig, SimGpu};

#[test]
fn the_bare_metal_chips_are_the_modelled_ones() {
    let modelled: Vec<_> = MODELS.iter().map(|m| m.chipset).collect();
    assert_eq!(modelled, BARE_METAL_CHIPS);
}

#[test]
fn every_chip_without_a_model_is_refused_by_name() {
    let (_, fw) = pinned_firmware(models::AD102.chipset);
    let mut refused = 0;
    for info in CHIPS
        .iter()
        .filter(|c| !BARE_METAL_CHIPS.contains(&c.chipset))
    {
        // The identity of that chip on an otherwise AD102-shaped board.
        let model = ChipModel {
            chipset: info.chipset,
            ..models::AD102
        };
        let gpu = SimGpu::new(SimConfig::new(model).with_virtual_time());
        let e = match boot(
            &boot_hw(&gpu),
            &*fw,
            &BootOptions::default(),
            &mut NoObserver,
        ) {
            Ok(_) => panic!("{}: booted", info.chipset),
            Err(e) => e,
        };
        assert_eq!(e.phase, BootPhase::Identify, "{}", info.chipset);
        assert_eq!(e.kind, BootErrorKind::NotSupported { chip: info.chipset });
        let msg = e.to_string();
        assert!(
            msg.contains(info.chipset.name()) && msg.contains("not yet supported for bare metal"),
            "{msg}"
        );
        refused += 1;
    }
    // TU104-TU117, GA102-GA107, AD103-AD107, GB100... (every row but the models).
    assert_eq!(refused, CHIPS.len() - BARE_METAL_CHIPS.len());
    assert!(refused >= 15);
}
