//! NFSv4.1 files at the protocol level: opens, I/O with stateids, create modes,
//! namespace operations, files open after their last name went, share reservations,
//! and OPEN of a file that exists.

use nfs::rpc::{self};
use nfs::v4::client::{
    self, attr, Claim, Compound, OpenHow, Session, SetAttrs, Stateid, FILE_SYNC4, NF4LNK, NF4REG,
    OPEN4_RESULT_PRESERVE_UNLINKED, SHARE_ACCESS_BOTH, SHARE_ACCESS_READ, SHARE_ACCESS_WRITE,
    SHARE_DENY_NONE, SHARE_DENY_WRITE, UNSTABLE4,
};
use nfs::v4::{op, Nfs4Error};

mod common;
use common::harness::*;

// ---- files ----

#[test]
fn open_create_write_file_sync_read_back_and_close() {
    let srv = Server::new();
    let a = srv.client_a();
    let mut s = a.session("client-a");
    let dir = a.mkdir(&mut s, "d");
    let (fh, sid) = a.open(&mut s, &dir, "f", SHARE_ACCESS_BOTH, SHARE_DENY_NONE, "o");
    let r = a.on(&mut s, &fh, |c| {
        c.write(&sid, 0, FILE_SYNC4, b"hello, v4").commit(0, 0);
    });
    assert_ok(&r);
    let w = r.results[2].write().unwrap();
    assert_eq!((w.count, w.committed), (9, FILE_SYNC4));
    assert_eq!(
        r.results[3].res,
        client::Res::Verifier(w.verifier),
        "COMMIT's verifier is WRITE's"
    );
    let r = a.on(&mut s, &fh, |c| {
        c.read(&sid, 0, 100).read(&sid, 7, 100);
    });
    assert_ok(&r);
    assert_eq!(r.results[2].read().unwrap(), (true, &b"hello, v4"[..]));
    // The last READ's data goes after the results: the same bytes.
    assert_eq!(r.results[3].read().unwrap(), (true, &b"v4"[..]));
    let r = a.on(&mut s, &fh, |c| {
        c.close(&sid);
    });
    assert_ok(&r);
    // Opened again by name without creating, the data is there.
    let mut c = s.compound();
    c.putfh(&dir).open(
        SHARE_ACCESS_READ,
        SHARE_DENY_NONE,
        s.clientid,
        b"o",
        &OpenHow::NoCreate,
        &Claim::Null("f"),
    );
    c.read(&Stateid::CURRENT, 0, 5);
    let r = a.ok(&c);
    assert_eq!(r.last().unwrap().read().unwrap(), (false, &b"hello"[..]));
}

#[test]
fn getattr_size_and_change_move_after_a_write_and_setattr() {
    let srv = Server::new();
    let a = srv.client_a();
    let mut s = a.session("client-a");
    let dir = a.mkdir(&mut s, "d");
    let (fh, sid) = a.open(&mut s, &dir, "f", SHARE_ACCESS_BOTH, SHARE_DENY_NONE, "o");
    let attrs = |s: &mut Session| {
        let r = a.on(s, &fh, |c| {
            c.getattr(&[attr::TYPE, attr::CHANGE, attr::SIZE, attr::MODE]);
        });
        assert_ok(&r);
        r.last().unwrap().attrs().unwrap().clone()
    };
    let before = attrs(&mut s);
    assert_eq!(before.kind, Some(NF4REG));
    assert_eq!(before.size, Some(0));
    assert_eq!(before.mode, Some(0o644));
    assert_ok(&a.on(&mut s, &fh, |c| {
        c.write(&sid, 0, UNSTABLE4, &[7; 3000]);
    }));
    let written = attrs(&mut s);
    assert_eq!(written.size, Some(3000));
    assert_ne!(written.change, before.change);
    let r = a.on(&mut s, &fh, |c| {
        c.setattr(&sid, &SetAttrs::size(10))
            .setattr(&Stateid::ANONYMOUS, &SetAttrs::mode(0o600));
    });
    assert_ok(&r);
    assert_eq!(
        r.results[2].res,
        client::Res::Setattr(client::bitmap(&[attr::SIZE]))
    );
    let set = attrs(&mut s);
    assert_eq!((set.size, set.mode), (Some(10), Some(0o600)));
    assert_ne!(set.change, written.change);
}

