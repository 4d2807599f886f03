//! Pushbuffer decoding: words back into named methods (for `nvbare decode pushbuf`, tests and
//! the simulator's traces).
//!
//! [`Decoder`] walks the words, expands incrementing / non-incrementing / increment-once /
//! immediate headers into one [`Method`] per data word, and tracks which class is bound to
//! each subchannel (from `SET_OBJECT`, or given up front) so methods above 0x100 get the names
//! of the right class. Allocation-free.

use core::fmt;

use super::methods::{NUMBER_OF_SUBCHANNELS, compute, copy, host};
use super::pushbuf::{Header, SecOp};
use crate::rm::class::{ClassKind, class_kind, class_name};

/// One method write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Method {
    /// Index of the header word this write came from.
    pub header_index: usize,
    /// Opcode of that header.
    pub op: SecOp,
    /// Subchannel.
    pub subchannel: u8,
    /// Method byte offset.
    pub method: u32,
    /// The value written.
    pub data: u32,
    /// Class bound to the subchannel when the method was decoded, if known.
    pub class: Option<u32>,
}

/// Which method table applies to a method.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// A host (GPFIFO) method: offsets below 0x100 on any subchannel.
    Host,
    /// A compute-class method.
    Compute,
    /// A copy-engine method.
    Copy,
    /// A method of a class nvbare has no table for (or an unbound subchannel).
    Unknown,
}

impl Method {
    /// The method table that names this method.
    pub fn family(&self) -> Family {
        if self.method < 0x100 {
            return Family::Host;
        }
        match self.class.and_then(class_kind) {
            Some(ClassKind::Compute) => Family::Compute,
            Some(ClassKind::Copy) => Family::Copy,
            Some(ClassKind::Gpfifo) => Family::Host,
            _ => Family::Unknown,
        }
    }

    /// NVIDIA's name of the method (without the class prefix), when known.
    pub fn name(&self) -> Option<&'static str> {
        method_name(self.family(), self.method)
    }
}

