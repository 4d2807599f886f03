//! The radix3 page tables through which the GSP's bootloader reads the GSP-RM image.
//!
//! The image is handed to the GSP as 4 KiB pages anywhere in memory, described by a three-level
//! table of little-endian `u64` bus addresses, 512 per 4 KiB page (`LIBOS_MEMORY_REGION_RADIX_PAGE_LOG2`
//! = 12). OpenRM's `kgspCreateRadix3` lays out one allocation of pages:
//!
//! ```text
//! page 0              L0: one page; entry k = address of L1 page k
//! pages 1..           L1: entry k (over all L1 pages) = address of L2 page k
//! then                L2: entry k (over all L2 pages) = address of data page k
//! then                data: the image, 4 KiB per page, the last page zero-padded
//! ```
//!
//! Unused entries are zero. `GspFwWprMeta.sysmemAddrOfRadix3Elf` is the address of page 0 and
//! `sizeOfRadix3Elf` the image size. L0 being a single page limits images to 512³ pages
//! (512 GiB).
//!
//! [`Radix3`] produces the pages for any placement: the caller gives the bus address of each
//! page of the allocation (contiguous or a scatter list), and gets the bytes to store there.
//! [`walk`] follows the tables from the root the way the GSP does, to check a placement.
//!
//! ```
//! use nvbare_gsp_firmware::radix3::{Radix3, walk};
//!
//! let image = vec![0xabu8; 5000];
//! let r3 = Radix3::new(&image).unwrap();
//! assert_eq!(r3.layout().total_pages(), 5); // L0, L1, L2 and two data pages
//! // Place the allocation contiguously at bus address 0x10_0000.
//! let addr = |page: u64| 0x10_0000 + page * 4096;
//! let pages: Vec<[u8; 4096]> = (0..5).map(|i| r3.page(i, addr).unwrap()).collect();
//! // Walk it back like the GSP would.
//! let data = walk(r3.layout(), addr(0), |table, index| {
//!     let page = &pages[((table - 0x10_0000) / 4096) as usize];
//!     let e = &page[index as usize * 8..][..8];
//!     Ok(u64::from_le_bytes(e.try_into().unwrap()))
//! })
//! .unwrap();
//! assert_eq!(data, vec![addr(3), addr(4)]);
//! ```

use alloc::vec::Vec;

use crate::Error;

/// Bytes per radix3 page (`LIBOS_MEMORY_REGION_RADIX_PAGE_SIZE`).
pub const PAGE_SIZE: u64 = 4096;
/// Entries per table page: 4 KiB of `u64`.
pub const ENTRIES_PER_PAGE: u64 = PAGE_SIZE / 8;
/// Levels including the data level (`radix3[4]` in `kgspCreateRadix3`).
pub const LEVELS: usize = 4;

/// Page counts of each level for an image of a given size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Radix3Layout {
    size: u64,
    /// Pages per level: `[L0, L1, L2, data]`.
    pages: [u64; LEVELS],
}

impl Radix3Layout {
    /// The layout for an image of `size` bytes.
    pub fn new(size: u64) -> Result<Self, Error> {
        if size == 0 {
            return Err(Error::Invalid {
                what: "radix3 image size",
                value: 0,
                why: "the image is empty",
            });
        }
        let mut pages = [0u64; LEVELS];
        // size > 0, so (size - 1) / PAGE_SIZE + 1 cannot overflow.
        pages[LEVELS - 1] = (size - 1) / PAGE_SIZE + 1;
        for i in (1..LEVELS).rev() {
            pages[i - 1] = (pages[i] - 1) / ENTRIES_PER_PAGE + 1;
        }
        if pages[0] != 1 {
            return Err(Error::Invalid {
                what: "radix3 image size",
                value: size,
                why: "larger than one L0 page can describe (512^3 pages)",
            });
        }
        Ok(Radix3Layout { size, pages })
    }

    /// The image size in bytes (`sizeOfRadix3Elf`).
    pub fn image_size(&self) -> u64 {
        self.size
    }

    /// Pages in `level` (0..=2 tables, 3 data); 0 for other levels.
    pub fn level_pages(&self, level: usize) -> u64 {
        self.pages.get(level).copied().unwrap_or(0)
    }

    /// Index of the first page of `level` within the allocation.
    pub fn level_start(&self, level: usize) -> u64 {
        self.pages.iter().take(level).sum()
    }

    /// Pages holding tables (L0 + L1 + L2).
    pub fn table_pages(&self) -> u64 {
        self.level_start(LEVELS - 1)
    }

    /// Pages holding the image.
    pub fn data_pages(&self) -> u64 {
        self.pages[LEVELS - 1]
    }

    /// All pages of the allocation.
    pub fn total_pages(&self) -> u64 {
        self.table_pages() + self.data_pages()
    }

