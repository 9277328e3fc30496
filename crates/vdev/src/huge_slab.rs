//! Memory in huge pages, cut into power-of-two slots of 64 KiB to 4 MiB: the backing
//! of block buffers (`AlignedBuf`) and read stages (`staging`), so O_DIRECT transfers
//! reach the disk as few, whole requests.
//!
//! Why: the block layer cuts a request at the device's segment limit (`max_segments`,
//! 254 on virtio disks), and a segment is a physically contiguous run of memory. A
//! 4 MiB read into buffers made of scattered 4 KiB pages is up to 1,024 segments and
//! is split into several requests; this VM's disk serves few large runs 1.5-1.9x
//! faster than many small ones (`bench/disk-submission.sh`). A slot never crosses a
//! 2 MiB huge page unless it is larger than one, so a 4 MiB read into 32 records of
//! 128 KiB is at most 32 segments: one request, with no copy. Allocators give no
//! such guarantee (mimalloc's large-page option gave no huge pages here), hence this.
//!
//! How: memory is taken `REGION_BYTES` at a time, advised `MADV_HUGEPAGE` before its
//! first touch and collapsed (`MADV_COLLAPSE`, Linux 6.1) after it; only a region the
//! kernel reports as collapsed is used. It is then leaked (it lives as long as the
//! process) and split into `&'static mut` slots of one size class, so a slot is owned
//! by exactly one holder at a time with no `unsafe` beyond the two advice calls.
//! Without huge pages (an old kernel, THP disabled, memory too fragmented to compact)
//! `take` answers `None`, callers use ordinary memory, and everything is as correct,
//! just no faster; a failed region is freed and the next try waits `RETRY_AFTER`.
//!
//! Regions are made by one background thread (`grower`), never by `take`: collapsing
//! a region took 5-320 ms on this VM, 13 regions were made at once by the reads of a
//! freshly started daemon, and a client's first read then waited up to 2.3 s. `take`
//! asks for a region when its class runs low (a quarter of a region's slots free) and,
//! when none is free, answers `None` at once: that one buffer is ordinary memory.
//! Tests that need slots now call `reserve`, which grows the slab in the calling
//! thread.
//!
//! Invariants: slots of one class never overlap and are aligned to their size (so to
//! a sector); a slot is on its free list or held by one owner, never both; at most one
//! region per class is being made at a time (`growing`), its bytes counted in
//! `reserved` from when it is asked for; regions never move and are never returned
//! (`slab_max_bytes` bounds them, half of memory; beyond it, `take` answers `None`
//! once the free slots are gone). The kernel may still split a huge page later
//! (swap under memory pressure): `segments_at_most` is then an underestimate and a
//! read is split into more requests, which is slower, never wrong.

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex, OnceLock, RwLock};
use std::time::{Duration, Instant};

/// The smallest slot: smaller buffers span few pages and gain nothing.
pub const MIN_SLOT: usize = 64 << 10;
/// The largest slot: a read stage (`staging::STAGE_BYTES`).
pub const MAX_SLOT: usize = 4 << 20;
pub const HUGE_PAGE: usize = 2 << 20;
const PAGE: usize = 4096;
/// Memory is taken from the allocator this much at a time (16 huge pages).
const REGION_BYTES: usize = 32 << 20;
/// Regions taken at most: half of the machine's memory, so an ARC of the default size
/// (a quarter of memory for each pool) lives in huge pages, and the rest of memory
/// stays with the allocator. Memory the slab has taken stays with it (as the allocator
/// keeps what it has taken), reused by later buffers.
fn slab_max_bytes() -> usize {
    static MAX: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *MAX.get_or_init(|| physical_memory_bytes().unwrap_or(2 << 30) / 2)
}
/// After a region could not get huge pages, no new region is tried for this long.
const RETRY_AFTER: Duration = Duration::from_secs(1);
const CLASSES: usize = (MAX_SLOT / MIN_SLOT).trailing_zeros() as usize + 1;

