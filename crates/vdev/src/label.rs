//! Device labels: the only places of a device that are ever written in place.
//!
//! Every leaf device carries four 256 KiB labels, two at each end, so that a
//! device whose first or last megabyte is overwritten still identifies itself:
//!
//! ```text
//! L0 @ 0      L1 @ 256K   [ 3.5 MiB reserved | data area ... ]   L2 @ end-512K   L3 @ end-256K
//! ```
//!
//! `end` is the device size rounded down to 256 KiB. Each label is laid out as:
//!
//! | offset in label | size  | content |
//! |---|---|---|
//! | 0      | 4 KiB  | config header (see below) |
//! | 4 KiB  | 120 KiB | config payload (UTF-8 JSON, written by the pool layer) |
//! | 128 KiB | 32 x 4 KiB | uberblock ring: slot `txg % 32` holds the uberblock of `txg` |
//!
//! Config header (little-endian): bytes 0..8 magic `SHOALLBL`; 8..12 version (1);
//! 12..16 payload length in bytes; 16..48 blake3 of (version, length, payload);
//! the rest of the sector is zero.
//!
//! Crash safety: the config is rewritten only when the topology changes, L0 and L2
//! first, then a flush, then L1 and L3, so a crash leaves at least one pair whole and
//! the reader takes any label whose hash verifies. Uberblock slots are one sector
//! each and carry their own checksum (checked by the pool layer); a torn slot only
//! loses that one transaction group, whose predecessor lives in another slot.

use crate::device::{Device, SECTOR_SIZE};
use std::io;

pub const LABEL_SIZE: u64 = 256 * 1024;
pub const LABEL_COUNT: usize = 4;
pub const CONFIG_HEADER_SIZE: u64 = SECTOR_SIZE as u64;
pub const CONFIG_MAX_BYTES: usize = 120 * 1024;
pub const UBERBLOCK_RING_OFFSET: u64 = 128 * 1024;
pub const UBERBLOCK_SLOT_SIZE: usize = SECTOR_SIZE;
pub const UBERBLOCK_SLOTS: u64 = 32;
/// Start of the data area: leaves room for two labels and a boot area.
pub const DATA_AREA_START: u64 = 4 * 1024 * 1024;
/// Smallest device a pool accepts.
pub const MIN_DEVICE_BYTES: u64 = 64 * 1024 * 1024;

const MAGIC: &[u8; 8] = b"SHOALLBL";
const VERSION: u32 = 1;

/// Device size as the labels see it: rounded down to a label boundary.
pub fn label_aligned_size(device_bytes: u64) -> u64 {
    device_bytes / LABEL_SIZE * LABEL_SIZE
}

/// Byte offsets of L0..L3.
pub fn label_offsets(device_bytes: u64) -> [u64; LABEL_COUNT] {
    let end = label_aligned_size(device_bytes);
    assert!(end >= MIN_DEVICE_BYTES, "device too small for labels");
    [0, LABEL_SIZE, end - 2 * LABEL_SIZE, end - LABEL_SIZE]
}

/// The data area of a device: `[DATA_AREA_START, end - 2 labels)`, in bytes.
pub fn data_area(device_bytes: u64) -> (u64, u64) {
    let end = label_aligned_size(device_bytes) - 2 * LABEL_SIZE;
    (DATA_AREA_START, end - DATA_AREA_START)
}

fn payload_hash(payload: &[u8]) -> [u8; 32] {
    let mut h = blake3::Hasher::new();
    h.update(&VERSION.to_le_bytes());
    h.update(&(payload.len() as u32).to_le_bytes());
    h.update(payload);
    *h.finalize().as_bytes()
}

fn config_image(payload: &[u8]) -> io::Result<Vec<u8>> {
    if payload.len() > CONFIG_MAX_BYTES {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "pool config is {} bytes, labels hold at most {CONFIG_MAX_BYTES}",
                payload.len()
            ),
        ));
    }
    let total = (CONFIG_HEADER_SIZE as usize + payload.len()).div_ceil(SECTOR_SIZE) * SECTOR_SIZE;
    let mut image = vec![0u8; total];
    image[0..8].copy_from_slice(MAGIC);
    image[8..12].copy_from_slice(&VERSION.to_le_bytes());
    image[12..16].copy_from_slice(&(payload.len() as u32).to_le_bytes());
    image[16..48].copy_from_slice(&payload_hash(payload));
    image[CONFIG_HEADER_SIZE as usize..CONFIG_HEADER_SIZE as usize + payload.len()]
        .copy_from_slice(payload);
    Ok(image)
}

/// Writes the config into all four labels, in the crash-safe order described above.
pub fn write_config(dev: &dyn Device, payload: &[u8]) -> io::Result<()> {
    let image = config_image(payload)?;
    let offsets = label_offsets(dev.size_bytes());
    for pair in [[0usize, 2], [1, 3]] {
        for l in pair {
            dev.write_at(offsets[l], &image)?;
        }
        dev.flush()?;
    }
    Ok(())
}

/// Wipes the config headers and uberblock rings of all four labels (pool destroy),
/// so the device is no longer recognised as a pool member.
pub fn clear_labels(dev: &dyn Device) -> io::Result<()> {
    let zeros = vec![0u8; LABEL_SIZE as usize];
    for off in label_offsets(dev.size_bytes()) {
        dev.write_at(off, &zeros)?;
    }
    dev.flush()
}

