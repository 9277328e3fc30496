//! shoal's device layer: leaf devices (files, block devices, the simulated device),
//! their labels, and the mirror and RAID-Z layouts with reconstruction and
//! self-healing. It knows sectors and copies, never files or datasets.

pub mod aligned;
pub mod device;
pub mod disk_readers;
pub mod fault_injection;
pub mod file_device;
pub mod huge_slab;
pub mod label;
pub mod leaf;
pub mod raidz_map;
pub mod raidz_math;
pub mod sim_device;
pub mod sim_time;
pub mod staging;
pub mod throttled_device;
pub mod tree;
pub mod volatile_cache;
pub mod work_queue;

pub use aligned::AlignedBuf;
pub use device::{Device, IoMode, SECTOR_SIZE};
pub use fault_injection::FaultInjector;
pub use file_device::FileDevice;
pub use sim_device::{CrashClock, CrashPolicy, Fault, SimDevice, SpeedLimit};
pub use throttled_device::{DiskStats, ThrottledDevice};
pub use tree::{Health, Layout, Leaf, ReadMode, RepairReport, TopVdev, VdevError};
pub use volatile_cache::VolatileCacheDevice;
