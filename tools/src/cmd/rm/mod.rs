//! `nvbare rm`: alloc, control and free against a device's RM — our GSP client on `sim:`,
//! `vfio:` and `remote:` devices, the kernel's RM on `nvidia:N` — with controls sent by
//! NVIDIA's names, params filled field by field and replies decoded. Without a subcommand it
//! reads commands from standard input (a terminal or a pipe) and keeps handles between them.

mod decode;
mod names;
mod params;

use std::io::{BufRead, IsTerminal, Write};

use clap::{Parser, Subcommand};
use nvbare_core::device::{Backend, Device, DeviceOptions, RmObjects};
use nvbare_core::gsp::boot::NoObserver;
use nvbare_core::rm::class::class_name;
use nvbare_core::rm::describe::{CONTROLS, alloc_by_class};
use nvbare_core::rm::{Handle, Rm, RmAbi, RmError};
use serde::Serialize;

use crate::open::{AnyDevice, open_device};
use crate::{CliError, DeviceSpec, with_device};

/// `nvbare rm` arguments.
#[derive(clap::Args, Debug)]
pub struct RmArgs {
    /// sim[:CHIP], nvidia:N, vfio:DOMAIN:BUS:DEV.FN or remote:HOST[:PORT[:N]]
    #[arg(long, short, global = true, default_value = "sim:gh100")]
    pub device: DeviceSpec,
    /// One JSON object per command on standard output, instead of text.
    #[arg(long, global = true)]
    pub json: bool,
    /// One command; without one, commands are read from standard input.
    #[command(subcommand)]
    pub op: Option<RmCommand>,
}

/// One RM operation (also the syntax of each line in the interactive mode).
#[derive(Subcommand, Debug, Clone)]
pub enum RmCommand {
    /// Allocate an object of CLASS (NVIDIA's name, e.g. HOPPER_COMPUTE_A, or a number).
    Alloc {
        /// The class.
        class: String,
        /// The parent: client, device, subdevice, vaspace, a handle, or last / $N (an
        /// object this session allocated).
        #[arg(long, default_value = "device")]
        parent: String,
        /// Alloc params: HEX digits or @FILE first (optional), then FIELD=VALUE for the classes
        /// nvbare knows (KEPLER_CHANNEL_GROUP_A engineType=1, NV01_MEMORY_LOCAL_USER
        /// size=0x200000, ...); default: zeros of the class's params, or none.
        #[arg(long, num_args = 1.., value_name = "HEX|@FILE|FIELD=VALUE")]
        params: Vec<String>,
    },
    /// Run control CMD (NVIDIA's name, e.g. NV0080_CTRL_CMD_GPU_GET_CLASSLIST_V2, or a
    /// number) on an object and print the reply.
    Control {
        /// The command.
        cmd: String,
        /// The object: client, device, subdevice, vaspace, a handle, or last / $N (an object
        /// this session allocated).
        #[arg(long, default_value = "device")]
        on: String,
        /// Params: HEX digits or @FILE first (optional), then FIELD=VALUE for the controls
        /// nvbare knows (numClasses=3, grInfoList[0].index=0xc, grRouteInfo.flags=1);
        /// default: zeros.
        #[arg(long, num_args = 1.., value_name = "HEX|@FILE|FIELD=VALUE")]
        params: Vec<String>,
    },
    /// Free an object allocated earlier in this session (and what is under it).
    Free {
        /// The handle (or last, $N).
        object: String,
    },
    /// List the controls nvbare knows: name, number, objects, params size.
    Controls,
}

/// A line of the interactive mode.
#[derive(Parser, Debug)]
#[command(name = "", no_binary_name = true, disable_help_flag = true)]
enum Line {
    #[command(flatten)]
    Op(RmCommand),
    /// The objects this session allocated.
    Objects,
    /// Leave (end of input does too); objects still allocated are freed.
    #[command(alias = "exit")]
    Quit,
}

fn io(e: std::io::Error) -> CliError {
    CliError::Runtime(format!("writing output: {e}"))
}

