//! NFSv4.1 sessions at the protocol level (own client codec through the server's record
//! path): setup and the rules on what may start a COMPOUND, slots and their
//! exactly-once replies, CREATE_SESSION replay, destroying sessions and clients.

use nfs::v4::client::{
    self, attr, ChannelAttrs, Compound, Session, SetAttrs, FILE_SYNC4, NF4DIR, SHARE_ACCESS_BOTH,
    SHARE_DENY_NONE,
};
use nfs::v4::{op, Nfs4Error};

mod common;
use common::harness::*;

// ---- sessions ----

#[test]
fn exchange_id_then_create_session_then_sequence_putrootfh_getfh_works() {
    let srv = Server::new();
    let a = srv.client_a();
    let x = a.exchange_id("client-a");
    assert_eq!(
        x.flags & 0x8000_0000,
        0,
        "a new client is not confirmed yet"
    );
    let mut c = Compound::new("create");
    c.create_session(
        x.clientid,
        x.seq,
        &ChannelAttrs::fore(),
        &ChannelAttrs::back(),
    );
    let cs = a.ok(&c).results[0].create_session().unwrap().clone();
    assert_eq!(cs.seq, x.seq);
    assert!(cs.fore.max_requests >= 1 && cs.fore.max_requests <= 8);
    let mut s = Session::new(x.clientid, cs.sessionid);
    let mut c = s.compound();
    c.putrootfh().getfh();
    let r = a.ok(&c);
    assert_eq!(r.results.len(), 3);
    let seq = r.results[0].sequence().unwrap();
    assert_eq!((seq.sessionid, seq.seq, seq.slot), (cs.sessionid, 1, 0));
    assert!(!r.results[2].fh().unwrap().is_empty());
    // The same owner and verifier again: the same, now confirmed, client.
    let again = a.exchange_id("client-a");
    assert_eq!(again.clientid, x.clientid);
    assert_ne!(again.flags & 0x8000_0000, 0, "confirmed by CREATE_SESSION");
}

#[test]
fn null_of_version_4_gets_an_empty_success() {
    let srv = Server::new();
    let a = srv.client_a();
    let reply = a.send_record(&client::null_record(a.next_xid(), &root_cred()));
    // xid, REPLY, MSG_ACCEPTED, AUTH_NONE verifier, SUCCESS, and nothing more.
    assert_eq!(
        reply[4..],
        [0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]
    );
}

#[test]
fn compound_without_sequence_first_gets_op_not_in_session() {
    let srv = Server::new();
    let a = srv.client_a();
    let mut c = Compound::new("");
    c.putrootfh().getfh();
    let r = a.call(&c);
    assert_eq!(r.statuses(), vec![st(Nfs4Error::OpNotInSession)]);
    assert_eq!(r.status, st(Nfs4Error::OpNotInSession));
    assert_eq!(r.results[0].op, op::PUTROOTFH);
}

#[test]
fn sequence_not_first_gets_sequence_pos() {
    let srv = Server::new();
    let a = srv.client_a();
    let mut s = a.session("client-a");
    let mut c = s.compound();
    c.putrootfh().sequence(&s.sessionid, s.seq, 1, 1, false);
    let r = a.call(&c);
    assert_eq!(failed_with(&r), st(Nfs4Error::SequencePos));
    assert_eq!(r.results.len(), 3);
}

#[test]
fn minor_versions_3_and_up_get_minor_vers_mismatch_with_no_results() {
    let srv = Server::new();
    let a = srv.client_a();
    let mut s = a.session("client-a");
    for minor in [3, 4, u32::MAX] {
        let mut c = Compound::new("tagged");
        c.minor(minor).putrootfh().getfh();
        let r = a.call(&c);
        assert_eq!(r.status, st(Nfs4Error::MinorVersMismatch), "minor {minor}");
        assert!(r.results.is_empty(), "minor {minor}: {:?}", r.summary());
        assert_eq!(r.tag, b"tagged");
    }
    // 4.0 is served (without a session), and 4.2.
    let mut c = Compound::new("tagged");
    c.minor(0).putrootfh().getfh();
    a.ok(&c);
    let mut c = s.compound();
    c.minor(2).putrootfh().getfh();
    a.ok(&c);
}

#[test]
fn sequence_of_an_unknown_session_gets_badsession() {
    let srv = Server::new();
    let a = srv.client_a();
    let mut real = a.session("client-a");
    let mut s = Session::new(real.clientid, [0x42; 16]);
    let mut c = s.compound();
    c.putrootfh();
    let r = a.call(&c);
    assert_eq!(r.statuses(), vec![st(Nfs4Error::BadSession)]);
    // The real one still works.
    let mut c = real.compound();
    c.putrootfh();
    a.ok(&c);
}