#[test]
fn read_with_the_stateid_of_another_file_gets_bad_stateid() {
    let srv = Server::new();
    let a = srv.client_a();
    let mut s = a.session("client-a");
    let dir = a.mkdir(&mut s, "d");
    let (_f1, sid1) = a.open(&mut s, &dir, "f1", SHARE_ACCESS_BOTH, SHARE_DENY_NONE, "o");
    let (f2, _sid2) = a.open(&mut s, &dir, "f2", SHARE_ACCESS_BOTH, SHARE_DENY_NONE, "o");
    let r = a.on(&mut s, &f2, |c| {
        c.read(&sid1, 0, 10);
    });
    assert_eq!(failed_with(&r), st(Nfs4Error::BadStateId));
}

#[test]
fn a_stateid_with_a_forged_other_gets_bad_stateid() {
    let srv = Server::new();
    let a = srv.client_a();
    let mut s = a.session("client-a");
    let dir = a.mkdir(&mut s, "d");
    let (fh, sid) = a.open(&mut s, &dir, "f", SHARE_ACCESS_BOTH, SHARE_DENY_NONE, "o");
    for i in [0, 4, 11] {
        let mut forged = sid;
        forged.other[i] ^= 0x5a;
        let r = a.on(&mut s, &fh, |c| {
            c.read(&forged, 0, 10);
        });
        assert_eq!(failed_with(&r), st(Nfs4Error::BadStateId), "byte {i}");
    }
    // A seqid from the future is bad too; the real one still works.
    let mut future = sid;
    future.seqid += 5;
    let r = a.on(&mut s, &fh, |c| {
        c.read(&future, 0, 10);
    });
    assert_eq!(failed_with(&r), st(Nfs4Error::BadStateId));
    assert_ok(&a.on(&mut s, &fh, |c| {
        c.read(&sid, 0, 10);
    }));
}

#[test]
fn write_with_a_read_only_open_stateid_gets_openmode() {
    let srv = Server::new();
    let a = srv.client_a();
    let mut s = a.session("client-a");
    let dir = a.mkdir(&mut s, "d");
    let (fh, sid) = a.open(&mut s, &dir, "f", SHARE_ACCESS_READ, SHARE_DENY_NONE, "o");
    let r = a.on(&mut s, &fh, |c| {
        c.write(&sid, 0, FILE_SYNC4, b"no");
    });
    assert_eq!(failed_with(&r), st(Nfs4Error::OpenMode));
    // Reading is what it was opened for.
    assert_ok(&a.on(&mut s, &fh, |c| {
        c.read(&sid, 0, 10);
    }));
}

#[test]
fn open_downgrade_to_read_makes_writes_openmode() {
    let srv = Server::new();
    let a = srv.client_a();
    let mut s = a.session("client-a");
    let dir = a.mkdir(&mut s, "d");
    // Opened for reading, then for both: it may go back down to reading.
    a.open(&mut s, &dir, "f", SHARE_ACCESS_READ, SHARE_DENY_NONE, "o");
    let (fh, sid) = a.open(&mut s, &dir, "f", SHARE_ACCESS_BOTH, SHARE_DENY_NONE, "o");
    let r = a.on(&mut s, &fh, |c| {
        c.open_downgrade(&sid, SHARE_ACCESS_READ, SHARE_DENY_NONE);
    });
    assert_ok(&r);
    let down = r.last().unwrap().stateid().unwrap();
    assert_eq!(down.other, sid.other);
    assert!(down.seqid > sid.seqid);
    let r = a.on(&mut s, &fh, |c| {
        c.write(&down, 0, FILE_SYNC4, b"no");
    });
    assert_eq!(failed_with(&r), st(Nfs4Error::OpenMode));
    // The old seqid is old now.
    let r = a.on(&mut s, &fh, |c| {
        c.read(&sid, 0, 1);
    });
    assert_eq!(failed_with(&r), st(Nfs4Error::OldStateId));
    // Access never held cannot be downgraded to.
    let r = a.on(&mut s, &fh, |c| {
        c.open_downgrade(&down, SHARE_ACCESS_BOTH, SHARE_DENY_NONE);
    });
    assert_eq!(failed_with(&r), st(Nfs4Error::Inval));
}

