//! `nvbare decode pushbuf FILE`: print a pushbuffer's methods with NVIDIA's names.
//!
//! The file holds little-endian 32-bit words (or, with `--text`, whitespace-separated hex
//! words). Methods below 0x100 are host methods; others are named after the class bound to
//! their subchannel, from `SET_OBJECT`s in the stream, `--class SUBC=CLASS` or `--chip`.

use std::io::Write;
use std::path::PathBuf;

use clap::Args;

use nvbare_core::channel::decode::{Decoder, Fields, Item};
use nvbare_core::channel::methods::{SUBC_COMPUTE, SUBC_COPY};
use nvbare_core::chip::Chipset;
use nvbare_core::rm::class::class_name;

use crate::CliError;
use crate::input;

/// `nvbare decode pushbuf`.
#[derive(Args, Debug, Clone)]
pub struct PushbufArgs {
    /// Bind a class to a subchannel, `SUBC=CLASS` in hex (e.g. `1=cbc0`); repeatable.
    #[arg(long = "class", value_name = "SUBC=CLASS")]
    pub classes: Vec<String>,
    /// Bind the chip's compute class to subchannel 1 and its copy class to 4 (e.g. gh100).
    #[arg(long)]
    pub chip: Option<String>,
    /// The file is text: hex words separated by whitespace or commas.
    #[arg(long)]
    pub text: bool,
    /// File with the pushbuffer (little-endian 32-bit words; `-` reads standard input).
    pub file: PathBuf,
}

/// Runs `nvbare decode pushbuf`.
pub fn run(out: &mut dyn Write, a: &PushbufArgs) -> Result<(), CliError> {
    let bytes = input::read_at_most(&a.file, input::MAX_PUSHBUF_BYTES, input::PUSHBUF)?;
    let o = PushbufOptions {
        classes: a.classes.clone(),
        chip: a.chip.clone(),
        text: a.text,
    };
    decode(out, &bytes, &o)
}

/// Options of [`decode`].
#[derive(Debug, Clone, Default)]
pub struct PushbufOptions {
    /// `SUBC=CLASS` bindings (class in hex, with or without 0x).
    pub classes: Vec<String>,
    /// Bind the chip's compute class to subchannel 1 and copy class to 4.
    pub chip: Option<String>,
    /// The input is text: hex words separated by whitespace or commas.
    pub text: bool,
}

/// Parses `SUBC=CLASS`.
pub fn parse_binding(s: &str) -> Result<(u8, u32), String> {
    let (sc, c) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?}: use SUBC=CLASS, e.g. 1=cbc0"))?;
    let sc: u8 = sc
        .parse()
        .ok()
        .filter(|&x: &u8| x < 8)
        .ok_or_else(|| format!("{s:?}: the subchannel must be 0..7"))?;
    let c = u32::from_str_radix(c.trim_start_matches("0x"), 16)
        .map_err(|_| format!("{s:?}: {c:?} is not a hex class id"))?;
    Ok((sc, c))
}

