//! RFC 8881 section 15.2, operation by operation: the errors every operation that
//! works on the current file handle shares, as tables. Without a current file handle
//! (NOFILEHANDLE); on the wrong type of object (NOTDIR, ISDIR, SYMLINK,
//! WRONG_TYPE, INVAL); with names that cannot be (zero length, not UTF-8, "." and
//! "..", too long); and with arguments cut short (BADXDR).

use nfs::v4::client::{
    attr, Claim, Compound, OpenHow, SetAttrs, Stateid, FILE_SYNC4, SHARE_ACCESS_BOTH,
    SHARE_ACCESS_READ, SHARE_DENY_NONE, WRITE_LT,
};
use nfs::v4::{op, Nfs4Error};
use Nfs4Error::*;

const NF4FIFO: u32 = 7;

mod common;
use common::harness::*;

/// A directory of the share holding the file `f` (open, and locked by lock owner
/// "l"), the symbolic link `l` to it, the directory `sub`, and a fifo `p`.
struct Fixture<'s> {
    a: Client<'s>,
    s: nfs::v4::client::Session,
    dir: Vec<u8>,
    file: Vec<u8>,
    link: Vec<u8>,
    fifo: Vec<u8>,
    open: Stateid,
    lock: Stateid,
}

/// A fresh fixture in the directory `name` (each case its own, so none sees
/// another's state).
fn fixture<'s>(srv: &'s Server, name: &str) -> Fixture<'s> {
    let a = srv.client_a();
    let mut s = a.session(name);
    let dir = a.mkdir(&mut s, name);
    let (file, open) = a.open(&mut s, &dir, "f", SHARE_ACCESS_BOTH, SHARE_DENY_NONE, "o");
    let clientid = s.clientid;
    let r = a.on(&mut s, &file, |c| {
        c.lock_new(WRITE_LT, 0, 10, &open, clientid, b"l");
    });
    assert_ok(&r);
    let lock = r.last().unwrap().stateid().unwrap();
    let mut c = s.compound();
    c.putfh(&dir)
        .symlink("l", "f", &SetAttrs::default())
        .getfh();
    let link = a.ok(&c).last().unwrap().fh().unwrap().to_vec();
    let mut c = s.compound();
    c.putfh(&dir).mkdir("sub", &SetAttrs::mode(0o755));
    a.ok(&c);
    let mut c = s.compound();
    let mut e = nfs::xdr::Encoder::new();
    e.u32(NF4FIFO).opaque(b"p");
    SetAttrs::mode(0o644).encode(&mut e);
    c.putfh(&dir).raw_op(op::CREATE, &e.buf).getfh();
    let fifo = a.ok(&c).last().unwrap().fh().unwrap().to_vec();
    Fixture {
        a,
        s,
        dir,
        file,
        link,
        fifo,
        open,
        lock,
    }
}