    /// `(level, index within the level)` of allocation page `page`.
    pub fn locate(&self, page: u64) -> Option<(usize, u64)> {
        let mut start = 0;
        for (level, &n) in self.pages.iter().enumerate() {
            if page < start + n {
                return Some((level, page - start));
            }
            start += n;
        }
        None
    }
}

/// Radix3 tables over an image: the page contents for a placement chosen by the caller.
#[derive(Debug, Clone, Copy)]
pub struct Radix3<'a> {
    layout: Radix3Layout,
    image: &'a [u8],
}

impl<'a> Radix3<'a> {
    /// Radix3 tables over `image` (usually [`crate::GspFirmware::image`]).
    pub fn new(image: &'a [u8]) -> Result<Self, Error> {
        Ok(Radix3 {
            layout: Radix3Layout::new(image.len() as u64)?,
            image,
        })
    }

    /// Page counts.
    pub fn layout(&self) -> &Radix3Layout {
        &self.layout
    }

    /// The contents of allocation page `page` when page `i` of the allocation lives at bus
    /// address `page_addr(i)`. Table pages get the addresses of the next level's pages; data
    /// pages get the image bytes. Page 0's address is the root (`sysmemAddrOfRadix3Elf`).
    pub fn page(&self, page: u64, page_addr: impl Fn(u64) -> u64) -> Result<[u8; 4096], Error> {
        let mut out = [0u8; PAGE_SIZE as usize];
        self.write_page(page, page_addr, &mut out)?;
        Ok(out)
    }

    /// Like [`Radix3::page`], into `out` (which is overwritten entirely).
    pub fn write_page(
        &self,
        page: u64,
        page_addr: impl Fn(u64) -> u64,
        out: &mut [u8; 4096],
    ) -> Result<(), Error> {
        out.fill(0);
        let (level, index) = self.layout.locate(page).ok_or(Error::Invalid {
            what: "radix3 page index",
            value: page,
            why: "beyond the radix3 allocation",
        })?;
        if level == LEVELS - 1 {
            let start = index * PAGE_SIZE;
            let end = (start + PAGE_SIZE).min(self.layout.size);
            // start < size because index < data_pages; both fit usize since the image does.
            let src = self
                .image
                .get(start as usize..end as usize)
                .ok_or(Error::OutOfBounds {
                    what: "radix3 data page",
                    offset: start,
                    len: PAGE_SIZE,
                    limit: self.layout.size,
                })?;
            if let Some(dst) = out.get_mut(..src.len()) {
                dst.copy_from_slice(src);
            }
            return Ok(());
        }
        // Entries of this table page point at the next level's pages.
        let next = level + 1;
        let next_start = self.layout.level_start(next);
        let next_count = self.layout.level_pages(next);
        let first = index * ENTRIES_PER_PAGE;
        let last = (first + ENTRIES_PER_PAGE).min(next_count);
        for (slot, k) in out.chunks_exact_mut(8).zip(first..last) {
            slot.copy_from_slice(&page_addr(next_start + k).to_le_bytes());
        }
        Ok(())
    }

    /// All pages in allocation order (see [`Radix3::page`]).
    pub fn pages<'s, F>(&'s self, page_addr: F) -> impl Iterator<Item = [u8; 4096]> + 's
    where
        F: Fn(u64) -> u64 + 's,
    {
        (0..self.layout.total_pages()).filter_map(move |i| self.page(i, &page_addr).ok())
    }
}

/// Follows radix3 tables from `root` the way the GSP bootloader does and returns the address of
/// every data page, in image order.
///
/// `read_entry(table_page_addr, index)` returns entry `index` (0..512) of the table page at
/// `table_page_addr`. A zero entry where a page is needed is an error.
pub fn walk(
    layout: &Radix3Layout,
    root: u64,
    mut read_entry: impl FnMut(u64, u64) -> Result<u64, Error>,
) -> Result<Vec<u64>, Error> {
    let n = layout.data_pages();
    // n is bounded by Radix3Layout::new (at most 512^3); reserve no more than a table's worth
    // up front, growth handles the rest.
    let mut out = Vec::with_capacity(n.min(ENTRIES_PER_PAGE * ENTRIES_PER_PAGE) as usize);
    let mut cache_l1: Option<(u64, u64)> = None;
    let mut cache_l2: Option<(u64, u64)> = None;
    for j in 0..n {
        let l1_no = j / (ENTRIES_PER_PAGE * ENTRIES_PER_PAGE);
        let l2_no = j / ENTRIES_PER_PAGE;
        let l1 = match cache_l1 {
            Some((no, a)) if no == l1_no => a,
            _ => {
                let a = nonzero(read_entry(root, l1_no)?, "radix3 L0 entry", l1_no)?;
                cache_l1 = Some((l1_no, a));
                a
            }
        };
        let l2 = match cache_l2 {
            Some((no, a)) if no == l2_no => a,
            _ => {
                let a = nonzero(
                    read_entry(l1, l2_no % ENTRIES_PER_PAGE)?,
                    "radix3 L1 entry",
                    l2_no,
                )?;
                cache_l2 = Some((l2_no, a));
                a
            }
        };
        let data = nonzero(read_entry(l2, j % ENTRIES_PER_PAGE)?, "radix3 L2 entry", j)?;
        out.push(data);
    }
    Ok(out)
}