struct Slab {
    free: [Vec<&'static mut [u8]>; CLASSES],
    /// Bytes of regions taken, and of regions asked for or being made.
    reserved: usize,
    retry_at: Option<Instant>,
    /// Per class: a region is asked for or being made.
    growing: [bool; CLASSES],
    /// Classes the grower is asked to make a region of, in order.
    wanted: VecDeque<usize>,
}

static SLAB: Mutex<Slab> = Mutex::new(Slab {
    free: [const { Vec::new() }; CLASSES],
    reserved: 0,
    retry_at: None,
    growing: [false; CLASSES],
    wanted: VecDeque::new(),
});

/// Signalled when a class is wanted (for the grower) and when a region of a class is
/// done (for `reserve`).
static CHANGED: Condvar = Condvar::new();

/// Address ranges of the regions in use (huge-page backed), sorted by start and
/// disjoint, for `segments_at_most`.
static REGIONS: RwLock<Vec<(usize, usize)>> = RwLock::new(Vec::new());

/// The machine's memory, MemTotal of /proc/meminfo.
pub fn physical_memory_bytes() -> Option<usize> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: usize = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// The class of a buffer of `len` bytes: its slot is `MIN_SLOT << class`. None for
/// buffers too small to gain (`len` at most half of `MIN_SLOT`) or too large.
fn class_of(len: usize) -> Option<usize> {
    if len <= MIN_SLOT / 2 || len > MAX_SLOT {
        return None;
    }
    let slot = len.next_power_of_two().max(MIN_SLOT);
    Some((slot / MIN_SLOT).trailing_zeros() as usize)
}

/// A slot of at least `len` bytes (its class's size, a power of two) in huge pages,
/// or None: `len` outside the slab's classes, no slot free right now (the grower is
/// asked for more), the slab full, or no huge pages. Never waits for memory to be
/// made. Contents are unspecified. Give it back with `give`.
pub fn take(len: usize) -> Option<&'static mut [u8]> {
    let class = class_of(len)?;
    let mut slab = lock();
    let slot = slab.free[class].pop();
    if slab.free[class].len() < low_water(class) {
        ask_for_region(&mut slab, class);
    }
    slot
}

/// Makes sure `slots` slots of `len`'s class are free, growing the slab in the calling
/// thread (after waiting for a region of the class the grower is making); false if it
/// cannot (the slab full, or no huge pages). For tests, which need huge pages now.
#[cfg(test)]
pub(crate) fn reserve(len: usize, slots: usize) -> bool {
    let Some(class) = class_of(len) else {
        return false;
    };
    let mut slab = lock();
    loop {
        if slab.free[class].len() >= slots {
            return true;
        }
        if slab.growing[class] {
            slab = CHANGED.wait(slab).unwrap_or_else(|e| e.into_inner());
            continue;
        }
        if !reserve_region(&mut slab) {
            return false;
        }
        slab.growing[class] = true;
        drop(slab);
        add_region(class);
        slab = lock();
    }
}

/// Slots of `class` per region.
fn slots_per_region(class: usize) -> usize {
    REGION_BYTES / (MIN_SLOT << class)
}

/// Below this many free slots of `class`, `take` asks for another region.
fn low_water(class: usize) -> usize {
    (slots_per_region(class) / 4).max(1)
}

/// Counts a region's bytes as taken, if the bound and the retry wait allow one.
fn reserve_region(slab: &mut Slab) -> bool {
    if slab.reserved + REGION_BYTES > slab_max_bytes()
        || slab.retry_at.is_some_and(|t| Instant::now() < t)
    {
        return false;
    }
    slab.reserved += REGION_BYTES;
    true
}

/// Asks the grower for a region of `class`, unless one is on its way or none may be
/// made now.
fn ask_for_region(slab: &mut Slab, class: usize) {
    if slab.growing[class] || !grower_running() || !reserve_region(slab) {
        return;
    }
    slab.growing[class] = true;
    slab.wanted.push_back(class);
    CHANGED.notify_all();
}

/// Starts the grower on first use; false if its thread could not be started (then no
/// region is made, and buffers are heap memory, as without huge pages).
fn grower_running() -> bool {
    static RUNNING: OnceLock<bool> = OnceLock::new();
    *RUNNING.get_or_init(|| {
        std::thread::Builder::new()
            .name("huge-slab".into())
            .spawn(grower)
            .is_ok()
    })
}

/// Makes the regions `take` asks for, one at a time, for the life of the process.
fn grower() {
    loop {
        let class = {
            let mut slab = lock();
            loop {
                if let Some(class) = slab.wanted.pop_front() {
                    break class;
                }
                slab = CHANGED.wait(slab).unwrap_or_else(|e| e.into_inner());
            }
        };
        add_region(class);
    }
}

/// Makes a region reserved (`reserve_region`) for `class` and puts its slots on the
/// class's free list; on failure gives the reservation back and holds new regions
/// off for `RETRY_AFTER`. Ends the class's `growing`. Runs outside the lock: zeroing
/// and collapsing 32 MiB takes milliseconds, sometimes hundreds.
fn add_region(class: usize) {
    let region = new_region();
    let mut slab = lock();
    slab.growing[class] = false;
    CHANGED.notify_all();
    let Some(region) = region else {
        slab.reserved -= REGION_BYTES;
        slab.retry_at = Some(Instant::now() + RETRY_AFTER);
        return;
    };
    let start = region.as_ptr() as usize;
    let mut regions = REGIONS.write().unwrap_or_else(|e| e.into_inner());
    let at = regions.partition_point(|&(s, _)| s < start);
    regions.insert(at, (start, start + region.len()));
    drop(regions);
    slab.free[class].extend(region.chunks_exact_mut(MIN_SLOT << class));
}