#[test]
fn sequence_on_a_slot_past_the_granted_ones_gets_badslot() {
    let srv = Server::new();
    let a = srv.client_a();
    let x = a.exchange_id("client-a");
    let mut c = Compound::new("");
    c.create_session(
        x.clientid,
        x.seq,
        &ChannelAttrs::fore(),
        &ChannelAttrs::back(),
    );
    let cs = a.ok(&c).results[0].create_session().unwrap().clone();
    let slots = cs.fore.max_requests;
    let mut c = Compound::new("");
    c.sequence(&cs.sessionid, 1, slots, slots, false)
        .putrootfh();
    let r = a.call(&c);
    assert_eq!(r.statuses(), vec![st(Nfs4Error::BadSlot)]);
    // The last granted slot works.
    let mut c = Compound::new("");
    c.sequence(&cs.sessionid, 1, slots - 1, slots - 1, false)
        .putrootfh();
    a.ok(&c);
}

#[test]
fn a_skipped_sequence_id_gets_seq_misordered_and_leaves_the_slot_as_it_was() {
    let srv = Server::new();
    let a = srv.client_a();
    let mut s = a.session("client-a");
    let next = s.seq;
    s.seq = next + 1;
    let mut c = s.compound();
    c.putrootfh();
    assert_eq!(a.call(&c).statuses(), vec![st(Nfs4Error::SeqMisordered)]);
    s.seq = next;
    let mut c = s.compound();
    c.putrootfh();
    a.ok(&c);
}

// ---- exactly once ----

#[test]
fn a_cached_create_sent_twice_is_answered_from_the_slot_byte_for_byte_and_runs_once() {
    let srv = Server::new();
    let a = srv.client_a();
    let mut s = a.session("client-a");
    let dir = a.mkdir(&mut s, "eo");
    let mut c = s.compound_with(true);
    c.putfh(&dir).mkdir("x", &SetAttrs::mode(0o755));
    let (first, r1) = a.call_bytes(&c);
    assert_ok(&r1);
    // The retransmission (here even with another xid) gets the slot's reply.
    let (second, _) = a.call_bytes(&c);
    assert_ne!(first[..4], second[..4], "different xids");
    assert_eq!(first[4..], second[4..], "the same reply apart from the xid");
    // The next sequence id runs the CREATE again, and it finds "x".
    let mut c3 = s.compound_with(true);
    c3.putfh(&dir).mkdir("x", &SetAttrs::mode(0o755));
    assert_eq!(failed_with(&a.call(&c3)), st(Nfs4Error::Exist));
    let mut c = s.compound();
    c.putfh(&dir).readdir(0, &[0; 8], 8192, &[attr::TYPE]);
    let r = a.ok(&c);
    let entries = &r.last().unwrap().readdir().unwrap().entries;
    let xs: Vec<_> = entries.iter().filter(|e| e.name == b"x").collect();
    assert_eq!(xs.len(), 1, "{entries:?}");
    assert_eq!(xs[0].attrs.kind, Some(NF4DIR));
}

#[test]
fn an_uncached_compound_sent_twice_gets_retry_uncached_rep_and_does_not_run_again() {
    let srv = Server::new();
    let a = srv.client_a();
    let mut s = a.session("client-a");
    let dir = a.mkdir(&mut s, "eo");
    let mut c = s.compound();
    c.putfh(&dir).mkdir("y", &SetAttrs::mode(0o755));
    a.ok(&c);
    // Replace "y" by a new directory: run twice, it would make yet another one.
    let mut c = s.compound_with(false);
    c.putfh(&dir)
        .remove("y")
        .mkdir("y", &SetAttrs::mode(0o755))
        .getfh();
    let first = a.ok(&c);
    let made = first.last().unwrap().fh().unwrap().to_vec();
    let again = a.call(&c);
    assert_eq!(again.statuses(), vec![st(Nfs4Error::RetryUncachedRep)]);
    assert_eq!(again.results[0].op, op::SEQUENCE);
    let mut c = s.compound();
    c.putfh(&dir).lookup("y").getfh();
    let r = a.ok(&c);
    assert_eq!(r.last().unwrap().fh().unwrap(), &made[..], "not made again");
}