/// Name of `method` in `family`'s table.
pub fn method_name(family: Family, method: u32) -> Option<&'static str> {
    Some(match family {
        Family::Host => match method {
            host::SET_OBJECT => "SET_OBJECT",
            host::ILLEGAL => "ILLEGAL",
            host::NOP => "NOP",
            host::SEMAPHOREA => "SEMAPHOREA",
            host::SEMAPHOREB => "SEMAPHOREB",
            host::SEMAPHOREC => "SEMAPHOREC",
            host::SEMAPHORED => "SEMAPHORED",
            host::NON_STALL_INTERRUPT => "NON_STALL_INTERRUPT",
            host::FB_FLUSH => "FB_FLUSH",
            host::MEM_OP_A => "MEM_OP_A",
            host::MEM_OP_B => "MEM_OP_B",
            host::MEM_OP_C => "MEM_OP_C",
            host::MEM_OP_D => "MEM_OP_D",
            host::SET_REFERENCE => "SET_REFERENCE",
            host::SEM_ADDR_LO => "SEM_ADDR_LO",
            host::SEM_ADDR_HI => "SEM_ADDR_HI",
            host::SEM_PAYLOAD_LO => "SEM_PAYLOAD_LO",
            host::SEM_PAYLOAD_HI => "SEM_PAYLOAD_HI",
            host::SEM_EXECUTE => "SEM_EXECUTE",
            host::WFI => "WFI",
            host::YIELD => "YIELD",
            host::CLEAR_FAULTED => "CLEAR_FAULTED",
            _ => return None,
        },
        Family::Compute => match method {
            compute::NO_OPERATION => "NO_OPERATION",
            compute::WAIT_FOR_IDLE => "WAIT_FOR_IDLE",
            compute::INVALIDATE_SKED_CACHES => "INVALIDATE_SKED_CACHES",
            compute::PM_TRIGGER => "PM_TRIGGER",
            compute::SET_SHADER_SHARED_MEMORY_WINDOW_A => "SET_SHADER_SHARED_MEMORY_WINDOW_A",
            compute::SET_SHADER_SHARED_MEMORY_WINDOW_B => "SET_SHADER_SHARED_MEMORY_WINDOW_B",
            compute::SEND_PCAS_A => "SEND_PCAS_A",
            compute::SEND_PCAS_B => "SEND_PCAS_B",
            compute::SEND_SIGNALING_PCAS2_B => "SEND_SIGNALING_PCAS2_B",
            compute::SEND_SIGNALING_PCAS_B => "SEND_SIGNALING_PCAS_B",
            compute::SET_SHADER_LOCAL_MEMORY_NON_THROTTLED_A => {
                "SET_SHADER_LOCAL_MEMORY_NON_THROTTLED_A"
            }
            compute::SET_SHADER_LOCAL_MEMORY_NON_THROTTLED_B => {
                "SET_SHADER_LOCAL_MEMORY_NON_THROTTLED_B"
            }
            compute::SET_SHADER_LOCAL_MEMORY_NON_THROTTLED_C => {
                "SET_SHADER_LOCAL_MEMORY_NON_THROTTLED_C"
            }
            compute::SET_INLINE_QMD_ADDRESS_A => "SET_INLINE_QMD_ADDRESS_A",
            compute::SET_INLINE_QMD_ADDRESS_B => "SET_INLINE_QMD_ADDRESS_B",
            m if (compute::LOAD_INLINE_QMD_DATA..compute::LOAD_INLINE_QMD_DATA + 96 * 4)
                .contains(&m) =>
            {
                "LOAD_INLINE_QMD_DATA"
            }
            compute::SET_SHADER_LOCAL_MEMORY_A => "SET_SHADER_LOCAL_MEMORY_A",
            compute::SET_SHADER_LOCAL_MEMORY_B => "SET_SHADER_LOCAL_MEMORY_B",
            compute::SET_SHADER_LOCAL_MEMORY_WINDOW_A => "SET_SHADER_LOCAL_MEMORY_WINDOW_A",
            compute::SET_SHADER_LOCAL_MEMORY_WINDOW_B => "SET_SHADER_LOCAL_MEMORY_WINDOW_B",
            compute::SET_SHADER_CACHE_CONTROL => "SET_SHADER_CACHE_CONTROL",
            compute::SET_SM_TIMEOUT_INTERVAL => "SET_SM_TIMEOUT_INTERVAL",
            compute::INVALIDATE_SHADER_CACHES_NO_WFI => "INVALIDATE_SHADER_CACHES_NO_WFI",
            compute::SET_REPORT_SEMAPHORE_A => "SET_REPORT_SEMAPHORE_A",
            compute::SET_REPORT_SEMAPHORE_B => "SET_REPORT_SEMAPHORE_B",
            compute::SET_REPORT_SEMAPHORE_C => "SET_REPORT_SEMAPHORE_C",
            compute::SET_REPORT_SEMAPHORE_D => "SET_REPORT_SEMAPHORE_D",
            _ => return None,
        },
        Family::Copy => match method {
            copy::NOP => "NOP",
            copy::PM_TRIGGER => "PM_TRIGGER",
            copy::SET_SEMAPHORE_A => "SET_SEMAPHORE_A",
            copy::SET_SEMAPHORE_B => "SET_SEMAPHORE_B",
            copy::SET_SEMAPHORE_PAYLOAD => "SET_SEMAPHORE_PAYLOAD",
            copy::SET_SEMAPHORE_PAYLOAD_UPPER => "SET_SEMAPHORE_PAYLOAD_UPPER",
            copy::SET_SRC_PHYS_MODE => "SET_SRC_PHYS_MODE",
            copy::SET_DST_PHYS_MODE => "SET_DST_PHYS_MODE",
            copy::LAUNCH_DMA => "LAUNCH_DMA",
            copy::OFFSET_IN_UPPER => "OFFSET_IN_UPPER",
            copy::OFFSET_IN_LOWER => "OFFSET_IN_LOWER",
            copy::OFFSET_OUT_UPPER => "OFFSET_OUT_UPPER",
            copy::OFFSET_OUT_LOWER => "OFFSET_OUT_LOWER",
            copy::PITCH_IN => "PITCH_IN",
            copy::PITCH_OUT => "PITCH_OUT",
            copy::LINE_LENGTH_IN => "LINE_LENGTH_IN",
            copy::LINE_COUNT => "LINE_COUNT",
            _ => return None,
        },
        Family::Unknown => return None,
    })
}

