//! `mount -t shoal POOL/FS DIR` and fstab lines such as
//! `tank/home  /mnt/home  shoal  rw,nofail  0 0`: mount(8) runs `/sbin/mount.shoal`
//! (a symbolic link to the shoal binary, which answers to that name) as
//! `mount.shoal SPEC DIR [-sfnv] [-N NS] [-o OPTIONS] [-t TYPE]`.
//!
//! With a daemon running, the daemon serves the mount, as `shoal mount` asks it to.
//! Without one, the helper starts `shoal mount` detached (its own process group, its
//! messages in the state directory's `mount-*.log`) and returns once the mount is in
//! place, or with the mount process's error if it failed; `umount DIR` then ends that
//! process, which commits the pool and exits.
//!
//! Options: shoal's own (`ro`, `rw`, `allow_other`); the generic ones mount(8) and
//! fstab use that mean nothing more to a FUSE mount (`defaults`, `auto`, `noauto`,
//! `nofail`, `_netdev`, `user`, `nosuid`, `x-...`, ...) are accepted and dropped; any
//! other is refused with the list of known ones.

use anyhow::{anyhow, bail, Context, Result};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The name mount(8) runs the helper by.
pub const HELPER_NAME: &str = "mount.shoal";

/// Options of fstab and mount(8) a shoal mount takes without acting on them.
const IGNORED: [&str; 17] = [
    "defaults", "auto", "noauto", "nofail", "_netdev", "user", "users", "nouser", "owner", "group",
    "dev", "nodev", "suid", "nosuid", "exec", "noexec", "relatime",
];

/// True when this process was started as `mount.shoal`.
pub fn invoked_as_helper() -> bool {
    std::env::args_os()
        .next()
        .and_then(|a| {
            Path::new(&a)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
        })
        .is_some_and(|n| n == HELPER_NAME)
}

#[derive(Debug, PartialEq)]
struct Request {
    dataset: String,
    dir: PathBuf,
    options: Vec<String>,
    /// `-f`: mount(8)'s "fake": do everything but the mount.
    fake: bool,
}

fn parse(args: &[String]) -> Result<Request> {
    let mut positional = Vec::new();
    let mut options = Vec::new();
    let mut fake = false;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "-o" => {
                let list = it.next().ok_or_else(|| anyhow!("-o needs a value"))?;
                for o in list.split(',') {
                    let ignored =
                        IGNORED.contains(&o) || o.starts_with("x-") || o.starts_with("comment=");
                    if !o.is_empty() && !ignored {
                        options.push(o.to_string());
                    }
                }
            }
            "-t" | "-N" => {
                it.next().ok_or_else(|| anyhow!("{a} needs a value"))?;
            }
            flags if flags.starts_with('-') && flags.len() > 1 => {
                for f in flags[1..].chars() {
                    match f {
                        'f' => fake = true,
                        's' | 'n' | 'v' => {}
                        other => bail!("unknown flag -{other} (mount(8) passes -s, -f, -n, -v)"),
                    }
                }
            }
            _ => positional.push(a.clone()),
        }
    }
    let [dataset, dir] = <[String; 2]>::try_from(positional)
        .map_err(|_| anyhow!("usage: mount.shoal POOL/FILESYSTEM DIR [-sfnv] [-o OPTIONS]"))?;
    Ok(Request {
        dataset,
        dir: PathBuf::from(dir),
        options,
        fake,
    })
}

/// Runs the helper with mount(8)'s arguments (after the program name); the exit
/// status mount(8) expects (0 mounted, 32 failed).
pub fn run(args: &[String]) -> i32 {
    match mount(args) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("mount.shoal: {e:#}");
            32
        }
    }
}

fn mount(args: &[String]) -> Result<()> {
    let req = parse(args)?;
    fuse::check_options(&req.options)?;
    let dir = req
        .dir
        .canonicalize()
        .with_context(|| format!("mount point {}", req.dir.display()))?;
    if req.fake {
        return Ok(());
    }
    if crate::admin::Api::running()?.is_some() {
        return crate::mount_cmd::mount(&req.dataset, &dir, &req.options);
    }
    let state = crate::registry::state_dir();
    std::fs::create_dir_all(&state)?;
    let log_name: String = dir
        .to_string_lossy()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    let log_path = state.join(format!("mount{log_name}.log"));
    let log = std::fs::File::create(&log_path)
        .with_context(|| format!("creating {}", log_path.display()))?;
    let mut cmd = std::process::Command::new(std::env::current_exe()?);
    cmd.arg("mount").arg(&req.dataset).arg(&dir);
    if !req.options.is_empty() {
        cmd.arg("-o").arg(req.options.join(","));
    }
    use std::os::unix::process::CommandExt;
    let mut child = cmd
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        // Its own process group: a signal to mount(8)'s group leaves it running.
        .process_group(0)
        .spawn()
        .context("starting shoal mount")?;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if server::mounts::is_mount_point(&dir) {
            return Ok(());
        }
        if let Some(status) = child.try_wait()? {
            let text = std::fs::read_to_string(&log_path).unwrap_or_default();
            bail!(
                "shoal mount ended ({status}) before mounting: {}",
                text.trim()
            );
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            bail!(
                "{} was not mounted within 60 s (see {})",
                dir.display(),
                log_path.display()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn reads_mounts_arguments() {
        let r = parse(&args(
            "tank/home /mnt/h -o rw,noauto,nofail,x-systemd.automount,allow_other -n -t shoal",
        ))
        .unwrap();
        assert_eq!(
            r,
            Request {
                dataset: "tank/home".into(),
                dir: "/mnt/h".into(),
                options: vec!["rw".into(), "allow_other".into()],
                fake: false,
            }
        );
        assert!(parse(&args("tank/home /mnt/h -sfv")).unwrap().fake);
        assert!(parse(&args("tank/home")).is_err());
        assert!(parse(&args("tank/home /mnt/h -o")).is_err());
        assert!(parse(&args("tank/home /mnt/h -x")).is_err());
        // Unknown options reach shoal's check, which names them.
        assert_eq!(
            parse(&args("t/h /m -o sync")).unwrap().options,
            vec!["sync"]
        );
        assert!(fuse::check_options(&["sync".into()]).is_err());
    }
}
