//! NFSv3 (RFC 1813) and MOUNT v3: the wire types (`proto`), the 22 procedures
//! (`procedures`) and the MOUNT program (`mount`), all as methods of the one
//! `NfsService`, which resolves handles and applies the export rules for them.

mod mount;
mod procedures;
pub mod proto;