type AddOp = fn(&mut Compound, &Fixture<'_>);

/// Every operation that works on the current file handle, with arguments that
/// would do for the fixture's file or directory.
fn on_current_fh() -> Vec<(&'static str, AddOp)> {
    vec![
        ("ACCESS", |c, _| {
            c.access(0x3f);
        }),
        ("CLOSE", |c, f| {
            c.close(&f.open);
        }),
        ("COMMIT", |c, _| {
            c.commit(0, 0);
        }),
        ("CREATE", |c, _| {
            c.mkdir("new", &SetAttrs::mode(0o755));
        }),
        ("DELEGRETURN", |c, f| {
            c.delegreturn(&f.open);
        }),
        ("GETATTR", |c, _| {
            c.getattr(&[attr::SIZE]);
        }),
        ("GETFH", |c, _| {
            c.getfh();
        }),
        ("LINK", |c, _| {
            c.link("new");
        }),
        ("LOCK", |c, f| {
            c.lock_existing(WRITE_LT, 20, 10, &f.lock);
        }),
        ("LOCKT", |c, f| {
            c.lockt(WRITE_LT, 0, 10, f.s.clientid, b"other");
        }),
        ("LOCKU", |c, f| {
            c.locku(WRITE_LT, &f.lock, 0, 10);
        }),
        ("LOOKUP", |c, _| {
            c.lookup("f");
        }),
        ("LOOKUPP", |c, _| {
            c.lookupp();
        }),
        ("NVERIFY", |c, _| {
            c.raw_op(op::NVERIFY, &verify_size_0());
        }),
        ("OPEN", |c, f| {
            c.open(
                SHARE_ACCESS_READ,
                SHARE_DENY_NONE,
                f.s.clientid,
                b"o2",
                &OpenHow::NoCreate,
                &Claim::Null("f"),
            );
        }),
        ("OPEN_DOWNGRADE", |c, f| {
            c.open_downgrade(&f.open, SHARE_ACCESS_READ, SHARE_DENY_NONE);
        }),
        ("READ", |c, f| {
            c.read(&f.open, 0, 10);
        }),
        ("READDIR", |c, _| {
            c.readdir(0, &[0; 8], 4096, &[attr::TYPE]);
        }),
        ("READLINK", |c, _| {
            c.readlink();
        }),
        ("REMOVE", |c, _| {
            c.remove("nothing");
        }),
        ("RENAME", |c, _| {
            c.rename("nothing", "new");
        }),
        ("SAVEFH", |c, _| {
            c.savefh();
        }),
        ("SECINFO", |c, _| {
            c.raw_op(op::SECINFO, &name_arg("f"));
        }),
        ("SECINFO_NO_NAME", |c, _| {
            c.secinfo_no_name(false);
        }),
        ("SETATTR", |c, f| {
            c.setattr(&f.open, &SetAttrs::mode(0o600));
        }),
        ("VERIFY", |c, _| {
            c.raw_op(op::VERIFY, &verify_size_0());
        }),
        ("WRITE", |c, f| {
            c.write(&f.open, 0, FILE_SYNC4, b"x");
        }),
        ("SEEK", |c, f| {
            c.seek(&f.open, 0, false);
        }),
        ("ALLOCATE", |c, f| {
            c.raw_op(op::ALLOCATE, &range_arg(&f.open));
        }),
        ("DEALLOCATE", |c, f| {
            c.raw_op(op::DEALLOCATE, &range_arg(&f.open));
        }),
    ]
}

/// A component name as XDR.
fn name_arg(name: &str) -> Vec<u8> {
    let mut e = nfs::xdr::Encoder::new();
    e.opaque(name.as_bytes());
    e.buf
}

/// fattr4 of SIZE = 0 (VERIFY, NVERIFY).
fn verify_size_0() -> Vec<u8> {
    let mut e = nfs::xdr::Encoder::new();
    e.u32(1).u32(1 << attr::SIZE);
    e.opaque(&0u64.to_be_bytes());
    e.buf
}

/// stateid, offset 0, length 10 (ALLOCATE, DEALLOCATE).
fn range_arg(s: &Stateid) -> Vec<u8> {
    let mut e = nfs::xdr::Encoder::new();
    s.encode(&mut e);
    e.u64(0).u64(10);
    e.buf
}

type NameOp = fn(&mut Compound, &Fixture<'_>, &[u8]);

fn raw_name(c: &mut Compound, opnum: u32, name: &[u8]) {
    let mut e = nfs::xdr::Encoder::new();
    e.opaque(name);
    c.raw_op(opnum, &e.buf);
}

/// Operations taking a component name in the current directory.
fn with_a_name() -> Vec<(&'static str, NameOp)> {
    vec![
        ("LOOKUP", |c, _, n| raw_name(c, op::LOOKUP, n)),
        ("REMOVE", |c, _, n| raw_name(c, op::REMOVE, n)),
        ("SECINFO", |c, _, n| raw_name(c, op::SECINFO, n)),
        ("CREATE", |c, _, n| {
            let mut e = nfs::xdr::Encoder::new();
            e.u32(2).opaque(n); // NF4DIR
            SetAttrs::mode(0o755).encode(&mut e);
            c.raw_op(op::CREATE, &e.buf);
        }),
        ("CREATE-link", |c, _, n| {
            let mut e = nfs::xdr::Encoder::new();
            e.u32(5).opaque(b"f").opaque(n); // NF4LNK
            SetAttrs::default().encode(&mut e);
            c.raw_op(op::CREATE, &e.buf);
        }),
        ("LINK", |c, f, n| {
            c.putfh(&f.file).savefh().putfh(&f.dir);
            raw_name(c, op::LINK, n);
        }),
        ("RENAME-from", |c, _, n| {
            c.savefh();
            let mut e = nfs::xdr::Encoder::new();
            e.opaque(n).opaque(b"x");
            c.raw_op(op::RENAME, &e.buf);
        }),
        ("RENAME-to", |c, _, n| {
            c.savefh();
            let mut e = nfs::xdr::Encoder::new();
            e.opaque(b"f").opaque(n);
            c.raw_op(op::RENAME, &e.buf);
        }),
        ("OPEN", |c, f, n| {
            let mut e = nfs::xdr::Encoder::new();
            e.u32(0).u32(SHARE_ACCESS_BOTH).u32(SHARE_DENY_NONE);
            e.u64(f.s.clientid).opaque(b"o3");
            e.u32(1).u32(0); // UNCHECKED4
            SetAttrs::mode(0o644).encode(&mut e);
            e.u32(0).opaque(n); // CLAIM_NULL
            c.raw_op(op::OPEN, &e.buf);
        }),
    ]
}

/// The results' status of `c`'s last operation.
fn last_status(f: &Fixture<'_>, c: &Compound) -> u32 {
    f.a.call(c).last().unwrap().status
}

/// Collects every case whose status is not one the RFC allows, to report them all.
#[derive(Default)]
struct Deviations(Vec<String>);

impl Deviations {
    fn check(&mut self, case: &str, got: u32, allowed: &[Nfs4Error]) {
        if !allowed.iter().any(|e| st(*e) == got) {
            self.0
                .push(format!("{case}: got {got}, allowed {allowed:?}"));
        }
    }

    fn check_or_ok(&mut self, case: &str, got: u32, allowed: &[Nfs4Error]) {
        if got != 0 {
            self.check(case, got, allowed);
        }
    }

    fn check_ok(&mut self, case: &str, got: u32) {
        if got != 0 {
            self.0.push(format!("{case}: got {got}, allowed OK"));
        }
    }

    fn assert_none(self) {
        assert!(
            self.0.is_empty(),
            "{} deviations:\n{}",
            self.0.len(),
            self.0.join("\n")
        );
    }
}

/// Rule: every operation that works on the current file handle answers
/// NOFILEHANDLE without one (RFC 8881 section 15.2, and each operation's section).
#[test]
fn every_operation_on_the_current_file_handle_wants_one() {
    let srv = Server::new();
    let mut f = fixture(&srv, "nofh");
    let mut bad = Deviations::default();
    for (name, add) in on_current_fh() {
        let mut c = f.s.compound();
        if matches!(name, "SEEK" | "ALLOCATE" | "DEALLOCATE") {
            c.minor(2);
        }
        add(&mut c, &f);
        // ALLOCATE is not served (NOTSUPP whatever its arguments, as RFC 7862 allows).
        let allowed: &[Nfs4Error] = if name == "ALLOCATE" {
            &[NotSupp]
        } else {
            &[NoFileHandle]
        };
        bad.check(name, last_status(&f, &c), allowed);
    }
    // RESTOREFH with nothing saved: RESTOREFH, whatever the current file handle.
    let mut c = f.s.compound();
    c.putfh(&f.dir).restorefh();
    bad.check("RESTOREFH", last_status(&f, &c), &[RestoreFh]);
    // LINK and RENAME with a current but no saved file handle.
    for (name, add) in [
        (
            "LINK",
            (|c: &mut Compound| {
                c.link("x");
            }) as fn(&mut Compound),
        ),
        ("RENAME", |c| {
            c.rename("f", "x");
        }),
    ] {
        let mut c = f.s.compound();
        c.putfh(&f.dir);
        add(&mut c);
        bad.check(
            &format!("{name} without a saved file handle"),
            last_status(&f, &c),
            &[NoFileHandle],
        );
    }
    bad.assert_none();
}

/// The objects an operation may find as its current file handle.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Object {
    Dir,
    File,
    Link,
    Fifo,
}

fn fh_of(f: &Fixture<'_>, o: Object) -> Vec<u8> {
    match o {
        Object::Dir => f.dir.clone(),
        Object::File => f.file.clone(),
        Object::Link => f.link.clone(),
        Object::Fifo => f.fifo.clone(),
    }
}

/// Rule: an operation on the wrong type of object. 4.1 (RFC 8881): a directory
/// operation on a non-directory is NOTDIR (a symbolic link: SYMLINK, for LOOKUP and
/// LOOKUPP), a file operation on a directory ISDIR, on a symbolic link SYMLINK, on
/// anything else WRONG_TYPE; READLINK of anything but a symbolic link INVAL.
#[test]
fn operations_on_the_wrong_type_of_object_say_which() {
    use Object::*;
    let srv = Server::new();
    let mut bad = Deviations::default();
    let dir_op = |c: &mut Compound, name: &str, f: &Fixture<'_>| match name {
        "LOOKUP" => {
            c.lookup("f");
        }
        "LOOKUPP" => {
            c.lookupp();
        }
        "CREATE" => {
            c.mkdir("new", &SetAttrs::mode(0o755));
        }
        "REMOVE" => {
            c.remove("f");
        }
        "READDIR" => {
            c.readdir(0, &[0; 8], 4096, &[attr::TYPE]);
        }
        "SECINFO" => {
            c.raw_op(op::SECINFO, &name_arg("f"));
        }
        "OPEN" => {
            c.open(
                SHARE_ACCESS_READ,
                SHARE_DENY_NONE,
                f.s.clientid,
                b"o2",
                &OpenHow::NoCreate,
                &Claim::Null("f"),
            );
        }
        // The current file handle as LINK's target directory (the file saved).
        "LINK" => {
            c.link("new");
        }
        // Both directories of RENAME.
        "RENAME" => {
            c.rename("f", "new");
        }
        _ => unreachable!(),
    };
    for name in [
        "LOOKUP", "LOOKUPP", "CREATE", "REMOVE", "READDIR", "SECINFO", "OPEN", "LINK", "RENAME",
    ] {
        for (o, allowed) in [
            (File, &[NotDir][..]),
            (Fifo, &[NotDir][..]),
            (
                Link,
                if matches!(name, "LOOKUP" | "LOOKUPP" | "OPEN") {
                    &[Symlink][..]
                } else {
                    &[NotDir, Symlink][..]
                },
            ),
        ] {
            let mut f = fixture(&srv, &format!("{name}-{o:?}").to_lowercase());
            let mut c = f.s.compound();
            match name {
                "LINK" => {
                    c.putfh(&f.file).savefh().putfh(&fh_of(&f, o));
                }
                "RENAME" => {
                    c.putfh(&fh_of(&f, o)).savefh();
                }
                _ => {
                    c.putfh(&fh_of(&f, o));
                }
            }
            dir_op(&mut c, name, &f);
            bad.check(&format!("{name} on a {o:?}"), last_status(&f, &c), allowed);
        }
    }
    // LINK of a directory.
    let mut f = fixture(&srv, "link-of-dir");
    let mut c = f.s.compound();
    c.putfh(&f.dir).savefh().putfh(&f.dir).link("new");
    bad.check("LINK of a Dir", last_status(&f, &c), &[IsDir]);
    // File operations.
    let file_op = |c: &mut Compound, name: &str, f: &Fixture<'_>| match name {
        "READ" => {
            c.read(&Stateid::ANONYMOUS, 0, 10);
        }
        "WRITE" => {
            c.write(&Stateid::ANONYMOUS, 0, FILE_SYNC4, b"x");
        }
        "COMMIT" => {
            c.commit(0, 0);
        }
        "LOCKT" => {
            c.lockt(WRITE_LT, 0, 10, f.s.clientid, b"other");
        }
        "OPEN" => {
            c.open(
                SHARE_ACCESS_READ,
                SHARE_DENY_NONE,
                f.s.clientid,
                b"o2",
                &OpenHow::NoCreate,
                &Claim::Fh,
            );
        }
        "READLINK" => {
            c.readlink();
        }
        _ => unreachable!(),
    };
    for name in ["READ", "WRITE", "COMMIT", "LOCKT", "OPEN", "READLINK"] {
        for (o, allowed) in [
            (Dir, IsDir),
            (Link, Symlink),
            (Fifo, WrongType),
            (File, Inval),
        ] {
            let allowed = if name == "READLINK" { Inval } else { allowed };
            if o == File && name != "READLINK" || o == Link && name == "READLINK" {
                continue;
            }
            let mut f = fixture(&srv, &format!("file-op-{name}-{o:?}").to_lowercase());
            let mut c = f.s.compound();
            c.putfh(&fh_of(&f, o));
            file_op(&mut c, name, &f);
            bad.check(
                &format!("{name} on a {o:?}"),
                last_status(&f, &c),
                &[allowed],
            );
        }
    }
    bad.assert_none();
}