/// A human-readable note on the fields of a method's value, for the methods nvbare emits.
#[derive(Debug, Clone, Copy)]
pub struct Fields(pub Method);

impl fmt::Display for Fields {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = &self.0;
        let d = m.data;
        match (m.family(), m.method) {
            (Family::Host, host::SET_OBJECT) => match class_name(d & 0xffff) {
                Some(n) => write!(f, "NVCLASS={n}"),
                None => write!(f, "NVCLASS={:#06x}", d & 0xffff),
            },
            (Family::Host, host::SEM_EXECUTE) => {
                use host::sem_execute::*;
                let op = match d & OPERATION_MASK {
                    OPERATION_ACQUIRE => "ACQUIRE",
                    OPERATION_RELEASE => "RELEASE",
                    OPERATION_ACQ_STRICT_GEQ => "ACQ_STRICT_GEQ",
                    OPERATION_ACQ_CIRC_GEQ => "ACQ_CIRC_GEQ",
                    OPERATION_ACQ_AND => "ACQ_AND",
                    OPERATION_ACQ_NOR => "ACQ_NOR",
                    OPERATION_REDUCTION => "REDUCTION",
                    _ => "?",
                };
                write!(f, "OPERATION={op}")?;
                if d & PAYLOAD_SIZE_64BIT != 0 {
                    f.write_str(" PAYLOAD_SIZE=64BIT")?;
                }
                if d & RELEASE_WFI_EN != 0 {
                    f.write_str(" RELEASE_WFI=EN")?;
                }
                if d & RELEASE_TIMESTAMP_EN != 0 {
                    f.write_str(" RELEASE_TIMESTAMP=EN")?;
                }
                if d & ACQUIRE_SWITCH_TSG_EN != 0 {
                    f.write_str(" ACQUIRE_SWITCH_TSG=EN")?;
                }
                Ok(())
            }
            (Family::Compute, compute::SEND_PCAS_A) => {
                write!(f, "QMD_ADDRESS={:#x}", (d as u64) << 8)
            }
            (Family::Compute, compute::SEND_SIGNALING_PCAS_B) => write!(
                f,
                "INVALIDATE={} SCHEDULE={}",
                d & compute::PCAS_B_INVALIDATE != 0,
                d & compute::PCAS_B_SCHEDULE != 0
            ),
            (Family::Compute, compute::SEND_SIGNALING_PCAS2_B) => {
                let a = match d & 0xf {
                    0 => "NOP",
                    1 => "INVALIDATE",
                    2 => "SCHEDULE",
                    3 => "INVALIDATE_COPY_SCHEDULE",
                    6 => "INCREMENT_PUT",
                    7 => "DECREMENT_DEPENDENCE",
                    8 => "PREFETCH",
                    9 => "PREFETCH_SCHEDULE",
                    10 => "INVALIDATE_PREFETCH_COPY_SCHEDULE",
                    11 => "INVALIDATE_PREFETCH_COPY_FORCE_REQUIRE_SCHEDULING",
                    _ => "?",
                };
                write!(f, "PCAS_ACTION={a}")
            }
            (Family::Compute, compute::INVALIDATE_SHADER_CACHES_NO_WFI) => {
                let mut first = true;
                for (bit, n) in [
                    (compute::INVALIDATE_INSTRUCTION, "INSTRUCTION"),
                    (compute::INVALIDATE_GLOBAL_DATA, "GLOBAL_DATA"),
                    (compute::INVALIDATE_CONSTANT, "CONSTANT"),
                ] {
                    if d & bit != 0 {
                        if !first {
                            f.write_str(" ")?;
                        }
                        write!(f, "{n}=TRUE")?;
                        first = false;
                    }
                }
                Ok(())
            }
            (Family::Copy, copy::LAUNCH_DMA) => {
                use copy::launch_dma::*;
                let t = match d & DATA_TRANSFER_TYPE_MASK {
                    DATA_TRANSFER_TYPE_NONE => "NONE",
                    DATA_TRANSFER_TYPE_PIPELINED => "PIPELINED",
                    DATA_TRANSFER_TYPE_NON_PIPELINED => "NON_PIPELINED",
                    _ => "?",
                };
                write!(f, "DATA_TRANSFER_TYPE={t}")?;
                if d & FLUSH_ENABLE != 0 {
                    f.write_str(" FLUSH_ENABLE=TRUE")?;
                }
                let sem = match (d >> SEMAPHORE_TYPE_SHIFT) & 3 {
                    0 => None,
                    1 => Some("RELEASE_ONE_WORD_SEMAPHORE"),
                    2 => Some("RELEASE_FOUR_WORD_SEMAPHORE"),
                    _ => Some("RELEASE_CONDITIONAL_INTR_SEMAPHORE"),
                };
                if let Some(s) = sem {
                    write!(f, " SEMAPHORE_TYPE={s}")?;
                    if d & SEMAPHORE_PAYLOAD_SIZE_TWO_WORD != 0 {
                        f.write_str(" SEMAPHORE_PAYLOAD_SIZE=TWO_WORD")?;
                    }
                }
                if d & SRC_MEMORY_LAYOUT_PITCH != 0 {
                    f.write_str(" SRC_MEMORY_LAYOUT=PITCH")?;
                }
                if d & DST_MEMORY_LAYOUT_PITCH != 0 {
                    f.write_str(" DST_MEMORY_LAYOUT=PITCH")?;
                }
                if d & MULTI_LINE_ENABLE != 0 {
                    f.write_str(" MULTI_LINE_ENABLE=TRUE")?;
                }
                if d & SRC_TYPE_PHYSICAL != 0 {
                    f.write_str(" SRC_TYPE=PHYSICAL")?;
                }
                if d & DST_TYPE_PHYSICAL != 0 {
                    f.write_str(" DST_TYPE=PHYSICAL")?;
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }
}

/// Something a pushbuffer cannot contain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecodeError {
    /// A header promises more data words than remain.
    Truncated {
        /// Index of the header word.
        header_index: usize,
        /// Data words promised.
        count: u32,
        /// Words left after the header.
        left: usize,
    },
    /// A header with an opcode nvbare does not decode (`GRP0`/`GRP2` tertiary forms other than
    /// NOP, `RESERVED6`).
    UnsupportedOpcode {
        /// Index of the word.
        index: usize,
        /// The word.
        word: u32,
    },
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            DecodeError::Truncated {
                header_index,
                count,
                left,
            } => write!(
                f,
                "word {header_index}: header promises {count} data words but only {left} remain \
                 (truncated pushbuffer)"
            ),
            DecodeError::UnsupportedOpcode { index, word } => write!(
                f,
                "word {index}: {word:#010x} has an opcode the decoder does not handle \
                 (SEC_OP {})",
                word >> 29
            ),
        }
    }
}