#[test]
fn create_session_sent_again_with_the_same_sequence_returns_the_same_session() {
    let srv = Server::new();
    let a = srv.client_a();
    let x = a.exchange_id("client-a");
    let mut c = Compound::new("");
    c.create_session(
        x.clientid,
        x.seq,
        &ChannelAttrs::fore(),
        &ChannelAttrs::back(),
    );
    let first = a.ok(&c).results[0].create_session().unwrap().clone();
    let second = a.ok(&c).results[0].create_session().unwrap().clone();
    assert_eq!(first, second);
    // The next sequence id makes another session.
    let mut c = Compound::new("");
    c.create_session(
        x.clientid,
        x.seq + 1,
        &ChannelAttrs::fore(),
        &ChannelAttrs::back(),
    );
    let third = a.ok(&c).results[0].create_session().unwrap().clone();
    assert_ne!(third.sessionid, first.sessionid);
    // A sequence id from the past is misordered.
    let mut c = Compound::new("");
    c.create_session(
        x.clientid,
        x.seq.wrapping_sub(1),
        &ChannelAttrs::fore(),
        &ChannelAttrs::back(),
    );
    assert_eq!(a.call(&c).statuses(), vec![st(Nfs4Error::SeqMisordered)]);
}

#[test]
fn destroy_session_then_destroy_clientid_forget_the_client() {
    let srv = Server::new();
    let a = srv.client_a();
    let mut s = a.session("client-a");
    let mut c = Compound::new("");
    c.destroy_clientid(s.clientid);
    assert_eq!(a.call(&c).statuses(), vec![st(Nfs4Error::ClientIdBusy)]);
    let mut c = Compound::new("");
    c.destroy_session(&s.sessionid);
    a.ok(&c);
    let mut c = s.compound();
    c.putrootfh();
    assert_eq!(a.call(&c).statuses(), vec![st(Nfs4Error::BadSession)]);
    let mut c = Compound::new("");
    c.destroy_clientid(s.clientid);
    a.ok(&c);
    let mut c = Compound::new("");
    c.create_session(s.clientid, 2, &ChannelAttrs::fore(), &ChannelAttrs::back());
    assert_eq!(a.call(&c).statuses(), vec![st(Nfs4Error::StaleClientId)]);
}

#[test]
fn a_cachethis_reply_too_big_for_the_slot_gets_rep_too_big_to_cache_or_is_cached() {
    let srv = Server::new();
    let a = srv.client_a();
    let mut s = a.session("client-a");
    let dir = a.mkdir(&mut s, "d");
    let (fh, sid) = a.open(&mut s, &dir, "f", SHARE_ACCESS_BOTH, SHARE_DENY_NONE, "o");
    let big = ChannelAttrs::fore().max_response_cached + 4096;
    assert_ok(&a.on(&mut s, &fh, |c| {
        c.write(&sid, 0, FILE_SYNC4, &vec![1; big as usize]);
    }));
    let mut c = s.compound_with(true);
    c.putfh(&fh).read(&sid, 0, big);
    let (first, r) = a.call_bytes(&c);
    if r.status == 0 {
        // Kept after all: the retransmission must get it back.
        let (again, r2) = a.call_bytes(&c);
        assert!(
            first[4..] == again[4..],
            "a cachethis reply is answered again from the slot: {:?}",
            r2.summary()
        );
    } else {
        assert_eq!(
            r.status,
            st(Nfs4Error::RepTooBigToCache),
            "{:?}",
            r.summary()
        );
    }
}

// ---- analytics ----

/// Each operation of a COMPOUND is one `nfs4.ops` sample under its own name.
#[test]
fn each_operation_of_a_compound_counts_once_in_nfs4_ops_by_op() {
    let per_op = |a: &analytics::Analytics, since: u64| {
        a.tick(a.unix_now() + 5);
        let mut counts = std::collections::BTreeMap::<String, u64>::new();
        for p in a
            .query("nfs4.ops[op]", since, a.unix_now() + 1, None)
            .unwrap()
            .points
        {
            for k in &p.breakdown {
                *counts.entry(k.key.clone()).or_default() += k.count;
            }
        }
        counts
    };
    let compound = |srv: &Server| {
        let c = srv.client_a();
        let mut s = c.session("client-a");
        let mut k = s.compound();
        k.putrootfh().getfh();
        c.ok(&k);
    };

    let srv = Server::new();
    let a = analytics::Analytics::new();
    let since = a.unix_now();
    srv.service.set_analytics(a.clone());
    compound(&srv);
    let expected: std::collections::BTreeMap<String, u64> = [
        ("exchange_id", 1),
        ("create_session", 1),
        ("sequence", 2),
        ("reclaim_complete", 1),
        ("putrootfh", 1),
        ("getfh", 1),
    ]
    .into_iter()
    .map(|(op, n)| (op.to_string(), n))
    .collect();
    assert_eq!(per_op(&a, since), expected);
}
