//! What a simulator run did, counted: operations, acknowledgements, power cuts,
//! faults, device operations, txgs; summed over seeds and printed at the end.

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(super) struct Stats {
    pub(super) ops: u64,
    pub(super) reads_verified: u64,
    pub(super) acks: u64,
    pub(super) crashes: u64,
    pub(super) crashes_in_recovery: u64,
    /// Of those, cuts of an import that had a log to replay (the import writes nothing
    /// before its replay's txg, so the cut fell in the replay), and cuts in the middle
    /// of a resilver.
    pub(super) cuts_in_replay: u64,
    pub(super) cuts_in_resilver: u64,
    pub(super) logs_replayed: u64,
    pub(super) corruptions: u64,
    pub(super) read_faults: u64,
    pub(super) deaths: u64,
    pub(super) replaces: u64,
    /// FAULTED devices (they missed writes) cleared: resilvered in place.
    pub(super) clears: u64,
    pub(super) scrubs: u64,
    pub(super) repaired_bytes: u64,
    /// Bad copies and failed reads the pool met (and read around).
    pub(super) checksum_errors: u64,
    pub(super) read_errors: u64,
    pub(super) device_ops: u64,
    /// Transaction groups committed; intent log bytes written and the rings' size
    /// (their ratio: how many times the logs went round); space map chains found
    /// shorter than at the check before (condensed at least once in between).
    pub(super) txgs: u64,
    pub(super) log_bytes: u64,
    pub(super) log_ring_bytes: u64,
    pub(super) space_map_condenses: u64,
    pub(super) concurrent_seeds: u64,
}

impl Stats {
    pub(super) fn add(&mut self, o: &Stats) {
        self.ops += o.ops;
        self.reads_verified += o.reads_verified;
        self.acks += o.acks;
        self.crashes += o.crashes;
        self.crashes_in_recovery += o.crashes_in_recovery;
        self.cuts_in_replay += o.cuts_in_replay;
        self.cuts_in_resilver += o.cuts_in_resilver;
        self.logs_replayed += o.logs_replayed;
        self.corruptions += o.corruptions;
        self.read_faults += o.read_faults;
        self.deaths += o.deaths;
        self.replaces += o.replaces;
        self.clears += o.clears;
        self.scrubs += o.scrubs;
        self.repaired_bytes += o.repaired_bytes;
        self.checksum_errors += o.checksum_errors;
        self.read_errors += o.read_errors;
        self.device_ops += o.device_ops;
        self.txgs += o.txgs;
        self.log_bytes += o.log_bytes;
        self.log_ring_bytes = self.log_ring_bytes.max(o.log_ring_bytes);
        self.space_map_condenses += o.space_map_condenses;
        self.concurrent_seeds += o.concurrent_seeds;
    }
}
