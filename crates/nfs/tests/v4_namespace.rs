//! NFSv4.1 namespace at the protocol level: the pseudo-filesystem (lookups, fsids,
//! what each client may see) and shared datasets nested in a share's root.

use nfs::v4::client::{attr, Session, SetAttrs, NF4DIR};
use nfs::v4::Nfs4Error;

mod common;
use common::harness::*;
use common::DATASET;

// ---- the pseudo-filesystem ----

#[test]
fn lookups_of_each_dataset_component_from_the_pseudo_root_reach_the_mounted_share_root() {
    let srv = Server::new();
    let a = srv.client_a();
    let mut s = a.session("client-a");
    let mut c = s.compound();
    c.putrootfh().getattr(&[attr::TYPE]);
    for name in COMPONENTS {
        c.lookup(name).getattr(&[attr::TYPE]);
    }
    c.getfh();
    let r = a.ok(&c);
    let kinds: Vec<_> = r
        .results
        .iter()
        .filter_map(|x| x.attrs().map(|a| a.kind))
        .collect();
    assert_eq!(kinds, vec![Some(NF4DIR); 4]);
    assert_eq!(r.last().unwrap().fh().unwrap(), &mount_handle(&a)[..]);
    // A name that leads to no share is not there.
    let mut c = s.compound();
    c.putrootfh().lookup("tank").lookup("elsewhere");
    assert_eq!(failed_with(&a.call(&c)), st(Nfs4Error::NoEnt));
}

#[test]
fn lookupp_from_the_share_root_climbs_back_to_its_pseudo_directory() {
    let srv = Server::new();
    let a = srv.client_a();
    let mut s = a.session("client-a");
    let mut c = s.compound();
    c.putrootfh().lookup("tank").lookup("home").getfh();
    let home = a.ok(&c).last().unwrap().fh().unwrap().to_vec();
    let root = a.share_root(&mut s);
    let mut c = s.compound();
    c.putfh(&root).lookupp().getfh().lookupp().lookupp().getfh();
    let r = a.ok(&c);
    assert_eq!(r.results[3].fh().unwrap(), &home[..]);
    let mut c = s.compound();
    c.putrootfh().getfh();
    let pseudo_root = a.ok(&c).last().unwrap().fh().unwrap().to_vec();
    assert_eq!(r.last().unwrap().fh().unwrap(), &pseudo_root[..]);
    // Nothing is above the root.
    let mut c = s.compound();
    c.putrootfh().lookupp();
    assert_eq!(failed_with(&a.call(&c)), st(Nfs4Error::NoEnt));
}

#[test]
fn readdir_of_the_pseudo_root_lists_the_first_dataset_component() {
    let srv = Server::new();
    let a = srv.client_a();
    let mut s = a.session("client-a");
    let mut c = s.compound();
    c.putrootfh()
        .readdir(0, &[0; 8], 4096, &[attr::TYPE, attr::FILEID]);
    let r = a.ok(&c);
    let rd = r.last().unwrap().readdir().unwrap();
    assert!(rd.eof);
    let names: Vec<_> = rd.entries.iter().map(|e| e.name.clone()).collect();
    assert_eq!(names, vec![b"tank".to_vec()]);
    assert_eq!(rd.entries[0].attrs.kind, Some(NF4DIR));
}

#[test]
fn the_pseudo_root_and_the_share_have_different_fsids() {
    let srv = Server::new();
    let a = srv.client_a();
    let mut s = a.session("client-a");
    let root = a.share_root(&mut s);
    let mut c = s.compound();
    c.putrootfh()
        .getattr(&[attr::FSID])
        .putfh(&root)
        .getattr(&[attr::FSID]);
    let r = a.ok(&c);
    let pseudo = r.results[2].attrs().unwrap().fsid.unwrap();
    let share = r.results[4].attrs().unwrap().fsid.unwrap();
    assert_ne!(pseudo, share);
    // Pseudo directories refuse changes.
    let mut c = s.compound();
    c.putrootfh().mkdir("nope", &SetAttrs::default());
    assert_eq!(failed_with(&a.call(&c)), st(Nfs4Error::RoFs));
}