/// Returns a slot from `take` to its free list.
pub fn give(slot: &'static mut [u8]) {
    let class = class_of(slot.len()).expect("a slot is of a slab class");
    assert_eq!(slot.len(), MIN_SLOT << class, "a whole slot comes back");
    lock().free[class].push(slot);
}

fn lock() -> std::sync::MutexGuard<'static, Slab> {
    SLAB.lock().unwrap_or_else(|e| e.into_inner())
}

/// `REGION_BYTES` aligned to a huge page and backed by huge pages, leaked; None if
/// the kernel would not collapse it into huge pages (then it is freed).
fn new_region() -> Option<&'static mut [u8]> {
    // Room to place an aligned region anywhere in it.
    let mut storage: Vec<u8> = Vec::with_capacity(REGION_BYTES + HUGE_PAGE);
    let addr = storage.as_ptr() as usize;
    let start = (HUGE_PAGE - addr % HUGE_PAGE) % HUGE_PAGE;
    // SAFETY: madvise only advises the kernel how to back `[addr + start, +
    // REGION_BYTES)`, which lies inside this vector's allocation (capacity
    // REGION_BYTES + HUGE_PAGE, start < HUGE_PAGE) and is owned by it; it reads and
    // writes no memory and cannot invalidate the allocation. MADV_HUGEPAGE before the
    // first touch lets the faults below take huge pages. An error is only lost advice.
    unsafe {
        libc::madvise(
            (addr + start) as *mut libc::c_void,
            REGION_BYTES,
            libc::MADV_HUGEPAGE,
        );
    }
    storage.resize(REGION_BYTES + HUGE_PAGE, 0);
    // Memory the allocator had touched before keeps its small pages; MADV_COLLAPSE
    // rebuilds them as huge pages, and answers 0 only if the whole range is huge pages
    // afterwards (already, or now).
    // SAFETY: as above; the range is inside the (now initialised) vector, and collapse
    // preserves every byte of it.
    let collapsed = unsafe {
        libc::madvise(
            (storage.as_mut_ptr() as usize + start) as *mut libc::c_void,
            REGION_BYTES,
            libc::MADV_COLLAPSE,
        )
    } == 0;
    if !collapsed {
        return None;
    }
    let all: &'static mut [u8] = storage.leak();
    let region = &mut all[start..start + REGION_BYTES];
    assert_eq!(region.as_ptr() as usize % HUGE_PAGE, 0, "region aligned");
    Some(region)
}

/// At most how many device segments (physically contiguous runs) a transfer into
/// `pieces` (address, length) takes: a piece in the slab spans whole huge pages, any
/// other piece may have every 4 KiB page apart. Neighbouring pieces that happen to be
/// contiguous are counted apart, so this is an upper bound.
pub fn segments_at_most(pieces: impl Iterator<Item = (usize, usize)>) -> usize {
    let regions = REGIONS.read().unwrap_or_else(|e| e.into_inner());
    pieces
        .filter(|&(_, len)| len > 0)
        .map(|(addr, len)| {
            let end = addr + len;
            // The last region starting at or before `addr` is the only one that can
            // hold the piece.
            let before = regions.partition_point(|&(s, _)| s <= addr);
            let in_slab = before > 0 && end <= regions[before - 1].1;
            let unit = if in_slab { HUGE_PAGE } else { PAGE };
            (end - 1) / unit - addr / unit + 1
        })
        .sum()
}

/// Whether `pieces` (address, length) fit in `limit` segments whatever memory they
/// are in (every 4 KiB page apart): small transfers need no look at the slab.
pub fn fits_anyway(pieces: impl Iterator<Item = (usize, usize)>, limit: usize) -> bool {
    pieces
        .map(|(addr, len)| len.div_ceil(PAGE) + usize::from(addr % PAGE != 0))
        .sum::<usize>()
        <= limit
}