/// Rule: names that cannot be. Zero length or not UTF-8: INVAL; "." and "..", a
/// slash or a NUL: BADNAME; longer than 255 bytes: NAMETOOLONG. For every operation
/// that takes a component name (both of RENAME's).
#[test]
fn names_that_cannot_be_are_refused_the_same_way_by_every_operation() {
    let srv = Server::new();
    let mut f = fixture(&srv, "names");
    let long = vec![b'x'; 256];
    let names: Vec<(&str, &[u8], Nfs4Error)> = vec![
        ("empty", b"", Inval),
        ("'.'", b".", BadName),
        ("'..'", b"..", BadName),
        ("'a/b'", b"a/b", BadName),
        ("not UTF-8", b"\xff\xfe", Inval),
        ("a NUL", b"a\0b", BadName),
        ("256 bytes", &long, NameTooLong),
    ];
    let mut bad = Deviations::default();
    for (opname, add) in with_a_name() {
        for (what, n, want) in &names {
            let mut c = f.s.compound();
            c.putfh(&f.dir);
            add(&mut c, &f, n);
            bad.check(
                &format!("{opname} of {what}"),
                last_status(&f, &c),
                &[*want],
            );
        }
    }
    // A symbolic link's target may not be empty either.
    let mut c = f.s.compound();
    let mut e = nfs::xdr::Encoder::new();
    e.u32(5).opaque(b"").opaque(b"empty-link");
    SetAttrs::default().encode(&mut e);
    c.putfh(&f.dir).raw_op(op::CREATE, &e.buf);
    bad.check(
        "CREATE of a link to ''",
        last_status(&f, &c),
        &[Inval, NoEnt],
    );
    bad.assert_none();
}