#[test]
fn a_stateid_used_after_close_gets_bad_stateid() {
    let srv = Server::new();
    let a = srv.client_a();
    let mut s = a.session("client-a");
    let dir = a.mkdir(&mut s, "d");
    let (fh, sid) = a.open(&mut s, &dir, "f", SHARE_ACCESS_BOTH, SHARE_DENY_NONE, "o");
    assert_ok(&a.on(&mut s, &fh, |c| {
        c.close(&sid);
    }));
    for f in [
        (|c: &mut Compound, s: &Stateid| {
            c.read(s, 0, 1);
        }) as fn(&mut Compound, &Stateid),
        |c, s| {
            c.write(s, 0, FILE_SYNC4, b"x");
        },
        |c, s| {
            c.close(s);
        },
    ] {
        let r = a.on(&mut s, &fh, |c| f(c, &sid));
        assert_eq!(
            failed_with(&r),
            st(Nfs4Error::BadStateId),
            "{:?}",
            r.summary()
        );
    }
}

#[test]
fn open_create_modes_guarded_exclusive_nocreate_and_claim_fh() {
    let srv = Server::new();
    let a = srv.client_a();
    let mut s = a.session("client-a");
    let dir = a.mkdir(&mut s, "d");
    let open = |s: &mut Session, how: OpenHow, name: &str| {
        let mut c = s.compound();
        c.putfh(&dir).open(
            SHARE_ACCESS_BOTH,
            SHARE_DENY_NONE,
            s.clientid,
            b"o",
            &how,
            &Claim::Null(name),
        );
        c.getfh();
        a.call(&c)
    };
    let r = open(&mut s, OpenHow::Guarded(SetAttrs::mode(0o640)), "g");
    assert_ok(&r);
    let g = r.last().unwrap().fh().unwrap().to_vec();
    let o = r.find(op::OPEN).unwrap().open().unwrap();
    assert!(client::bitmap_has(&o.attrset, attr::MODE), "{o:?}");
    let r = open(&mut s, OpenHow::Guarded(SetAttrs::default()), "g");
    assert_eq!(failed_with(&r), st(Nfs4Error::Exist));
    // EXCLUSIVE4_1: the same verifier finds the file it made, another does not.
    let r = open(
        &mut s,
        OpenHow::Exclusive41(*b"exclverf", SetAttrs::default()),
        "x",
    );
    assert_ok(&r);
    let x = r.last().unwrap().fh().unwrap().to_vec();
    let r = open(
        &mut s,
        OpenHow::Exclusive41(*b"exclverf", SetAttrs::default()),
        "x",
    );
    assert_ok(&r);
    assert_eq!(r.last().unwrap().fh().unwrap(), &x[..]);
    let r = open(
        &mut s,
        OpenHow::Exclusive41(*b"otherone", SetAttrs::default()),
        "x",
    );
    assert_eq!(failed_with(&r), st(Nfs4Error::Exist));
    // NOCREATE of a missing name, and of a directory.
    let r = open(&mut s, OpenHow::NoCreate, "missing");
    assert_eq!(failed_with(&r), st(Nfs4Error::NoEnt));
    let mut c = s.compound();
    c.putfh(&dir).mkdir("sub", &SetAttrs::default());
    a.ok(&c);
    let r = open(&mut s, OpenHow::NoCreate, "sub");
    assert_eq!(failed_with(&r), st(Nfs4Error::IsDir));
    // CLAIM_FH opens the current file.
    let mut c = s.compound();
    c.putfh(&g).open(
        SHARE_ACCESS_READ,
        SHARE_DENY_NONE,
        s.clientid,
        b"other-owner",
        &OpenHow::NoCreate,
        &Claim::Fh,
    );
    c.getfh();
    let r = a.ok(&c);
    assert_eq!(r.last().unwrap().fh().unwrap(), &g[..]);
}