fn nonzero(addr: u64, what: &'static str, index: u64) -> Result<u64, Error> {
    if addr == 0 {
        Err(Error::Invalid {
            what,
            value: index,
            why: "entry is zero where a page address is needed",
        })
    } else {
        Ok(addr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::collections::BTreeMap;
    use alloc::vec;
    use proptest::prelude::*;

    #[test]
    fn layout_matches_kgsp_create_radix3() {
        // One page of image: 1 + 1 + 1 table pages.
        let l = Radix3Layout::new(1).unwrap();
        assert_eq!(l.pages, [1, 1, 1, 1]);
        // 512 data pages still fit one L2 page; 513 need two.
        assert_eq!(Radix3Layout::new(512 * 4096).unwrap().pages, [1, 1, 1, 512]);
        assert_eq!(
            Radix3Layout::new(512 * 4096 + 1).unwrap().pages,
            [1, 1, 2, 513]
        );
        // The r570.144 ga102 image: 0x3c99000 bytes = 15513 pages -> 31 L2 pages.
        let l = Radix3Layout::new(0x3c9_9000).unwrap();
        assert_eq!(l.pages, [1, 1, 31, 15513]);
        assert_eq!(l.table_pages(), 33);
        // The largest image: 512^3 pages.
        let max = 512u64 * 512 * 512 * 4096;
        assert_eq!(
            Radix3Layout::new(max).unwrap().pages,
            [1, 512, 512 * 512, 512 * 512 * 512]
        );
        assert!(Radix3Layout::new(max + 1).is_err());
        assert!(Radix3Layout::new(0).is_err());
    }

    /// A model of memory: page address -> contents.
    fn place(r3: &Radix3<'_>, addr: &dyn Fn(u64) -> u64) -> BTreeMap<u64, [u8; 4096]> {
        (0..r3.layout().total_pages())
            .map(|i| (addr(i), r3.page(i, addr).unwrap()))
            .collect()
    }

    fn read_back(mem: &BTreeMap<u64, [u8; 4096]>, layout: &Radix3Layout, root: u64) -> Vec<u8> {
        let data = walk(layout, root, |t, i| {
            let p = mem.get(&t).ok_or(Error::Missing { what: "page" })?;
            let e = &p[i as usize * 8..][..8];
            Ok(u64::from_le_bytes(e.try_into().unwrap()))
        })
        .unwrap();
        let mut out = Vec::new();
        for a in data {
            out.extend_from_slice(mem.get(&a).unwrap());
        }
        out.truncate(layout.image_size() as usize);
        out
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        #[test]
        fn scattered_placement_walks_back_to_the_image(
            len in 1usize..(600 * 4096),
            seed in any::<u64>(),
            fill in any::<u8>(),
        ) {
            let image: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(31) ^ fill).collect();
            let r3 = Radix3::new(&image).unwrap();
            // A scatter list: page i at a pseudo-random, distinct, page-aligned address.
            // i -> (i * odd ^ seed) mod 2^20 is a bijection, so the addresses are distinct.
            let addr = move |i: u64| {
                (1 << 40) + ((i.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ seed) & 0xf_ffff) * 4096
            };
            let mem = place(&r3, &addr);
            prop_assert_eq!(mem.len() as u64, r3.layout().total_pages());
            prop_assert_eq!(read_back(&mem, r3.layout(), addr(0)), image);
        }
    }

    #[test]
    fn unused_entries_are_zero_and_data_is_padded() {
        let image = vec![0x5au8; 4097];
        let r3 = Radix3::new(&image).unwrap();
        let addr = |i: u64| 0x1000_0000 + i * 4096;
        let l2 = r3.page(2, addr).unwrap();
        assert_eq!(&l2[..8], &addr(3).to_le_bytes());
        assert_eq!(&l2[8..16], &addr(4).to_le_bytes());
        assert!(l2[16..].iter().all(|&b| b == 0));
        let last = r3.page(4, addr).unwrap();
        assert_eq!(last[0], 0x5a);
        assert!(last[1..].iter().all(|&b| b == 0));
        assert!(r3.page(5, addr).is_err());
    }

    #[test]
    fn walk_rejects_zero_entries() {
        let l = Radix3Layout::new(4096).unwrap();
        let e = walk(&l, 0x1000, |_, _| Ok(0)).unwrap_err();
        assert!(matches!(
            e,
            Error::Invalid {
                what: "radix3 L0 entry",
                ..
            }
        ));
    }
}
