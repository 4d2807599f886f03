//! Host memory of the server's machine: [`RemoteDma`] (MAP_SYSMEM) and [`RemoteBuffer`]
//! (SYSMEM_READ / SYSMEM_WRITE in chunks), with the free list of dropped buffers.

use std::fmt;
use std::sync::Arc;

use nvbare_core::hal::{DmaAllocator, DmaBuffer, HalError, check_range};

use super::super::wire::{Cmd, Request};
use super::{Conn, FreeBuffer, RemoteError, Report, SYSMEM_CHUNK, SYSMEM_PAGE, Shared};

/// Host memory of a remote GPU's server (MAP_SYSMEM, contiguous).
#[derive(Debug, Clone)]
pub struct RemoteDma {
    pub(super) shared: Arc<Shared>,
}

impl RemoteDma {
    /// Allocates `size` bytes (rounded up to 4 KiB), with the error's whole text.
    pub fn alloc(&self, size: usize) -> Result<RemoteBuffer, RemoteError> {
        let pages = (size.max(1) as u64).div_ceil(SYSMEM_PAGE);
        let len = usize::try_from(pages * SYSMEM_PAGE).map_err(|_| RemoteError::BadAnswer {
            addr: self.shared.addr.clone(),
            cmd: Cmd::MapSysmem,
            reason: format!("{size} bytes do not fit this host"),
        })?;
        let reused = {
            let mut c = self.shared.lock();
            c.free
                .iter()
                .position(|f| f.len == len)
                .map(|i| c.free.swap_remove(i))
        };
        if let Some(f) = reused {
            let b = RemoteBuffer {
                shared: self.shared.clone(),
                handle: f.handle,
                dev_addr: f.dev_addr,
                len,
            };
            b.fill_chunked(0, len, 0)?;
            return Ok(b);
        }
        let (handle, dev_addr) = self
            .shared
            .run(Report::Now, |c, s| map_sysmem(c, s, pages))?;
        Ok(RemoteBuffer {
            shared: self.shared.clone(),
            handle,
            dev_addr,
            len,
        })
    }
}

/// MAP_SYSMEM of `pages` contiguous pages: reads the whole address list (in pieces, so the
/// stream stays in step) and checks it.
fn map_sysmem(c: &mut Conn, s: &Shared, pages: u64) -> Result<(u32, u64), RemoteError> {
    let size = pages * SYSMEM_PAGE;
    let r = c.call(s, Cmd::MapSysmem, 0, [size, 1, 0], &[])?;
    let want = pages * 8;
    if r.r0 != want {
        // The stream cannot be resynchronised without reading what the server announced.
        return Err(RemoteError::WrongLength {
            addr: s.addr.clone(),
            cmd: Cmd::MapSysmem,
            what: "bus addresses (8 per 4 KiB page asked for)",
            len: r.r0,
            expected: want,
        });
    }
    let mut first = None;
    let mut misplaced = None;
    let mut page = 0u64;
    let mut chunk = vec![0u8; 4096];
    while page < pages {
        let n = (pages - page).min(512) as usize;
        let piece = &mut chunk[..n * 8];
        c.read_exact(s, Cmd::MapSysmem, piece)?;
        for w in piece.chunks_exact(8) {
            let mut a = [0u8; 8];
            a.copy_from_slice(w);
            let got = u64::from_le_bytes(a);
            let base = *first.get_or_insert(got);
            let expected = base.wrapping_add(page * SYSMEM_PAGE);
            if misplaced.is_none() && got != expected {
                misplaced = Some((page, got, expected));
            }
            page += 1;
        }
    }
    let base = first.unwrap_or(0);
    let bad = |reason: String| RemoteError::BadAnswer {
        addr: s.addr.clone(),
        cmd: Cmd::MapSysmem,
        reason,
    };
    if let Some((page, got, expected)) = misplaced {
        return Err(RemoteError::NotContiguous {
            addr: s.addr.clone(),
            size,
            page,
            got,
            expected,
        });
    }
    if !base.is_multiple_of(SYSMEM_PAGE) || base.checked_add(size).is_none() {
        return Err(bad(format!(
            "bus address {base:#x} for {size} bytes is not a 4 KiB-aligned range"
        )));
    }
    let handle = u32::try_from(r.r1)
        .map_err(|_| bad(format!("handle {:#x} does not fit the request's u32", r.r1)))?;
    Ok((handle, base))
}