#[test]
fn namespace_operations_symlink_readlink_rename_link_remove_access_secinfo() {
    let srv = Server::new();
    let a = srv.client_a();
    let mut s = a.session("client-a");
    let dir = a.mkdir(&mut s, "d");
    let (f, sid) = a.open(&mut s, &dir, "f", SHARE_ACCESS_BOTH, SHARE_DENY_NONE, "o");
    assert_ok(&a.on(&mut s, &f, |c| {
        c.close(&sid);
    }));
    let r = a.on(&mut s, &dir, |c| {
        c.symlink("s", "f", &SetAttrs::default())
            .getattr(&[attr::TYPE])
            .readlink();
    });
    assert_ok(&r);
    assert_eq!(r.results[3].attrs().unwrap().kind, Some(NF4LNK));
    assert_eq!(r.results[4].res, client::Res::Readlink(b"f".to_vec()));
    // RENAME f to g (saved and current are the same directory), LINK g as h.
    let r = a.on(&mut s, &dir, |c| {
        c.savefh()
            .rename("f", "g")
            .putfh(&f)
            .savefh()
            .putfh(&dir)
            .link("h");
        c.lookup("h").getattr(&[attr::NUMLINKS]).getfh();
    });
    assert_ok(&r);
    let last = r.results.len() - 1;
    assert_eq!(r.results[last - 1].attrs().unwrap().numlinks, Some(2));
    assert_eq!(r.results[last].fh().unwrap(), &f[..]);
    let r = a.on(&mut s, &dir, |c| {
        c.lookup("f");
    });
    assert_eq!(failed_with(&r), st(Nfs4Error::NoEnt));
    let r = a.on(&mut s, &dir, |c| {
        c.remove("g").remove("h").remove("s").remove("g");
    });
    assert_eq!(failed_with(&r), st(Nfs4Error::NoEnt));
    assert_eq!(r.results.len(), 6);
    // ACCESS of the directory as root: everything asked for.
    let r = a.on(&mut s, &dir, |c| {
        c.access(0x1f);
    });
    assert_ok(&r);
    assert_eq!(
        r.last().unwrap().res,
        client::Res::Access {
            supported: 0x1f,
            access: 0x1f
        }
    );
    // SECINFO_NO_NAME: AUTH_SYS, and the current handle is used up.
    let r = a.on(&mut s, &dir, |c| {
        c.secinfo_no_name(false).getfh();
    });
    assert_eq!(r.results[2].res, client::Res::Secinfo(vec![rpc::AUTH_SYS]));
    assert_eq!(failed_with(&r), st(Nfs4Error::NoFileHandle));
    // SAVEFH and RESTOREFH.
    let r = a.on(&mut s, &dir, |c| {
        c.savefh().putrootfh().restorefh().getfh();
    });
    assert_ok(&r);
    assert_eq!(r.last().unwrap().fh().unwrap(), &dir[..]);
}

#[test]
fn seek_in_4_2_finds_data_and_the_hole_at_the_end() {
    let srv = Server::new();
    let a = srv.client_a();
    let mut s = a.session("client-a");
    let dir = a.mkdir(&mut s, "d");
    let (fh, sid) = a.open(&mut s, &dir, "f", SHARE_ACCESS_BOTH, SHARE_DENY_NONE, "o");
    assert_ok(&a.on(&mut s, &fh, |c| {
        c.write(&sid, 0, FILE_SYNC4, &[1; 100]);
    }));
    let mut c = s.compound();
    c.minor(2)
        .putfh(&fh)
        .seek(&sid, 10, false)
        .seek(&sid, 10, true);
    let r = a.ok(&c);
    assert_eq!(
        r.results[2].res,
        client::Res::Seek {
            eof: false,
            offset: 10
        }
    );
    assert_eq!(
        r.results[3].res,
        client::Res::Seek {
            eof: true,
            offset: 100
        }
    );
    // SEEK is not an operation of 4.1.
    let r = a.on(&mut s, &fh, |c| {
        c.seek(&sid, 0, false);
    });
    assert_eq!(failed_with(&r), st(Nfs4Error::OpIllegal));
    assert_eq!(r.last().unwrap().op, op::ILLEGAL);
}