/// A slot of `len`'s class, growing the slab in this thread if none is free: for
/// tests, which share the slab with tests running beside them. Panics if the slab
/// cannot give one (no huge pages here must not pass unnoticed).
#[cfg(test)]
pub(crate) fn take_now(len: usize) -> &'static mut [u8] {
    for _ in 0..100 {
        if let Some(slot) = take(len) {
            return slot;
        }
        assert!(reserve(len, 1), "huge pages for the slab on this machine");
    }
    panic!("tests beside this one took every slot of {len} bytes 100 times");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn take_never_makes_a_region_itself_and_the_grower_refills_the_class() {
        // The 64 KiB class, which no other test here uses much: drained faster than
        // any region can be made, `take` must answer None rather than make one. Eight
        // regions' worth is the bound; a `take` that made regions itself would give
        // them all.
        assert!(
            reserve(MIN_SLOT, 1),
            "huge pages for the slab on this machine"
        );
        let bound = 8 * slots_per_region(0);
        let mut held = Vec::new();
        let mut refused = false;
        for _ in 0..bound {
            match take(MIN_SLOT) {
                Some(slot) => held.push(slot),
                None => {
                    refused = true;
                    break;
                }
            }
        }
        assert!(
            refused,
            "take handed out {bound} slots, so it made regions in the caller"
        );
        // The class is low: a region was asked for, and the grower makes it.
        let mut slab = lock();
        while slab.growing[0] {
            slab = CHANGED.wait(slab).unwrap();
        }
        let free = slab.free[0].len();
        drop(slab);
        assert!(free > 0, "the grower added no 64 KiB slots");
        for slot in held {
            give(slot);
        }
    }

    #[test]
    fn the_slab_takes_at_most_half_of_memory() {
        let total = physical_memory_bytes().expect("/proc/meminfo says MemTotal");
        assert!(total > 64 << 20, "{total}");
        assert_eq!(slab_max_bytes(), total / 2);
    }

    #[test]
    fn only_pieces_inside_one_region_count_as_huge_pages() {
        let slot = take_now(MAX_SLOT);
        let at = slot.as_ptr() as usize;
        let (start, end) = *REGIONS
            .read()
            .unwrap()
            .iter()
            .find(|&&(s, e)| s <= at && at < e)
            .expect("a slot lies in a registered region");
        assert_eq!(segments_at_most([(start, 2 * HUGE_PAGE)].into_iter()), 2);
        assert_eq!(
            segments_at_most([(end - HUGE_PAGE, HUGE_PAGE)].into_iter()),
            1
        );
        // Across the region's end: its small pages, three of them.
        assert_eq!(segments_at_most([(end - PAGE, 3 * PAGE)].into_iter()), 3);
        give(slot);
        // The bound that needs no look at the slab: every page apart.
        assert!(fits_anyway([(0, 128 * PAGE)].into_iter(), 128));
        assert!(!fits_anyway([(512, 128 * PAGE)].into_iter(), 128));
        assert!(!fits_anyway(
            [(0, 64 * PAGE), (1 << 30, 65 * PAGE)].into_iter(),
            128
        ));
    }

    #[test]
    fn classes_are_powers_of_two_from_64k_to_4m() {
        assert_eq!(class_of(MIN_SLOT / 2), None);
        assert_eq!(class_of(MIN_SLOT / 2 + 512), Some(0));
        assert_eq!(class_of(128 << 10), Some(1));
        assert_eq!(class_of((128 << 10) + 512), Some(2));
        assert_eq!(class_of(MAX_SLOT), Some(CLASSES - 1));
        assert_eq!(class_of(MAX_SLOT + 1), None);
    }

    #[test]
    fn slots_are_aligned_apart_reused_and_counted_as_huge() {
        // This machine's kernel (6.1 or later, THP not disabled) gives huge pages; a
        // None here means the slab cannot work on it, which must not pass unnoticed.
        let a = take_now(128 << 10);
        let b = take_now(100 << 10);
        assert_eq!(a.len(), 128 << 10);
        assert_eq!(b.len(), 128 << 10);
        for s in [&a, &b] {
            assert_eq!(s.as_ptr() as usize % (128 << 10), 0);
        }
        let (pa, pb) = (a.as_ptr() as usize, b.as_ptr() as usize);
        assert!(pa + a.len() <= pb || pb + b.len() <= pa, "slots overlap");
        a.fill(1);
        b.fill(2);
        assert!(a.iter().all(|&x| x == 1));
        // A 128 KiB slot is one segment; the same length of heap memory may be 32.
        assert_eq!(segments_at_most([(pa, a.len())].into_iter()), 1);
        let heap = vec![0u8; 128 << 10];
        assert!(segments_at_most([(heap.as_ptr() as usize, heap.len())].into_iter()) >= 32);
        // A 4 MiB slot spans two huge pages.
        let stage = take_now(MAX_SLOT);
        assert_eq!(stage.as_ptr() as usize % HUGE_PAGE, 0);
        assert_eq!(
            segments_at_most([(stage.as_ptr() as usize, stage.len())].into_iter()),
            2
        );
        give(stage);
        give(b);
        give(a);
    }
}