/// Reads the config payload of one label; `None` if absent or corrupt.
pub fn read_config(dev: &dyn Device, label: usize) -> io::Result<Option<Vec<u8>>> {
    let offsets = label_offsets(dev.size_bytes());
    let mut header = vec![0u8; CONFIG_HEADER_SIZE as usize];
    dev.read_at(offsets[label], &mut header)?;
    if &header[0..8] != MAGIC {
        return Ok(None);
    }
    let version = u32::from_le_bytes(header[8..12].try_into().unwrap());
    let len = u32::from_le_bytes(header[12..16].try_into().unwrap()) as usize;
    if version != VERSION || len > CONFIG_MAX_BYTES {
        return Ok(None);
    }
    let padded = len.div_ceil(SECTOR_SIZE) * SECTOR_SIZE;
    let mut payload = vec![0u8; padded];
    if padded > 0 {
        dev.read_at(offsets[label] + CONFIG_HEADER_SIZE, &mut payload)?;
    }
    payload.truncate(len);
    if payload_hash(&payload) != header[16..48] {
        return Ok(None);
    }
    Ok(Some(payload))
}

/// The first label whose config verifies, if any.
pub fn read_any_config(dev: &dyn Device) -> io::Result<Option<Vec<u8>>> {
    let mut last_err = None;
    for label in 0..LABEL_COUNT {
        match read_config(dev, label) {
            Ok(Some(p)) => return Ok(Some(p)),
            Ok(None) => {}
            Err(e) => last_err = Some(e),
        }
    }
    match last_err {
        Some(e) => Err(e),
        None => Ok(None),
    }
}

fn slot_offset(device_bytes: u64, label: usize, txg: u64) -> u64 {
    label_offsets(device_bytes)[label]
        + UBERBLOCK_RING_OFFSET
        + (txg % UBERBLOCK_SLOTS) * UBERBLOCK_SLOT_SIZE as u64
}

/// Writes one uberblock image (exactly one sector) into slot `txg % 32` of the given labels.
pub fn write_uberblock(
    dev: &dyn Device,
    labels: &[usize],
    txg: u64,
    image: &[u8],
) -> io::Result<()> {
    assert_eq!(
        image.len(),
        UBERBLOCK_SLOT_SIZE,
        "uberblock image must be one slot"
    );
    for &label in labels {
        dev.write_at(slot_offset(dev.size_bytes(), label, txg), image)?;
    }
    Ok(())
}

/// Reads every uberblock slot of every readable label. Validation is the caller's.
pub fn read_uberblock_slots(dev: &dyn Device) -> Vec<Vec<u8>> {
    let mut slots = Vec::new();
    let ring = (UBERBLOCK_SLOTS as usize) * UBERBLOCK_SLOT_SIZE;
    for off in label_offsets(dev.size_bytes()) {
        let mut buf = vec![0u8; ring];
        if dev.read_at(off + UBERBLOCK_RING_OFFSET, &mut buf).is_ok() {
            slots.extend(buf.chunks(UBERBLOCK_SLOT_SIZE).map(|c| c.to_vec()));
        }
    }
    slots
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim_device::{CrashPolicy, SimDevice};

    #[test]
    fn config_round_trip_and_survives_damaged_labels() {
        let dev = SimDevice::new(MIN_DEVICE_BYTES, 1);
        write_config(&*dev, br#"{"pool":"tank"}"#).unwrap();
        for l in 0..LABEL_COUNT {
            assert_eq!(
                read_config(&*dev, l).unwrap().unwrap(),
                br#"{"pool":"tank"}"#
            );
        }
        let offsets = label_offsets(dev.size_bytes());
        // Destroy three labels: the fourth still identifies the device.
        for off in &offsets[0..3] {
            dev.write_at(*off, &vec![0xAB; SECTOR_SIZE]).unwrap();
        }
        assert!(read_config(&*dev, 0).unwrap().is_none());
        assert_eq!(
            read_any_config(&*dev).unwrap().unwrap(),
            br#"{"pool":"tank"}"#
        );
    }

    #[test]
    fn torn_config_update_leaves_a_whole_pair() {
        let dev = SimDevice::new(MIN_DEVICE_BYTES, 2);
        write_config(&*dev, b"old").unwrap();
        // Interrupt after the first pair is written but before its flush.
        let image = config_image(b"new").unwrap();
        let offsets = label_offsets(dev.size_bytes());
        dev.write_at(offsets[0], &image).unwrap();
        dev.write_at(offsets[2], &image).unwrap();
        let after = dev.restart(CrashPolicy::Random);
        let got = read_any_config(&*after).unwrap().unwrap();
        assert!(got == b"old" || got == b"new");
    }

    #[test]
    fn uberblock_slots_rotate() {
        let dev = SimDevice::new(MIN_DEVICE_BYTES, 3);
        let mut img = vec![0u8; UBERBLOCK_SLOT_SIZE];
        img[0] = 7;
        write_uberblock(&*dev, &[0, 1, 2, 3], 33, &img).unwrap();
        let slots = read_uberblock_slots(&*dev);
        assert_eq!(slots.len(), 4 * UBERBLOCK_SLOTS as usize);
        assert_eq!(slots.iter().filter(|s| s[0] == 7).count(), 4);
        assert_eq!(slots[1][0], 7); // slot 33 % 32 = 1 of label 0
    }
}