/// The device and what the session allocated on it.
struct Session {
    any: AnyDevice,
    objs: RmObjects,
    abi: RmAbi,
    /// (handle, class, parent), in allocation order.
    mine: Vec<(Handle, u32, Handle)>,
    json: bool,
}

/// What one command did, for `--json`.
#[derive(Serialize)]
struct Outcome {
    op: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cmd: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    class: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    object: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    handle: Option<u32>,
    status: String,
    status_code: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    params: Option<decode::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    params_hex: Option<String>,
}

impl Outcome {
    fn new(op: &'static str, r: &Result<(), RmError>) -> Outcome {
        let (status, status_code, error) = match r {
            Ok(()) => ("NV_OK".to_string(), Some(0), None),
            Err(e) => match e.status() {
                Some(s) => (
                    s.name()
                        .map_or_else(|| format!("{:#x}", s.0), str::to_string),
                    Some(s.0),
                    Some(e.to_string()),
                ),
                None => ("transport error".to_string(), None, Some(e.to_string())),
            },
        };
        Outcome {
            op,
            name: None,
            cmd: None,
            class: None,
            object: None,
            handle: None,
            status,
            status_code,
            error,
            params: None,
            params_hex: None,
        }
    }
}

fn rm_call<R>(any: &AnyDevice, f: impl FnOnce(&mut dyn Rm) -> R) -> Result<R, CliError> {
    fn on<B: Backend, R>(d: &Device<B>, f: impl FnOnce(&mut dyn Rm) -> R) -> Result<R, CliError> {
        d.with_backend(|b| f(b.rm()))
            .map_err(|e| CliError::Runtime(format!("the device: {e}")))
    }
    with_device!(any, d => on(d, f))
}

fn class_label(class: u32) -> String {
    match class_name(class) {
        Some(n) => format!("{n} ({class:#x})"),
        None => format!("class {class:#x}"),
    }
}

impl Session {
    fn open(device: DeviceSpec, json: bool) -> Result<Session, CliError> {
        let any = open_device(
            device,
            DeviceOptions {
                // One stream: these commands launch at most one kernel, and each stream is two
                // channels to create (slow over `remote:`).
                streams: 1,
                ..DeviceOptions::default()
            },
        )?;
        let objs = with_device!(&any, d => d.rm_objects())
            .map_err(|e| CliError::Runtime(format!("the device: {e}")))?;
        let abi = rm_call(&any, |rm| rm.abi())?;
        Ok(Session {
            any,
            objs,
            abi,
            mine: Vec::new(),
            json,
        })
    }

    /// Runs one command; an RM failure is printed and returned as an error.
    fn run(&mut self, out: &mut dyn Write, op: &RmCommand) -> Result<(), CliError> {
        match op {
            RmCommand::Alloc {
                class,
                parent,
                params,
            } => self.alloc(out, class, parent, params),
            RmCommand::Control { cmd, on, params } => self.control(out, cmd, on, params),
            RmCommand::Free { object } => self.free(out, object),
            RmCommand::Controls => list_controls(out, self.abi),
        }
    }

    fn report(&self, out: &mut dyn Write, o: &Outcome, text: &str) -> Result<(), CliError> {
        if self.json {
            let line =
                serde_json::to_string(o).map_err(|e| CliError::Runtime(format!("JSON: {e}")))?;
            writeln!(out, "{line}").map_err(io)
        } else {
            write!(out, "{text}").map_err(io)
        }
    }

    fn alloc(
        &mut self,
        out: &mut dyn Write,
        class: &str,
        parent: &str,
        specs: &[String],
    ) -> Result<(), CliError> {
        let class = names::class(class)?;
        let parent = names::object(parent, &self.objs, &self.handles())?;
        let what = format!("the alloc params of {}", class_label(class));
        let layout = alloc_by_class(class).map(|a| a.layout(self.abi));
        let mut p = params::build(specs, layout, &what, &self.objs, &self.handles())?;
        let r = rm_call(&self.any, |rm| rm.alloc(parent, class, &mut p))?;
        let handle = r.as_ref().ok().copied();
        let mut o = Outcome::new("alloc", &r.as_ref().map(drop).map_err(|e| *e));
        o.name = class_name(class).map(str::to_string);
        o.class = Some(class);
        o.object = Some(parent.0);
        o.handle = handle.map(|h| h.0);
        let text = match handle {
            Some(h) => {
                self.mine.push((h, class, parent));
                let mut t = format!("{} under {parent}: {h} (NV_OK)\n", class_label(class));
                if let Some(l) = layout {
                    let v = decode::decode(&p, l);
                    t.push_str(&decode::to_text(&v, 2));
                    o.params = Some(v);
                }
                t
            }
            None => String::new(),
        };
        self.report(out, &o, &text)?;
        r.map(drop).map_err(|e| CliError::Runtime(e.to_string()))
    }