/// Turns the input bytes into words.
pub fn words(bytes: &[u8], text: bool) -> Result<Vec<u32>, CliError> {
    if text {
        let s = std::str::from_utf8(bytes)
            .map_err(|_| CliError::Runtime("the text input is not UTF-8".into()))?;
        return s
            .split(|c: char| c.is_whitespace() || c == ',')
            .filter(|w| !w.is_empty())
            .map(|w| {
                u32::from_str_radix(w.trim_start_matches("0x"), 16)
                    .map_err(|_| CliError::Runtime(format!("{w:?} is not a hex word")))
            })
            .collect();
    }
    if !bytes.len().is_multiple_of(4) {
        return Err(CliError::Runtime(format!(
            "{} bytes is not a whole number of 32-bit words (use --text for hex text)",
            bytes.len()
        )));
    }
    Ok(bytes
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

/// Prints the decoded pushbuffer.
pub fn decode(out: &mut dyn Write, bytes: &[u8], o: &PushbufOptions) -> Result<(), CliError> {
    let words = words(bytes, o.text)?;
    let mut d = Decoder::new(&words);
    if let Some(chip) = &o.chip {
        let cs = Chipset::from_name(chip)
            .ok_or_else(|| CliError::Usage(format!("unknown chip {chip:?}")))?;
        let c = cs.info().classes;
        d = d
            .with_class(SUBC_COMPUTE, c.compute)
            .with_class(SUBC_COPY, c.copy);
    }
    for b in &o.classes {
        let (sc, c) = parse_binding(b).map_err(CliError::Usage)?;
        d = d.with_class(sc, c);
    }
    let io = |e: std::io::Error| CliError::Runtime(format!("writing output: {e}"));
    let mut methods = 0usize;
    for item in d {
        match item {
            Ok(Item::Method(m)) => {
                methods += 1;
                let class = match m.class.and_then(class_name) {
                    Some(n) if m.method >= 0x100 => format!("{n}."),
                    _ if m.method < 0x100 => "host.".to_string(),
                    _ => match m.class {
                        Some(c) => format!("{c:#06x}."),
                        None => "unbound.".to_string(),
                    },
                };
                let name = m
                    .name()
                    .map(str::to_string)
                    .unwrap_or_else(|| format!("{:#06x}", m.method));
                let fields = Fields(m).to_string();
                writeln!(
                    out,
                    "{:5}  [{}] {class}{name} = {:#010x}{}{}",
                    m.header_index,
                    m.subchannel,
                    m.data,
                    if fields.is_empty() { "" } else { "  " },
                    fields
                )
                .map_err(io)?;
            }
            Ok(Item::Nop { index }) => writeln!(out, "{index:5}  NOP").map_err(io)?,
            Ok(Item::EndSegment { index }) => {
                writeln!(out, "{index:5}  END_PB_SEGMENT").map_err(io)?
            }
            Err(e) => {
                return Err(CliError::Runtime(format!("after {methods} methods: {e}")));
            }
        }
    }
    writeln!(out, "{} words, {methods} methods", words.len()).map_err(io)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvbare_core::channel::pushbuf::PushBuffer;

    #[test]
    fn decodes_a_launch() {
        let mut w = [0u32; 32];
        let mut pb = PushBuffer::new(&mut w);
        pb.compute_launch(0x1000_0100).unwrap();
        pb.host_release64(0x2000, 3, true, false).unwrap();
        let n = pb.len();
        let bytes: Vec<u8> = w[..n].iter().flat_map(|x| x.to_le_bytes()).collect();
        let mut out = Vec::new();
        let o = PushbufOptions {
            chip: Some("gh100".into()),
            ..Default::default()
        };
        decode(&mut out, &bytes, &o).unwrap();
        let s = String::from_utf8(out).unwrap();
        assert!(
            s.contains("HOPPER_COMPUTE_A.SEND_PCAS_A = 0x00100001  QMD_ADDRESS=0x10000100"),
            "{s}"
        );
        assert!(s.contains("HOPPER_COMPUTE_A.WAIT_FOR_IDLE"), "{s}");
        assert!(s.contains("host.SEM_EXECUTE"), "{s}");
        assert!(s.contains("OPERATION=RELEASE"), "{s}");
        // Truncated input is an error, not a panic: a method header without its data (the
        // launch's first word is the complete WAIT_FOR_IDLE, then SEND_PCAS_A's header).
        let mut out = Vec::new();
        assert!(decode(&mut out, &bytes[..8], &o).is_err());
        assert!(decode(&mut out, &bytes[..7], &o).is_err());
        assert_eq!(parse_binding("1=cbc0"), Ok((1, 0xcbc0)));
        assert!(parse_binding("9=cbc0").is_err());
        assert_eq!(words(b"0x1 2 ,ff", true).unwrap(), vec![1, 2, 0xff]);
    }
}