// ---- files open after their last name went ----

#[test]
fn an_open_file_whose_name_is_removed_stays_usable_until_close_then_its_handle_is_stale() {
    let srv = Server::new();
    let a = srv.client_a();
    let mut s = a.session("client-a");
    let dir = a.mkdir(&mut s, "d");
    let mut c = s.compound();
    c.putfh(&dir)
        .open(
            SHARE_ACCESS_BOTH,
            SHARE_DENY_NONE,
            s.clientid,
            b"o",
            &OpenHow::Unchecked(SetAttrs::default()),
            &Claim::Null("gone"),
        )
        .getfh();
    let r = a.ok(&c);
    let o = r.results[2].open().unwrap().clone();
    assert_ne!(o.rflags & OPEN4_RESULT_PRESERVE_UNLINKED, 0, "{o:?}");
    let fh = r.last().unwrap().fh().unwrap().to_vec();
    let sid = o.stateid;
    assert_ok(&a.on(&mut s, &fh, |c| {
        c.write(&sid, 0, FILE_SYNC4, b"before");
    }));
    assert_ok(&a.on(&mut s, &dir, |c| {
        c.remove("gone");
    }));
    let r = a.on(&mut s, &dir, |c| {
        c.lookup("gone");
    });
    assert_eq!(failed_with(&r), st(Nfs4Error::NoEnt));
    let r = a.on(&mut s, &fh, |c| {
        c.write(&sid, 6, FILE_SYNC4, b"+after")
            .read(&sid, 0, 100)
            .getattr(&[attr::SIZE, attr::NUMLINKS]);
    });
    assert_ok(&r);
    assert_eq!(r.results[3].read().unwrap(), (true, &b"before+after"[..]));
    let at = r.results[4].attrs().unwrap();
    assert_eq!((at.size, at.numlinks), (Some(12), Some(0)));
    assert_ok(&a.on(&mut s, &fh, |c| {
        c.close(&sid);
    }));
    let r = a.on(&mut s, &fh, |c| {
        c.getattr(&[attr::SIZE]);
    });
    assert_eq!(failed_with(&r), st(Nfs4Error::Stale));
}

// ---- share reservations ----

#[test]
fn deny_write_refuses_another_clients_write_open_until_the_holder_closes() {
    let srv = Server::new();
    let (a, b) = (srv.client_a(), srv.client_b());
    let mut sa = a.session("client-a");
    let mut sb = b.session("client-b");
    let dir = a.mkdir(&mut sa, "d");
    let (fh, sid) = a.open(
        &mut sa,
        &dir,
        "f",
        SHARE_ACCESS_READ,
        SHARE_DENY_WRITE,
        "oa",
    );
    let open_b = |sb: &mut Session, access: u32| {
        let mut c = sb.compound();
        c.putfh(&dir).open(
            access,
            SHARE_DENY_NONE,
            sb.clientid,
            b"ob",
            &OpenHow::NoCreate,
            &Claim::Null("f"),
        );
        b.call(&c)
    };
    assert_eq!(
        failed_with(&open_b(&mut sb, SHARE_ACCESS_WRITE)),
        st(Nfs4Error::ShareDenied)
    );
    assert_eq!(
        failed_with(&open_b(&mut sb, SHARE_ACCESS_BOTH)),
        st(Nfs4Error::ShareDenied)
    );
    // Reading is not denied.
    let r = open_b(&mut sb, SHARE_ACCESS_READ);
    assert_ok(&r);
    assert_ok(&a.on(&mut sa, &fh, |c| {
        c.close(&sid);
    }));
    assert_ok(&open_b(&mut sb, SHARE_ACCESS_WRITE));
}

// ---- OPEN with create of a file that exists ----