impl core::error::Error for DecodeError {}

/// An item of a decoded pushbuffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Item {
    /// A method write.
    Method(Method),
    /// A `NVC56F_DMA_NOP` word (all zero).
    Nop {
        /// Index of the word.
        index: usize,
    },
    /// `END_PB_SEGMENT`: the rest of the segment is ignored.
    EndSegment {
        /// Index of the word.
        index: usize,
    },
}

/// Iterates over the methods of a pushbuffer. Stops after the first error.
#[derive(Debug, Clone)]
pub struct Decoder<'a> {
    words: &'a [u32],
    pos: usize,
    classes: [Option<u32>; NUMBER_OF_SUBCHANNELS as usize],
    cur: Option<(Header, usize, u32)>,
    done: bool,
}

impl<'a> Decoder<'a> {
    /// A decoder over `words` with no classes bound yet.
    pub fn new(words: &'a [u32]) -> Self {
        Decoder {
            words,
            pos: 0,
            classes: [None; NUMBER_OF_SUBCHANNELS as usize],
            cur: None,
            done: false,
        }
    }

    /// Declares `class` bound to `subchannel` (a pushbuffer that relies on an earlier
    /// `SET_OBJECT`).
    pub fn with_class(mut self, subchannel: u8, class: u32) -> Self {
        if let Some(c) = self.classes.get_mut(subchannel as usize) {
            *c = Some(class);
        }
        self
    }