impl DmaAllocator for RemoteDma {
    type Buffer = RemoteBuffer;

    fn alloc_dma(&self, size: usize) -> Result<RemoteBuffer, HalError> {
        self.alloc(size).map_err(|e| match e {
            e if e.is_fatal() => HalError::DeviceLost,
            RemoteError::Server { .. } | RemoteError::NotContiguous { .. } => HalError::NoMemory {
                requested: size as u64,
            },
            e => e.to_hal(),
        })
    }
}

/// Host memory on the server, contiguous at [`DmaBuffer::dev_addr`]; read and written with
/// SYSMEM_READ / SYSMEM_WRITE of at most [`SYSMEM_CHUNK`] bytes each. Dropped, it is kept
/// for a later allocation of the same size (the protocol cannot free it).
pub struct RemoteBuffer {
    shared: Arc<Shared>,
    handle: u32,
    dev_addr: u64,
    len: usize,
}

impl fmt::Debug for RemoteBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RemoteBuffer")
            .field("addr", &self.shared.addr)
            .field("handle", &self.handle)
            .field("dev_addr", &format_args!("{:#x}", self.dev_addr))
            .field("len", &self.len)
            .finish()
    }
}

impl RemoteBuffer {
    /// The server's handle for it (the `bar` of SYSMEM_READ / SYSMEM_WRITE).
    pub fn handle(&self) -> u32 {
        self.handle
    }

    fn write_chunks(&self, offset: usize, src: &[u8]) -> Result<(), RemoteError> {
        self.shared.run(Report::Now, |c, s| {
            for (i, piece) in src.chunks(SYSMEM_CHUNK).enumerate() {
                let at = (offset + i * SYSMEM_CHUNK) as u64;
                let req = Request::new(
                    Cmd::SysmemWrite,
                    s.dev_id,
                    self.handle,
                    [at, piece.len() as u64, 0],
                );
                c.send(s, req, piece)?;
            }
            Ok(())
        })
    }

    fn fill_chunked(&self, offset: usize, len: usize, byte: u8) -> Result<(), RemoteError> {
        let chunk = vec![byte; len.min(SYSMEM_CHUNK)];
        let mut done = 0;
        while done < len {
            let n = (len - done).min(chunk.len());
            self.write_chunks(offset + done, &chunk[..n])?;
            done += n;
        }
        Ok(())
    }
}

impl DmaBuffer for RemoteBuffer {
    fn len(&self) -> usize {
        self.len
    }

    fn dev_addr(&self) -> u64 {
        self.dev_addr
    }

    fn read(&self, offset: usize, dst: &mut [u8]) -> Result<(), HalError> {
        check_range(offset as u64, dst.len() as u64, self.len as u64)?;
        self.shared
            .run(Report::Now, |c, s| {
                for (i, piece) in dst.chunks_mut(SYSMEM_CHUNK).enumerate() {
                    let at = (offset + i * SYSMEM_CHUNK) as u64;
                    c.call(
                        s,
                        Cmd::SysmemRead,
                        self.handle,
                        [at, piece.len() as u64, 0],
                        &[],
                    )?;
                    c.read_exact(s, Cmd::SysmemRead, piece)?;
                }
                Ok(())
            })
            .map_err(|e| e.to_hal())
    }

    fn write(&self, offset: usize, src: &[u8]) -> Result<(), HalError> {
        check_range(offset as u64, src.len() as u64, self.len as u64)?;
        self.write_chunks(offset, src).map_err(|e| e.to_hal())
    }

    fn fill(&self, offset: usize, len: usize, byte: u8) -> Result<(), HalError> {
        check_range(offset as u64, len as u64, self.len as u64)?;
        self.fill_chunked(offset, len, byte).map_err(|e| e.to_hal())
    }
}

impl Drop for RemoteBuffer {
    fn drop(&mut self) {
        let mut c = self.shared.lock();
        if c.broken.is_none() {
            c.free.push(FreeBuffer {
                handle: self.handle,
                dev_addr: self.dev_addr,
                len: self.len,
            });
        }
    }
}