/// Root makes directory `d` (mode `dir_mode`) holding `f` (mode `file_mode`, 100
/// bytes): `d`'s handle.
fn root_makes_d_f(a: &Client<'_>, s: &mut Session, dir_mode: u32, file_mode: u32) -> Vec<u8> {
    let root = a.share_root(s);
    let mut c = s.compound();
    c.putfh(&root).mkdir("d", &SetAttrs::mode(dir_mode)).getfh();
    let dir = a.ok(&c).last().unwrap().fh().unwrap().to_vec();
    let mut c = s.compound();
    c.putfh(&dir).open(
        SHARE_ACCESS_BOTH,
        SHARE_DENY_NONE,
        s.clientid,
        b"root",
        &OpenHow::Unchecked(SetAttrs::mode(file_mode)),
        &Claim::Null("f"),
    );
    c.write(&Stateid::CURRENT, 0, FILE_SYNC4, &[5; 100])
        .close(&Stateid::CURRENT);
    a.ok(&c);
    dir
}

fn size_of(a: &Client<'_>, s: &mut Session, dir: &[u8], name: &str) -> u64 {
    let r = a.on(s, dir, |c| {
        c.lookup(name).getattr(&[attr::SIZE]);
    });
    assert_ok(&r);
    r.last().unwrap().attrs().unwrap().size.unwrap()
}

#[test]
fn open_unchecked_of_an_existing_file_needs_no_write_permission_on_its_directory() {
    let srv = Server::new();
    let root = srv.client_a();
    let mut sr = root.session("root");
    let dir = root_makes_d_f(&root, &mut sr, 0o755, 0o666);
    let user = srv.client_b().with_user(1000);
    let mut su = user.session("user");
    let mut c = su.compound();
    c.putfh(&dir).open(
        SHARE_ACCESS_BOTH,
        SHARE_DENY_NONE,
        su.clientid,
        b"u",
        &OpenHow::Unchecked(SetAttrs::default()),
        &Claim::Null("f"),
    );
    let r = user.call(&c);
    assert_ok(&r);
}

#[test]
fn open_unchecked_with_size_0_never_truncates_a_file_the_caller_may_not_write() {
    let srv = Server::new();
    let root = srv.client_a();
    let mut sr = root.session("root");
    let dir = root_makes_d_f(&root, &mut sr, 0o777, 0o644);
    let user = srv.client_b().with_user(1000);
    let mut su = user.session("user");
    for access in [SHARE_ACCESS_READ, SHARE_ACCESS_WRITE] {
        let mut c = su.compound();
        c.putfh(&dir).open(
            access,
            SHARE_DENY_NONE,
            su.clientid,
            b"u",
            &OpenHow::Unchecked(SetAttrs::size(0)),
            &Claim::Null("f"),
        );
        let r = user.call(&c);
        assert_eq!(size_of(&root, &mut sr, &dir, "f"), 100, "access {access}");
        assert_ne!(failed_with(&r), 0, "access {access}");
    }
}

#[test]
fn open_unchecked_with_size_0_denied_by_another_clients_deny_write_truncates_nothing() {
    let srv = Server::new();
    let (a, b) = (srv.client_a(), srv.client_b());
    let mut sa = a.session("client-a");
    let mut sb = b.session("client-b");
    let dir = root_makes_d_f(&a, &mut sa, 0o755, 0o644);
    let mut c = sa.compound();
    c.putfh(&dir).open(
        SHARE_ACCESS_READ,
        SHARE_DENY_WRITE,
        sa.clientid,
        b"oa",
        &OpenHow::NoCreate,
        &Claim::Null("f"),
    );
    a.ok(&c);
    let mut c = sb.compound();
    c.putfh(&dir).open(
        SHARE_ACCESS_WRITE,
        SHARE_DENY_NONE,
        sb.clientid,
        b"ob",
        &OpenHow::Unchecked(SetAttrs::size(0)),
        &Claim::Null("f"),
    );
    assert_eq!(failed_with(&b.call(&c)), st(Nfs4Error::ShareDenied));
    assert_eq!(size_of(&a, &mut sa, &dir, "f"), 100);
}