    /// The class bound to `subchannel` so far.
    pub fn class_of(&self, subchannel: u8) -> Option<u32> {
        self.classes.get(subchannel as usize).copied().flatten()
    }

    fn emit(&mut self, hdr: Header, header_index: usize, data: u32, i: u32) -> Item {
        let method = match hdr.op {
            SecOp::IncMethod => hdr.method + 4 * i,
            SecOp::OneInc if i > 0 => hdr.method + 4,
            _ => hdr.method,
        };
        if method == host::SET_OBJECT
            && let Some(c) = self.classes.get_mut(hdr.subchannel as usize)
        {
            *c = Some(data & 0xffff);
        }
        Item::Method(Method {
            header_index,
            op: hdr.op,
            subchannel: hdr.subchannel,
            method,
            data,
            class: self.class_of(hdr.subchannel),
        })
    }
}

impl Iterator for Decoder<'_> {
    type Item = Result<Item, DecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        if let Some((hdr, header_index, i)) = self.cur {
            let data = *self.words.get(self.pos)?;
            self.pos += 1;
            self.cur = (i + 1 < hdr.count).then_some((hdr, header_index, i + 1));
            return Some(Ok(self.emit(hdr, header_index, data, i)));
        }
        let index = self.pos;
        let word = *self.words.get(index)?;
        self.pos += 1;
        if word == 0 {
            return Some(Ok(Item::Nop { index }));
        }
        let hdr = Header::decode(word);
        match hdr.op {
            SecOp::IncMethod | SecOp::NonIncMethod | SecOp::OneInc => {
                let left = self.words.len() - self.pos;
                if hdr.count as usize > left {
                    self.done = true;
                    return Some(Err(DecodeError::Truncated {
                        header_index: index,
                        count: hdr.count,
                        left,
                    }));
                }
                if hdr.count == 0 {
                    // A header with no data writes nothing; skip it.
                    return self.next();
                }
                self.cur = Some((hdr, index, 0));
                self.next()
            }
            SecOp::ImmdDataMethod => Some(Ok(self.emit(hdr, index, hdr.count, 0))),
            SecOp::EndPbSegment => {
                self.done = true;
                Some(Ok(Item::EndSegment { index }))
            }
            SecOp::Grp0UseTert | SecOp::Grp2UseTert | SecOp::Reserved6 => {
                self.done = true;
                Some(Err(DecodeError::UnsupportedOpcode { index, word }))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::channel::methods::{SUBC_COMPUTE, SUBC_COPY};
    use crate::channel::pushbuf::PushBuffer;
    use crate::rm::class::{HOPPER_COMPUTE_A, HOPPER_DMA_COPY_A};

    fn methods(words: &[u32]) -> ([Option<Method>; 64], usize) {
        let mut out = [None; 64];
        let mut n = 0;
        for item in Decoder::new(words) {
            if let Item::Method(m) = item.unwrap() {
                out[n] = Some(m);
                n += 1;
            }
        }
        (out, n)
    }

    #[test]
    fn a_prefetched_launch_fetches_its_qmd_before_the_wait_and_launches_it_after() {
        let mut w = [0u32; 16];
        let mut pb = PushBuffer::new(&mut w);
        pb.set_object(SUBC_COMPUTE, HOPPER_COMPUTE_A).unwrap();
        pb.compute_launch_prefetched(0x20_0000_0100).unwrap();
        let n_words = pb.len();
        let (ms, n) = methods(&w[..n_words]);
        let mut got = [("", 0u32); 8];
        assert_eq!(n, got.len());
        for (g, m) in got.iter_mut().zip(ms.iter().flatten()) {
            *g = (m.name().unwrap_or("?"), m.data);
        }
        assert_eq!(
            got,
            [
                ("SET_OBJECT", HOPPER_COMPUTE_A),
                ("SEND_PCAS_A", 0x2000_0001),
                ("SEND_SIGNALING_PCAS2_B", compute::PCAS_ACTION_INVALIDATE),
                ("SEND_PCAS_A", 0x2000_0001),
                ("SEND_SIGNALING_PCAS2_B", compute::PCAS_ACTION_PREFETCH),
                ("WAIT_FOR_IDLE", 0),
                ("SEND_PCAS_A", 0x2000_0001),
                (
                    "SEND_SIGNALING_PCAS2_B",
                    compute::PCAS_ACTION_PREFETCH_SCHEDULE
                ),
            ]
        );
        let mut s = FmtBuf::default();
        let pf = ms[4].unwrap();
        fmt::write(&mut s, format_args!("{}", Fields(pf))).unwrap();
        assert_eq!(s.as_str(), "PCAS_ACTION=PREFETCH");
    }

    #[test]
    fn everything_the_helpers_emit_decodes_back() {
        let mut w = [0u32; 128];
        let mut pb = PushBuffer::new(&mut w);
        pb.set_object(SUBC_COMPUTE, HOPPER_COMPUTE_A).unwrap();
        pb.set_object(SUBC_COPY, HOPPER_DMA_COPY_A).unwrap();
        pb.host_acquire64_geq(0x10_0000_0040, 0x1_0000_0007)
            .unwrap();
        pb.invalidate_shader_caches().unwrap();
        pb.compute_launch(0x20_0000_0100).unwrap();
        pb.host_release64(0x10_0000_0000, 0x2_0000_0003, true, true)
            .unwrap();
        pb.ce_copy(0x30_0000_0000, 0x40_0000_0004, 0x1234).unwrap();
        pb.ce_release64(0x10_0000_0010, 9, true).unwrap();
        pb.wfi().unwrap();
        let n_words = pb.len();
        let words = &w[..n_words];
        let (ms, n) = methods(words);
        let ms: [Method; 64] = ms.map(|m| {
            m.unwrap_or(Method {
                header_index: 0,
                op: SecOp::IncMethod,
                subchannel: 0,
                method: 0,
                data: 0,
                class: None,
            })
        });
        let got = |i: usize| (ms[i].name().unwrap_or("?"), ms[i].data);
        assert_eq!(got(0), ("SET_OBJECT", HOPPER_COMPUTE_A));
        assert_eq!(got(1), ("SET_OBJECT", HOPPER_DMA_COPY_A));
        assert_eq!(got(2), ("SEM_ADDR_LO", 0x40));
        assert_eq!(got(3), ("SEM_ADDR_HI", 0x10));
        assert_eq!(got(4), ("SEM_PAYLOAD_LO", 7));
        assert_eq!(got(5), ("SEM_PAYLOAD_HI", 1));
        assert_eq!(got(6).0, "SEM_EXECUTE");
        let mut s = FmtBuf::default();
        fmt::write(&mut s, format_args!("{}", Fields(ms[6]))).unwrap();
        assert_eq!(
            s.as_str(),
            "OPERATION=ACQ_CIRC_GEQ PAYLOAD_SIZE=64BIT ACQUIRE_SWITCH_TSG=EN"
        );
        assert_eq!(got(7).0, "INVALIDATE_SHADER_CACHES_NO_WFI");
        assert_eq!(ms[7].class, Some(HOPPER_COMPUTE_A));
        assert_eq!(got(8), ("WAIT_FOR_IDLE", 0));
        assert_eq!(got(9), ("SEND_PCAS_A", 0x2000_0001));
        assert_eq!(got(10), ("SEND_SIGNALING_PCAS2_B", 0xa));
        assert_eq!(got(15).0, "SEM_EXECUTE");
        assert_eq!(
            ms[15].data & 7,
            host::sem_execute::OPERATION_RELEASE,
            "release"
        );
        assert_eq!(got(16), ("OFFSET_IN_UPPER", 0x30));
        assert_eq!(got(17), ("OFFSET_IN_LOWER", 0));
        assert_eq!(got(18), ("OFFSET_OUT_UPPER", 0x40));
        assert_eq!(got(19), ("OFFSET_OUT_LOWER", 4));
        assert_eq!(got(20), ("LINE_LENGTH_IN", 0x1234));
        assert_eq!(got(21).0, "LAUNCH_DMA");
        assert_eq!(ms[21].class, Some(HOPPER_DMA_COPY_A));
        assert_eq!(got(22), ("SET_SEMAPHORE_A", 0x10));
        assert_eq!(got(23), ("SET_SEMAPHORE_B", 0x10));
        assert_eq!(got(24), ("SET_SEMAPHORE_PAYLOAD", 9));
        assert_eq!(got(25), ("SET_SEMAPHORE_PAYLOAD_UPPER", 0));
        let mut s = FmtBuf::default();
        fmt::write(&mut s, format_args!("{}", Fields(ms[26]))).unwrap();
        assert_eq!(
            s.as_str(),
            "DATA_TRANSFER_TYPE=NONE FLUSH_ENABLE=TRUE SEMAPHORE_TYPE=RELEASE_FOUR_WORD_SEMAPHORE \
             SEMAPHORE_PAYLOAD_SIZE=TWO_WORD"
        );
        assert_eq!(got(27), ("WFI", 1));
        assert_eq!(n, 28);
    }

    #[test]
    fn non_inc_one_inc_and_errors() {
        let mut w = [0u32; 16];
        let mut pb = PushBuffer::new(&mut w);
        pb.non_inc(4, 0x400, &[1, 2]).unwrap();
        pb.one_inc(4, 0x400, &[3, 4, 5]).unwrap();
        let len = pb.len();
        let (ms, n) = methods(&w[..len]);
        let offs: [u32; 5] = core::array::from_fn(|i| ms[i].map(|m| m.method).unwrap_or(0));
        assert_eq!(n, 5);
        assert_eq!(offs, [0x400, 0x400, 0x400, 0x404, 0x404]);
        // Truncated: header says 3 words, 1 present.
        let words = [
            Header {
                op: SecOp::IncMethod,
                subchannel: 0,
                method: 0x5c,
                count: 3,
            }
            .encode(),
            7,
        ];
        let r: [_; 1] = core::array::from_fn(|_| Decoder::new(&words).next());
        assert!(matches!(
            r[0],
            Some(Err(DecodeError::Truncated {
                count: 3,
                left: 1,
                ..
            }))
        ));
        // A zero word is a NOP; END_PB_SEGMENT stops.
        let words = [0, 7 << 29, 0x2001_0000];
        let items: [_; 3] = {
            let mut d = Decoder::new(&words);
            [d.next(), d.next(), d.next()]
        };
        assert_eq!(items[0], Some(Ok(Item::Nop { index: 0 })));
        assert_eq!(items[1], Some(Ok(Item::EndSegment { index: 1 })));
        assert_eq!(items[2], None);
        let words = [6 << 29];
        assert!(matches!(
            Decoder::new(&words).next(),
            Some(Err(DecodeError::UnsupportedOpcode { .. }))
        ));
    }

    /// A tiny no_std string sink for formatting tests.
    struct FmtBuf {
        buf: [u8; 256],
        len: usize,
    }
    impl Default for FmtBuf {
        fn default() -> Self {
            FmtBuf {
                buf: [0; 256],
                len: 0,
            }
        }
    }
    impl FmtBuf {
        fn as_str(&self) -> &str {
            core::str::from_utf8(&self.buf[..self.len]).unwrap()
        }
    }
    impl fmt::Write for FmtBuf {
        fn write_str(&mut self, s: &str) -> fmt::Result {
            let end = self.len + s.len();
            self.buf
                .get_mut(self.len..end)
                .ok_or(fmt::Error)?
                .copy_from_slice(s.as_bytes());
            self.len = end;
            Ok(())
        }
    }
}