/// Rule: arguments cut short are BADXDR, for every operation that has arguments.
#[test]
fn every_operation_s_arguments_cut_short_are_badxdr() {
    let srv = Server::new();
    let mut f = fixture(&srv, "xdr");
    let mut bad = Deviations::default();
    for opnum in [
        op::ACCESS,
        op::CLOSE,
        op::COMMIT,
        op::CREATE,
        op::DELEGRETURN,
        op::GETATTR,
        op::LINK,
        op::LOCK,
        op::LOCKT,
        op::LOCKU,
        op::LOOKUP,
        op::NVERIFY,
        op::OPEN,
        op::OPEN_DOWNGRADE,
        op::PUTFH,
        op::READ,
        op::READDIR,
        op::REMOVE,
        op::RENAME,
        op::SECINFO,
        op::SETATTR,
        op::VERIFY,
        op::WRITE,
        op::SECINFO_NO_NAME,
        op::TEST_STATEID,
        op::FREE_STATEID,
        op::RECLAIM_COMPLETE,
        op::DESTROY_SESSION,
    ] {
        let mut c = f.s.compound();
        c.putfh(&f.file).raw_op(opnum, &[0, 0]);
        let r = f.a.call(&c);
        let got = r.last().unwrap().status;
        bad.check(
            &format!("{} with 2 bytes of arguments", op::name(opnum)),
            got,
            &[BadXdr],
        );
    }
    bad.assert_none();
}