#[test]
fn the_pseudo_fs_shows_a_client_only_the_shares_its_export_rules_admit() {
    let srv = Server::new();
    srv.share("tank/other", "127.0.0.1(rw,no_root_squash)");
    srv.share("tank/home/private", "127.0.0.1(rw,no_root_squash)");
    let (a, b) = (srv.client_a(), srv.client_b());
    let mut sa = a.session("client-a");
    let mut sb = b.session("client-b");
    let list = |cl: &Client<'_>, s: &mut Session, path: &[&str]| {
        let mut c = s.compound();
        c.putrootfh();
        for name in path {
            c.lookup(name);
        }
        c.readdir(0, &[0; 8], 4096, &[attr::TYPE]);
        let r = cl.ok(&c);
        let names: Vec<String> = r
            .last()
            .unwrap()
            .readdir()
            .unwrap()
            .entries
            .iter()
            .map(|e| String::from_utf8(e.name.clone()).unwrap())
            .collect();
        names
    };
    assert_eq!(list(&a, &mut sa, &["tank"]), ["home", "other"]);
    assert_eq!(list(&b, &mut sb, &["tank"]), ["home"]);
    assert_eq!(list(&a, &mut sa, &["tank", "home"]), ["private", "share"]);
    assert_eq!(list(&b, &mut sb, &["tank", "home"]), ["share"]);
    // B can neither look the private share up nor use its handle.
    let mut c = sb.compound();
    c.putrootfh()
        .lookup("tank")
        .lookup("home")
        .lookup("private");
    assert_eq!(failed_with(&b.call(&c)), st(Nfs4Error::NoEnt));
    let mut c = sa.compound();
    c.putrootfh()
        .lookup("tank")
        .lookup("home")
        .lookup("private")
        .getfh();
    let private = a.ok(&c).last().unwrap().fh().unwrap().to_vec();
    let r = b.on(&mut sb, &private, |c| {
        c.getattr(&[attr::TYPE]);
    });
    assert_eq!(failed_with(&r), st(Nfs4Error::Access));
}

/// A shared dataset nested in another share's root shows in that root's READDIR
/// (after its own entries) and LOOKUP crosses into it, with its own fsid.
#[test]
fn a_nested_shared_dataset_is_listed_and_crossed_from_its_parents_root() {
    let srv = Server::new();
    srv.share(&format!("{DATASET}/sub"), "*(rw,no_root_squash)");
    let a = srv.client_a();
    let mut s = a.session("client-a");
    a.mkdir(&mut s, "own-dir");
    let root = a.share_root(&mut s);
    // A small maxcount makes the listing take several calls across the two kinds of
    // entries; the cookies must carry it on.
    let mut names = Vec::new();
    let mut cookie = 0;
    loop {
        let r = a.on(&mut s, &root, |c| {
            c.readdir(cookie, &[0; 8], 400, &[attr::FSID]);
        });
        assert_ok(&r);
        let list = r.last().unwrap().readdir().unwrap().clone();
        for e in &list.entries {
            names.push(String::from_utf8(e.name.clone()).unwrap());
            cookie = e.cookie;
        }
        if list.eof {
            break;
        }
        assert!(!list.entries.is_empty(), "no progress at cookie {cookie}");
    }
    assert_eq!(names, ["own-dir", "sub"]);
    let r = a.on(&mut s, &root, |c| {
        c.getattr(&[attr::FSID])
            .lookup("sub")
            .getattr(&[attr::FSID]);
    });
    assert_ok(&r);
    let fsids: Vec<_> = r
        .results
        .iter()
        .filter_map(|o| o.attrs().and_then(|a| a.fsid))
        .collect();
    assert_eq!(fsids.len(), 2);
    assert_ne!(fsids[0], fsids[1], "crossing into sub changes the fsid");
}