    fn control(
        &mut self,
        out: &mut dyn Write,
        cmd: &str,
        on: &str,
        specs: &[String],
    ) -> Result<(), CliError> {
        let (cmd, desc) = names::command(cmd)?;
        let object = names::object(on, &self.objs, &self.handles())?;
        let layout = desc.map(|d| d.layout(self.abi));
        let label = desc.map_or_else(|| format!("control {cmd:#010x}"), |d| d.name.to_string());
        let mut p = params::build(specs, layout, &label, &self.objs, &self.handles())?;
        let r = rm_call(&self.any, |rm| rm.control(object, cmd, &mut p))?;
        let mut o = Outcome::new("control", &r);
        o.name = desc.map(|d| d.name.to_string());
        o.cmd = Some(cmd);
        o.object = Some(object.0);
        let mut text = String::new();
        if r.is_ok() {
            text = format!(
                "{label} ({cmd:#010x}) on {}: NV_OK\n",
                self.object_label(on, object)
            );
            match layout {
                Some(l) => {
                    let v = decode::decode(&p, l);
                    text.push_str(&decode::to_text(&v, 2));
                    o.params = Some(v);
                }
                None => {
                    let hex = decode::hex(&p);
                    text.push_str(&format!("  params ({} bytes): {hex}\n", p.len()));
                    o.params_hex = Some(hex);
                }
            }
        }
        self.report(out, &o, &text)?;
        r.map_err(|e| CliError::Runtime(e.to_string()))
    }

    fn handles(&self) -> Vec<Handle> {
        self.mine.iter().map(|(h, ..)| *h).collect()
    }

    fn object_label(&self, as_written: &str, h: Handle) -> String {
        if names::OBJECT_NAMES.contains(&as_written.to_ascii_lowercase().as_str()) {
            format!("{} {h}", as_written.to_ascii_lowercase())
        } else {
            h.to_string()
        }
    }

    fn free(&mut self, out: &mut dyn Write, object: &str) -> Result<(), CliError> {
        let h = names::object(object, &self.objs, &self.handles())?;
        if !self.mine.iter().any(|(x, ..)| *x == h) {
            return Err(CliError::Usage(format!(
                "{h} was not allocated in this session: the device layer owns the other \
                 objects (freeing them would break it); allocate and free in one session \
                 (`nvbare rm --device DEV` reads commands from standard input)"
            )));
        }
        let r = rm_call(&self.any, |rm| rm.free(h))?;
        if r.is_ok() {
            // RM freed what is under it too.
            let mut gone = vec![h];
            for (x, _, parent) in &self.mine {
                if gone.contains(parent) {
                    gone.push(*x);
                }
            }
            self.mine.retain(|(x, ..)| !gone.contains(x));
        }
        let mut o = Outcome::new("free", &r);
        o.object = Some(h.0);
        let text = if r.is_ok() {
            format!("freed {h}\n")
        } else {
            String::new()
        };
        self.report(out, &o, &text)?;
        r.map_err(|e| CliError::Runtime(e.to_string()))
    }

    /// Frees what the session still holds (newest first), then closes the device.
    fn close(mut self) -> Result<(), CliError> {
        while let Some((h, ..)) = self.mine.pop() {
            // Freeing a parent frees its children: those are gone already.
            if let Ok(Err(e)) = rm_call(&self.any, |rm| rm.free(h)) {
                log::debug!("freeing {h} at exit: {e}");
            }
        }
        Ok(self.any.finish(&mut NoObserver)?)
    }
}