/// An fattr4 of one attribute with its XDR value.
fn fattr(attr_num: u32, value: &[u8]) -> Vec<u8> {
    let mut e = nfs::xdr::Encoder::new();
    let words = attr_num as usize / 32 + 1;
    e.u32(words as u32);
    for w in 0..words {
        e.u32(if w == attr_num as usize / 32 {
            1 << (attr_num % 32)
        } else {
            0
        });
    }
    e.opaque(value);
    e.buf
}

/// SETATTR of the anonymous stateid and `attrs` (an fattr4).
fn setattr_raw(c: &mut Compound, attrs: &[u8]) {
    let mut e = nfs::xdr::Encoder::new();
    Stateid::ANONYMOUS.encode(&mut e);
    e.buf.extend_from_slice(attrs);
    c.raw_op(op::SETATTR, &e.buf);
}

/// The rules of section 15.2 and the operations' own sections that are not about
/// the current file handle or names: object types CREATE refuses, attributes that
/// may not be set or asked, byte ranges, READDIR cookies, RENAME and LINK over
/// what exists, stateids that name nothing, SECINFO consuming the file handle, the
/// COMPOUND envelope, and the current stateid.
#[test]
fn the_other_rules_of_section_15_2() {
    let srv = Server::new();
    let mut f = fixture(&srv, "rules");
    let mut bad = Deviations::default();
    let dir = f.dir.clone();
    let file = f.file.clone();
    let run = |f: &mut Fixture<'_>, fh: &[u8], add: &dyn Fn(&mut Compound)| -> u32 {
        let mut c = f.s.compound();
        c.putfh(fh);
        add(&mut c);
        f.a.call(&c).last().unwrap().status
    };
    // CREATE of a regular file is OPEN's: BADTYPE.
    let got = run(&mut f, &dir, &|c| {
        let mut e = nfs::xdr::Encoder::new();
        e.u32(1).opaque(b"reg");
        SetAttrs::default().encode(&mut e);
        c.raw_op(op::CREATE, &e.buf);
    });
    bad.check("CREATE of NF4REG", got, &[BadType]);
    // Read-only attributes may not be set: INVAL (CREATE's createattrs, SETATTR).
    let link_support = fattr(5, &1u32.to_be_bytes());
    let got = run(&mut f, &dir, &|c| {
        let mut e = nfs::xdr::Encoder::new();
        e.u32(2).opaque(b"ro-attr");
        e.buf.extend_from_slice(&link_support);
        c.raw_op(op::CREATE, &e.buf);
    });
    bad.check("CREATE setting link_support", got, &[Inval]);
    let kind = fattr(attr::TYPE, &1u32.to_be_bytes());
    let got = run(&mut f, &file, &|c| setattr_raw(c, &kind));
    bad.check("SETATTR of type", got, &[Inval]);
    // An empty owner, and nanoseconds past a second.
    let mut owner = nfs::xdr::Encoder::new();
    owner.opaque(b"");
    let empty_owner = fattr(36, &owner.buf);
    let got = run(&mut f, &file, &|c| setattr_raw(c, &empty_owner));
    bad.check("SETATTR of owner ''", got, &[Inval]);
    let mut t = nfs::xdr::Encoder::new();
    t.u32(1).u64(1).u32(1_000_000_000);
    let bad_time = fattr(54, &t.buf);
    let got = run(&mut f, &file, &|c| setattr_raw(c, &bad_time));
    bad.check("SETATTR of a time with 10^9 nanoseconds", got, &[Inval]);
    // GETATTR of an attribute number nobody defined: OK, not returned; none: OK.
    let got = run(&mut f, &file, &|c| {
        let mut e = nfs::xdr::Encoder::new();
        e.u32(32);
        for w in 0..32 {
            e.u32(if w == 31 { 1 << (1000 % 32) } else { 0 });
        }
        c.raw_op(op::GETATTR, &e.buf);
    });
    bad.check_ok("GETATTR of attribute 1000", got);
    let got = run(&mut f, &file, &|c| {
        c.getattr(&[]);
    });
    bad.check_ok("GETATTR of no attribute", got);
    // A write-only attribute in VERIFY: INVAL.
    let mut t = nfs::xdr::Encoder::new();
    t.u32(0);
    let access_set = fattr(48, &t.buf);
    let got = run(&mut f, &file, &|c| {
        c.raw_op(op::VERIFY, &access_set);
    });
    bad.check("VERIFY of time_access_set", got, &[Inval]);
    // ACCESS with bits nobody defined: INVAL, or OK without them.
    let got = run(&mut f, &file, &|c| {
        c.access(0x40);
    });
    bad.check_or_ok("ACCESS of bit 0x40", got, &[Inval]);
    // Byte ranges: length 0 and past 2^64 are INVAL (LOCK, LOCKT, LOCKU, COMMIT).
    let (open, lock, clientid) = (f.open, f.lock, f.s.clientid);
    for (what, off, len) in [("length 0", 0, 0), ("past 2^64", u64::MAX - 10, 20)] {
        let got = run(&mut f, &file, &|c| {
            c.lock_existing(WRITE_LT, off, len, &lock);
        });
        bad.check(&format!("LOCK of {what}"), got, &[Inval]);
        let got = run(&mut f, &file, &|c| {
            c.lockt(WRITE_LT, off, len, clientid, b"other");
        });
        bad.check(&format!("LOCKT of {what}"), got, &[Inval]);
        let got = run(&mut f, &file, &|c| {
            c.locku(WRITE_LT, &lock, off, len);
        });
        bad.check(&format!("LOCKU of {what}"), got, &[Inval]);
    }
    let got = run(&mut f, &file, &|c| {
        c.commit(0xffff_ffff_ffff_fff0, 64);
    });
    bad.check("COMMIT past 2^64", got, &[Inval]);
    // READDIR: cookies 1 and 2 are "." and "..", never handed out: BAD_COOKIE; a
    // maxcount too small for one entry: TOOSMALL.
    for cookie in [1, 2] {
        let got = run(&mut f, &dir, &|c| {
            c.readdir(cookie, &[0; 8], 4096, &[attr::TYPE]);
        });
        bad.check(&format!("READDIR from cookie {cookie}"), got, &[BadCookie]);
    }
    let got = run(&mut f, &dir, &|c| {
        c.readdir(0, &[0; 8], 10, &[attr::TYPE]);
    });
    bad.check("READDIR of maxcount 10", got, &[TooSmall]);
    // RENAME and LINK over what exists.
    let got = run(&mut f, &dir, &|c| {
        c.mkdir("full", &SetAttrs::mode(0o755))
            .mkdir("inside", &SetAttrs::mode(0o755));
    });
    bad.check_ok("making full/inside", got);
    let got = run(&mut f, &dir, &|c| {
        c.mkdir("empty", &SetAttrs::mode(0o755));
    });
    bad.check_ok("making empty", got);
    for (from, to, allowed) in [
        ("sub", "f", &[Exist, NotDir][..]),
        ("f", "empty", &[Exist, IsDir][..]),
        ("sub", "full", &[Exist, NotEmpty][..]),
    ] {
        let got = run(&mut f, &dir, &|c| {
            c.savefh().rename(from, to);
        });
        bad.check(&format!("RENAME {from} onto {to}"), got, allowed);
    }
    let got = run(&mut f, &dir, &|c| {
        c.remove("full");
    });
    bad.check("REMOVE of a directory that is not empty", got, &[NotEmpty]);
    let got = run(&mut f, &file, &|c| {
        c.savefh().putfh(&dir).link("empty");
    });
    bad.check("LINK onto an existing name", got, &[Exist]);
    let got = run(&mut f, &dir, &|c| {
        c.mkdir("sub", &SetAttrs::mode(0o755));
    });
    bad.check("CREATE of an existing name", got, &[Exist]);
    // RENAME onto itself changes nothing, not even the directory's change.
    let mut c = f.s.compound();
    c.putfh(&dir).savefh().rename("f", "f");
    let r = f.a.call(&c);
    match &r.last().unwrap().res {
        nfs::v4::client::Res::Rename { source, target } => {
            if source.before != source.after || target.before != target.after {
                bad.0.push(format!(
                    "RENAME f onto itself changed the directory: {source:?} {target:?}"
                ));
            }
        }
        _ => bad
            .0
            .push(format!("RENAME f onto itself: {:?}", r.summary())),
    }
    // Stateids that name nothing: the anonymous stateid where an open or lock one is
    // needed is BAD_STATEID.
    let got = run(&mut f, &file, &|c| {
        c.close(&Stateid::ANONYMOUS);
    });
    bad.check("CLOSE of the anonymous stateid", got, &[BadStateId]);
    let got = run(&mut f, &file, &|c| {
        c.open_downgrade(&Stateid::ANONYMOUS, SHARE_ACCESS_READ, SHARE_DENY_NONE);
    });
    bad.check(
        "OPEN_DOWNGRADE of the anonymous stateid",
        got,
        &[BadStateId],
    );
    let got = run(&mut f, &file, &|c| {
        c.locku(WRITE_LT, &Stateid::ANONYMOUS, 0, 10);
    });
    bad.check("LOCKU of the anonymous stateid", got, &[BadStateId]);
    // OPEN_DOWNGRADE to an access the open does not have: INVAL.
    let got = run(&mut f, &file, &|c| {
        c.open_downgrade(&open, 0, SHARE_DENY_NONE);
    });
    bad.check("OPEN_DOWNGRADE to no access", got, &[Inval]);
    // OPEN_DOWNGRADE only to what some of the owner's OPENs asked for together:
    // opened for both alone, not down to READ; READ then BOTH, down to READ;
    // WRITE then BOTH, not down to READ (RFC 8881 18.18.3).
    for (i, (asked, allowed)) in [
        (&[SHARE_ACCESS_BOTH][..], Some(Inval)),
        (&[SHARE_ACCESS_READ, SHARE_ACCESS_BOTH][..], None),
        (&[2, SHARE_ACCESS_BOTH][..], Some(Inval)),
    ]
    .into_iter()
    .enumerate()
    {
        let owner = format!("down-{i}");
        let mut sid = Stateid::ANONYMOUS;
        let mut fh = Vec::new();
        for access in asked {
            let (h, s) =
                f.a.open(&mut f.s, &dir, &owner, *access, SHARE_DENY_NONE, &owner);
            (fh, sid) = (h, s);
        }
        let got = run(&mut f, &fh, &|c| {
            c.open_downgrade(&sid, SHARE_ACCESS_READ, SHARE_DENY_NONE);
        });
        let case = format!("OPEN_DOWNGRADE to READ after {asked:?}");
        match allowed {
            Some(e) => bad.check(&case, got, &[e]),
            None => bad.check_ok(&case, got),
        }
    }
    // A WRITE through an open for reading only: OPENMODE.
    let (ro_fh, ro) = f.a.open(
        &mut f.s,
        &dir,
        "ro",
        SHARE_ACCESS_READ,
        SHARE_DENY_NONE,
        "ro-owner",
    );
    let got = run(&mut f, &ro_fh, &|c| {
        c.write(&ro, 0, FILE_SYNC4, b"x");
    });
    bad.check("WRITE through a read open", got, &[OpenMode]);
    // SECINFO and SECINFO_NO_NAME consume the current file handle.
    let got = run(&mut f, &dir, &|c| {
        c.raw_op(op::SECINFO, &name_arg("f")).getfh();
    });
    bad.check("GETFH after SECINFO", got, &[NoFileHandle]);
    let got = run(&mut f, &dir, &|c| {
        c.secinfo_no_name(false).getfh();
    });
    bad.check("GETFH after SECINFO_NO_NAME", got, &[NoFileHandle]);
    // A file handle that is no file handle: BADHANDLE.
    let got = run(&mut f, b"abc", &|_| {});
    bad.check("PUTFH of 'abc'", got, &[BadHandle]);
    // The current stateid (seqid 1, other 0): OPEN, then WRITE and CLOSE through it;
    // an operation that changes the file handle clears it.
    let current = Stateid {
        seqid: 1,
        other: [0; 12],
    };
    // OPEN (creating) `name` in the directory, for open owner `name`.
    let open_named = |c: &mut Compound, name: &str| {
        c.putfh(&dir).open(
            SHARE_ACCESS_BOTH,
            SHARE_DENY_NONE,
            clientid,
            name.as_bytes(),
            &OpenHow::Unchecked(SetAttrs::mode(0o644)),
            &Claim::Null(name),
        );
    };
    let mut c = f.s.compound();
    open_named(&mut c, "cur");
    c.write(&current, 0, FILE_SYNC4, b"x").close(&current);
    let r = f.a.call(&c);
    bad.check_ok(
        "OPEN, WRITE and CLOSE through the current stateid",
        r.status,
    );
    let mut c = f.s.compound();
    open_named(&mut c, "cur2");
    c.putfh(&dir).lookup("cur2").close(&current);
    bad.check(
        "CLOSE of the current stateid after LOOKUP",
        f.a.call(&c).last().unwrap().status,
        &[BadStateId, StaleStateId],
    );
    let mut c = f.s.compound();
    open_named(&mut c, "cur3");
    c.savefh().putfh(&dir).restorefh().close(&current);
    bad.check_ok(
        "CLOSE of the current stateid kept by SAVEFH and RESTOREFH",
        f.a.call(&c).status,
    );
    // FREE_STATEID of an open stateid: LOCKS_HELD (only CLOSE frees an open).
    let got = run(&mut f, &file, &|c| {
        c.free_stateid(&open);
    });
    bad.check("FREE_STATEID of an open stateid", got, &[LocksHeld]);
    // The COMPOUND envelope: a minor version past 2 gets MINOR_VERS_MISMATCH and no
    // results; op 72 (4.2's GETXATTR) in 4.1 is OP_ILLEGAL; the tag comes back.
    let mut c = Compound::new("a tag");
    c.minor(50);
    c.putrootfh();
    let r = f.a.call(&c);
    bad.check(
        "COMPOUND of minor version 50",
        r.status,
        &[MinorVersMismatch],
    );
    if !r.results.is_empty() || r.tag != b"a tag" {
        bad.0.push(format!(
            "minor version 50: results {:?}, tag {:?}",
            r.summary(),
            r.tag
        ));
    }
    let mut c = f.s.compound();
    c.raw_op(72, &[]);
    bad.check(
        "op 72 in 4.1",
        f.a.call(&c).last().unwrap().status,
        &[OpIllegal],
    );
    bad.assert_none();
}