fn list_controls(out: &mut dyn Write, abi: RmAbi) -> Result<(), CliError> {
    for c in CONTROLS {
        let on: Vec<String> = c.on.iter().map(|&k| class_label(k)).collect();
        let on = if on.is_empty() {
            "its channel".into()
        } else {
            on.join(", ")
        };
        let l = c.layout(abi);
        writeln!(
            out,
            "{:<48} {:#010x}  {:>5} B  on {on}",
            c.name, c.cmd, l.size
        )
        .map_err(io)?;
    }
    Ok(())
}

/// Runs `nvbare rm ...`.
pub fn run(out: &mut dyn Write, args: RmArgs) -> Result<(), CliError> {
    if let Some(RmCommand::Controls) = args.op {
        return list_controls(out, RmAbi::R570);
    }
    let mut s = Session::open(args.device, args.json)?;
    let r = match &args.op {
        Some(op) => s.run(out, op),
        None => shell(out, &mut s, &mut std::io::stdin().lock()),
    };
    let closed = s.close();
    r.and(closed)
}

fn shell(out: &mut dyn Write, s: &mut Session, input: &mut dyn BufRead) -> Result<(), CliError> {
    let prompt = std::io::stdin().is_terminal();
    if prompt && !s.json {
        writeln!(
            out,
            "RM of {} (client {}, device {}, subdevice {}): alloc, control, free, controls, \
             objects, quit; `help` for the syntax",
            s.any.info().backend,
            s.objs.client,
            s.objs.device,
            s.objs.subdevice
        )
        .map_err(io)?;
    }
    let mut line = String::new();
    loop {
        if prompt {
            write!(out, "rm> ").map_err(io)?;
            out.flush().map_err(io)?;
        }
        line.clear();
        if input
            .read_line(&mut line)
            .map_err(|e| CliError::Runtime(format!("reading commands: {e}")))?
            == 0
        {
            return Ok(());
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        if words.is_empty() || words[0].starts_with('#') {
            continue;
        }
        match Line::try_parse_from(&words) {
            Ok(Line::Quit) => return Ok(()),
            Ok(Line::Objects) => {
                for (h, c, _) in &s.mine {
                    writeln!(out, "{h}  {}", class_label(*c)).map_err(io)?;
                }
            }
            Ok(Line::Op(op)) => {
                if let Err(e) = s.run(out, &op) {
                    eprintln!("error: {e}");
                }
            }
            Err(e) => eprintln!("{}", e.render()),
        }
        out.flush().map_err(io)?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_lines_parse_like_the_subcommands() {
        let l = Line::try_parse_from([
            "control",
            "--on",
            "device",
            "NV0080_CTRL_CMD_GPU_GET_CLASSLIST_V2",
        ])
        .unwrap();
        let Line::Op(RmCommand::Control { cmd, on, params }) = l else {
            panic!("{l:?}")
        };
        assert_eq!(
            (cmd.as_str(), on.as_str(), params.len()),
            ("NV0080_CTRL_CMD_GPU_GET_CLASSLIST_V2", "device", 0)
        );
        let l = Line::try_parse_from([
            "alloc",
            "0xcbc0",
            "--parent",
            "0xcf000010",
            "--params",
            "00",
            "01",
        ])
        .unwrap();
        assert!(matches!(l, Line::Op(RmCommand::Alloc { ref params, .. }) if params.len() == 2));
        assert!(matches!(
            Line::try_parse_from(["exit"]).unwrap(),
            Line::Quit
        ));
        assert!(Line::try_parse_from(["frob"]).is_err());
    }

    #[test]
    fn the_control_table_lists_every_control() {
        let mut out = Vec::new();
        list_controls(&mut out, RmAbi::R580).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(text.lines().count(), CONTROLS.len());
        assert!(text.contains("NV0080_CTRL_CMD_GPU_GET_CLASSLIST_V2             0x00800292    804 B  on NV01_DEVICE_0 (0x80)"), "{text}");
    }
}
